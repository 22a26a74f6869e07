/* How offloadrt runs the work-items of a portable kernel's work-group on the host.
 *
 * Included by offloadrt/gpu/gpuintrin.h (host builds only); offloadrt's generated wrappers use
 * it. Not for use on its own.
 *
 * A group runs on the thread that calls the kernel (the host plugin runs each group on one
 * thread). Kernels without barriers or lane operations loop over the items. The others run
 * each item as a fiber with its own stack. A round resumes every runnable fiber in item order,
 * each fiber handing the thread straight to the next when it waits or finishes (the group's own
 * context runs only between rounds); an item starts on its stack when a round first reaches it.
 * When every fiber has finished or waits:
 *   1. in every wavefront, the lanes waiting in a lane operation at the same call site get
 *      their results together (the lanes at that site are the active lanes);
 *   2. otherwise, when no lane is waiting in a lane operation, the group is at the barrier:
 *      every fiber waiting there continues (finished items count as arrived).
 * The floating-point environment (MXCSR, x87 control word) is the group's: saved when the group
 * starts and restored when it ends, not switched with each fiber.
 * Fiber stacks are kept per thread for the next group, and unmapped when the program unloads.
 */
#ifndef OFFLOADRT_GPU_HOST_RUNTIME_H
#define OFFLOADRT_GPU_HOST_RUNTIME_H

#include <offloadrt/host_kernel.h>
#include <sys/mman.h>
#ifndef MAP_ANONYMOUS /* hidden by a strict -std=c99 without _DEFAULT_SOURCE: Linux's values */
#define MAP_ANONYMOUS 0x20
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0x4000
#endif

/* Switching between fibers. On x86-64 a few instructions save the callee-saved registers on the
 * fiber's own stack and swap stack pointers (no system call); elsewhere ucontext's swapcontext,
 * which also saves the signal mask (a system call per switch). */
#if defined(__x86_64__) && !defined(__OFFLOADRT_HOST_UCONTEXT)
#define __OL_ASM_SWITCH 1
typedef struct {
  void *sp; /* 0: the fiber has not started */
} __ol_gpu_context;

/* Saves the running context's stack pointer in *save and resumes the one at load. */
__attribute__((naked, noinline)) static void __ol_gpu_switch(void **__save, void *__load) {
  __asm__ volatile("pushq %rbp\n\t"
                   "pushq %rbx\n\t"
                   "pushq %r12\n\t"
                   "pushq %r13\n\t"
                   "pushq %r14\n\t"
                   "pushq %r15\n\t"
                   "movq %rsp, (%rdi)\n\t"
                   "movq %rsi, %rsp\n\t"
                   "popq %r15\n\t"
                   "popq %r14\n\t"
                   "popq %r13\n\t"
                   "popq %r12\n\t"
                   "popq %rbx\n\t"
                   "popq %rbp\n\t"
                   "ret\n\t");
}
/* Saves the running context's stack pointer in *save and calls entry() on the stack whose top
 * (16-byte aligned) is `top`; entry never returns. */
__attribute__((naked, noinline)) static void __ol_gpu_switch_new(void **__save, void *__top, void (*__entry)(void)) {
  __asm__ volatile("pushq %rbp\n\t"
                   "pushq %rbx\n\t"
                   "pushq %r12\n\t"
                   "pushq %r13\n\t"
                   "pushq %r14\n\t"
                   "pushq %r15\n\t"
                   "movq %rsp, (%rdi)\n\t"
                   "movq %rsi, %rsp\n\t"
                   "xorl %ebp, %ebp\n\t"
                   "callq *%rdx\n\t"
                   "ud2\n\t");
}
/* Resumes the context at load, from a fiber that has finished (nothing to save). */
__attribute__((naked, noinline, noreturn)) static void __ol_gpu_jump(void *__load) {
  __asm__ volatile("movq %rdi, %rsp\n\t"
                   "popq %r15\n\t"
                   "popq %r14\n\t"
                   "popq %r13\n\t"
                   "popq %r12\n\t"
                   "popq %rbx\n\t"
                   "popq %rbp\n\t"
                   "ret\n\t");
}
#else
#include <ucontext.h>
typedef struct {
  ucontext_t uc;
  int started;
} __ol_gpu_context;
#endif

#ifndef __OFFLOADRT_HOST_GUARDS
#define __OFFLOADRT_HOST_GUARDS 8192 /* stacks with a guard page, at most, per program */
#endif
#ifndef __OFFLOADRT_HOST_STACK
#define __OFFLOADRT_HOST_STACK (256 * 1024) /* bytes of stack per fiber (reserved, touched as used) */
#endif

/* What a kernel returns (a fault) when the host cannot run it: */
#define OL_GPU_FAULT_UNEXPECTED_SYNC 0x4f4c0001 /* a barrier/lane operation in a group run as a loop */
#define OL_GPU_FAULT_NO_STACKS 0x4f4c0002       /* the fiber stacks could not be mapped */
#define OL_GPU_FAULT_NO_DYNAMIC_MEMORY 0x4f4c0003 /* extern __gpu_local memory used, none launched */

enum { __OL_READY, __OL_AT_BARRIER, __OL_AT_LANE_OP, __OL_DONE };

struct __ol_gpu_fiber {
  __ol_gpu_context context;
  uint32_t tid[3];
  uint32_t lane;
  int state;
  /* the lane operation it waits in */
  int op;
  const void *site;
  uint64_t mask, value, result;
  uint32_t idx, width;
};

struct __ol_gpu_scheduler {
  __ol_gpu_context main; /* the group's own context (the thread's stack) */
#ifndef __OL_ASM_SWITCH
  ucontext_t blank;     /* a saved context that new fibers start from */
#endif
  struct __ol_gpu_fiber *fibers;
  size_t fibers_bytes;
  unsigned char *stacks;
  size_t stacks_bytes;
  uint32_t capacity;    /* fibers (and stacks) mapped */
  uint32_t guarded;     /* of them, the stacks with a guard page (the first ones) */
  uint32_t count;       /* items of the running group */
  uint32_t at_barrier;  /* fibers waiting at the barrier now */
  uint32_t at_lane_op;  /* fibers waiting in a lane operation now */
  uint32_t yielded;     /* fibers that yielded (__gpu_thread_suspend) in this round */
  void (*item)(const void *);
  const void *args;
  struct __ol_gpu_scheduler *next; /* every scheduler of this program, for the unload */
};

static __thread struct __ol_gpu_scheduler *__ol_gpu_thread_scheduler;
static struct __ol_gpu_scheduler *__ol_gpu_schedulers; /* guarded by __ol_gpu_schedulers_lock */
static int __ol_gpu_schedulers_lock;
static uint32_t __ol_gpu_guards; /* guard pages mapped by all threads of this program (atomic) */

/* The guard pages of every program in the process. Each guard page splits a mapping, and the
 * process's mappings are limited (vm.max_map_count), so a budget per program is not enough: many
 * programs would exhaust them together. offloadrt's host plugin points this at one process-wide
 * budget when it loads the program (used: guard pages mapped now, atomic; limit: at most); a
 * program loaded by other means has none and counts only against its own cap. */
struct __ol_gpu_guard_budget {
  uint32_t used;
  uint32_t limit;
};
__attribute__((weak, visibility("default"))) struct __ol_gpu_guard_budget *__ol_gpu_guard_budget_v1;

#define __OL_RT static __attribute__((unused))

__OL_RT void *__ol_gpu_map(size_t bytes) {
  void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? 0 : p;
}

/* Takes one guard page from this program's cap and the process's budget; 0 when either is spent. */
__OL_RT int __ol_gpu_take_guard(void) {
  struct __ol_gpu_guard_budget *b = __ol_gpu_guard_budget_v1;
  if (__atomic_add_fetch(&__ol_gpu_guards, 1, __ATOMIC_RELAXED) > __OFFLOADRT_HOST_GUARDS) {
    __atomic_sub_fetch(&__ol_gpu_guards, 1, __ATOMIC_RELAXED);
    return 0;
  }
  if (b && __atomic_add_fetch(&b->used, 1, __ATOMIC_RELAXED) > __atomic_load_n(&b->limit, __ATOMIC_RELAXED)) {
    __atomic_sub_fetch(&b->used, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&__ol_gpu_guards, 1, __ATOMIC_RELAXED);
    return 0;
  }
  return 1;
}

__OL_RT void __ol_gpu_return_guards(uint32_t n) {
  struct __ol_gpu_guard_budget *b = __ol_gpu_guard_budget_v1;
  __atomic_sub_fetch(&__ol_gpu_guards, n, __ATOMIC_RELAXED);
  if (b)
    __atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
}

/* Bytes between the starts of two fibers' stacks: the guard page, __OFFLOADRT_HOST_STACK bytes and
 * a page for the colour (see __ol_gpu_stack_top). */
__OL_RT size_t __ol_gpu_stack_stride(void) {
  size_t page = 4096;
  return ((size_t)__OFFLOADRT_HOST_STACK + page - 1) / page * page + 2 * page;
}

/* The thread's scheduler with room for `count` fibers, or 0 when memory cannot be mapped. */
__OL_RT struct __ol_gpu_scheduler *__ol_gpu_scheduler(uint32_t count) {
  struct __ol_gpu_scheduler *s = __ol_gpu_thread_scheduler;
  if (!s) {
    s = (struct __ol_gpu_scheduler *)__ol_gpu_map(sizeof *s);
    if (!s)
      return 0;
#ifndef __OL_ASM_SWITCH
    getcontext(&s->blank);
#endif
    while (__atomic_exchange_n(&__ol_gpu_schedulers_lock, 1, __ATOMIC_ACQUIRE))
      ;
    s->next = __ol_gpu_schedulers;
    __ol_gpu_schedulers = s;
    __atomic_store_n(&__ol_gpu_schedulers_lock, 0, __ATOMIC_RELEASE);
    __ol_gpu_thread_scheduler = s;
  }
  if (count > s->capacity) {
    size_t page = 4096, stack = __ol_gpu_stack_stride();
    size_t fibers_bytes = (size_t)count * sizeof(struct __ol_gpu_fiber);
    size_t stacks_bytes = (size_t)count * stack;
    struct __ol_gpu_fiber *fibers = (struct __ol_gpu_fiber *)__ol_gpu_map(fibers_bytes);
    unsigned char *stacks = (unsigned char *)__ol_gpu_map(stacks_bytes);
    if (!fibers || !stacks) {
      if (fibers)
        munmap(fibers, fibers_bytes);
      if (stacks)
        munmap(stacks, stacks_bytes);
      return 0;
    }
    /* A guard page under each stack: an overflow faults. Each guard splits the mapping, and a
     * process has a limited number of mappings (vm.max_map_count, 65530 by default), so at most
     * __OFFLOADRT_HOST_GUARDS stacks of the program are guarded at once (over all threads), and
     * no more than the process-wide budget allows over all programs; the rest have no guard. */
    if (s->fibers) { /* the old stacks go first: their guards return to the budgets */
      __ol_gpu_return_guards(s->guarded);
      munmap(s->fibers, s->fibers_bytes);
      munmap(s->stacks, s->stacks_bytes);
      s->fibers = 0;
      s->capacity = s->guarded = 0;
    }
    uint32_t guarded = 0;
    while (guarded < count && __ol_gpu_take_guard()) {
      if (mprotect(stacks + (size_t)guarded * stack, page, PROT_NONE)) { /* out of mappings after all */
        __ol_gpu_return_guards(1);
        break;
      }
      ++guarded;
    }
    s->fibers = fibers;
    s->fibers_bytes = fibers_bytes;
    s->stacks = stacks;
    s->stacks_bytes = stacks_bytes;
    s->capacity = count;
    s->guarded = guarded;
  }
  return s;
}

__attribute__((destructor)) __OL_RT void __ol_gpu_release_schedulers(void) {
  /* The program is unloading: no kernel of it runs any more. */
  struct __ol_gpu_scheduler *s = __ol_gpu_schedulers;
  __ol_gpu_schedulers = 0;
  while (s) {
    struct __ol_gpu_scheduler *next = s->next;
    if (s->fibers) {
      __ol_gpu_return_guards(s->guarded);
      munmap(s->fibers, s->fibers_bytes);
      munmap(s->stacks, s->stacks_bytes);
    }
    munmap(s, sizeof *s);
    s = next;
  }
}

static void __ol_gpu_fiber_main(void);

/* The top of fiber i's stack. The stacks are a whole number of pages apart, so at the same offset
 * in their pages the fibers' hot top lines would all fall in the same cache sets (a few ways for
 * hundreds of fibers: a miss at every switch); each top is moved down by a colour, a multiple of
 * 64 bytes under a page, that differs between neighbouring fibers and, together with the page
 * (i mod 16 in a 64 KiB cache way), between any two of 1024 consecutive fibers. */
__OL_RT unsigned char *__ol_gpu_stack_top(struct __ol_gpu_scheduler *s, uint32_t i) {
  size_t colour = (size_t)((i + (i >> 4)) & 63) * 64;
  return s->stacks + (size_t)(i + 1) * __ol_gpu_stack_stride() - colour;
}

/* The first fiber from index i on that is ready to run, or 0. */
__OL_RT struct __ol_gpu_fiber *__ol_gpu_ready_from(struct __ol_gpu_scheduler *s, uint32_t i) {
  for (; i < s->count; ++i)
    if (s->fibers[i].state == __OL_READY)
      return s->fibers + i;
  return 0;
}

#ifndef __OL_ASM_SWITCH
__OL_RT void __ol_gpu_prepare(struct __ol_gpu_scheduler *s, struct __ol_gpu_fiber *f) {
  uint32_t i = (uint32_t)(f - s->fibers);
  size_t size = (size_t)__OFFLOADRT_HOST_STACK;
  f->context.uc = s->blank;
  f->context.uc.uc_stack.ss_sp = __ol_gpu_stack_top(s, i) - size;
  f->context.uc.uc_stack.ss_size = size;
  f->context.uc.uc_link = 0; /* __ol_gpu_fiber_main never returns */
  makecontext(&f->context.uc, __ol_gpu_fiber_main, 0);
  f->context.started = 1;
}
#endif

/* Leave the running context (`from`: the group's own, or a fiber; saved there unless `finished`)
 * for fiber `to` (starting it on its stack if it has not started), or for the group's own context
 * when `to` is 0. The fiber that runs next sees its ids. */
__OL_RT void __ol_gpu_transfer(struct __ol_gpu_scheduler *s, __ol_gpu_context *from, struct __ol_gpu_fiber *to,
                               int finished) {
  __ol_gpu_context *target = &s->main;
  __ol_gpu.fiber = to;
  if (to) {
    __ol_gpu.tid[0] = to->tid[0];
    __ol_gpu.tid[1] = to->tid[1];
    __ol_gpu.tid[2] = to->tid[2];
    target = &to->context;
  }
#ifdef __OL_ASM_SWITCH
  void *discard;
  if (target->sp)
    finished ? __ol_gpu_jump(target->sp) : __ol_gpu_switch(&from->sp, target->sp);
  else
    __ol_gpu_switch_new(finished ? &discard : &from->sp, __ol_gpu_stack_top(s, (uint32_t)(to - s->fibers)),
                        __ol_gpu_fiber_main);
#else
  if (to && !to->context.started)
    __ol_gpu_prepare(s, to);
  if (finished)
    setcontext(&target->uc);
  else
    swapcontext(&from->uc, &target->uc);
#endif
}

/* Start a group: what every item of it sees. */
__OL_RT void __ol_gpu_begin_group(const ol_host_launch_t *launch) {
  __ol_gpu.ntid[0] = launch->group_size.x;
  __ol_gpu.ntid[1] = launch->group_size.y;
  __ol_gpu.ntid[2] = launch->group_size.z;
  __ol_gpu.bid[0] = launch->group_id.x;
  __ol_gpu.bid[1] = launch->group_id.y;
  __ol_gpu.bid[2] = launch->group_id.z;
  __ol_gpu.nblk[0] = launch->num_groups.x;
  __ol_gpu.nblk[1] = launch->num_groups.y;
  __ol_gpu.nblk[2] = launch->num_groups.z;
  __ol_gpu.fiber = 0;
  __ol_gpu.dyn = launch->dyn_shared_memory;
  __ol_gpu.fault = 0;
}

/* A barrier or lane operation in a group that runs as a loop: with one item it is trivial;
 * with more, the kernel stops with a fault rather than computing a wrong result. */
__OL_RT int __ol_gpu_single_item(void) {
  return __ol_gpu.ntid[0] == 1 && __ol_gpu.ntid[1] == 1 && __ol_gpu.ntid[2] == 1;
}
__attribute__((noreturn)) __OL_RT void __ol_gpu_escape(int fault) {
  __ol_gpu.fault = fault;
  __builtin_longjmp(__ol_gpu.escape, 1);
}

/* The running fiber f stops in `state` (waiting, yielded or finished); the next ready fiber of the
 * round runs, or the group's own context when there is none. */
__OL_RT void __ol_gpu_switch_out(struct __ol_gpu_fiber *f, int state) {
  struct __ol_gpu_scheduler *s = __ol_gpu_thread_scheduler;
  f->state = state;
  if (state == __OL_AT_BARRIER)
    ++s->at_barrier;
  else if (state == __OL_AT_LANE_OP)
    ++s->at_lane_op;
  else if (state == __OL_READY)
    ++s->yielded;
  __ol_gpu_transfer(s, &f->context, __ol_gpu_ready_from(s, (uint32_t)(f - s->fibers) + 1), state == __OL_DONE);
}

__attribute__((convergent)) static void __ol_gpu_barrier(void) {
  struct __ol_gpu_fiber *f = __ol_gpu.fiber;
  if (f)
    __ol_gpu_switch_out(f, __OL_AT_BARRIER);
  else if (!__ol_gpu_single_item())
    __ol_gpu_escape(OL_GPU_FAULT_UNEXPECTED_SYNC);
}

static void __ol_gpu_yield(void) {
  struct __ol_gpu_fiber *f = __ol_gpu.fiber;
  if (f)
    __ol_gpu_switch_out(f, __OL_READY);
}

__attribute__((noreturn)) static void __ol_gpu_exit_item(void) {
  struct __ol_gpu_fiber *f = __ol_gpu.fiber;
  if (f) {
    __ol_gpu_switch_out(f, __OL_DONE); /* never resumed */
    __builtin_unreachable();
  }
  if (__ol_gpu_single_item())
    __ol_gpu_escape(0);
  __ol_gpu_escape(OL_GPU_FAULT_UNEXPECTED_SYNC);
}

/* The result of lane operation `op` for one lane when the lanes in `group` (a bit per lane of the
 * wavefront starting at fiber `base`) take part. */
__OL_RT uint64_t __ol_gpu_lane_result(struct __ol_gpu_fiber *base, uint64_t group, struct __ol_gpu_fiber *f) {
  uint64_t mask = f->mask, result = 0;
  uint64_t members = group & mask;
  switch (f->op) {
  case __OL_LANE_MASK:
    return group;
  case __OL_LANE_SYNC:
    return 0;
  case __OL_LANE_BALLOT:
    for (uint64_t m = members; m; m &= m - 1)
      if (base[__builtin_ctzll(m)].value)
        result |= 1ull << __builtin_ctzll(m);
    return result;
  case __OL_LANE_FIRST:
    return base[__builtin_ctzll(members ? members : group)].value;
  case __OL_LANE_SHUFFLE: {
    uint32_t width = f->width && f->width <= __OFFLOADRT_HOST_LANES ? f->width : __OFFLOADRT_HOST_LANES;
    if (f->idx >= 64 || !((mask >> f->idx) & 1)) /* as NVPTX: a source index outside the mask reads 0 */
      return 0;
    uint32_t source = (f->lane & ~(width - 1)) + (f->idx & (width - 1));
    return (group >> source) & 1 ? base[source].value : f->value;
  }
  case __OL_LANE_MATCH_ANY:
    for (uint64_t m = members; m; m &= m - 1)
      if (base[__builtin_ctzll(m)].value == f->value)
        result |= 1ull << __builtin_ctzll(m);
    return result;
  case __OL_LANE_MATCH_ALL:
    for (uint64_t m = members; m; m &= m - 1)
      if (base[__builtin_ctzll(m)].value != f->value)
        return 0;
    return members;
  default:
    break;
  }
  /* sums and inclusive scans, in lane order; a scan over the lanes up to this one */
  int scan = f->op >= __OL_LANE_SCAN_U32;
  int kind = f->op - (scan ? __OL_LANE_SCAN_U32 : __OL_LANE_SUM_U32);
  if (scan && !((members >> f->lane) & 1))
    return f->value;
  uint64_t lanes = scan ? members & (~0ull >> (63 - f->lane)) : members;
  uint64_t u = 0;
  float s = 0.0f;
  double d = 0.0;
  for (uint64_t m = lanes; m; m &= m - 1) {
    uint64_t v = base[__builtin_ctzll(m)].value;
    if (kind == 0)
      u = (uint32_t)(u + v);
    else if (kind == 1)
      u += v;
    else if (kind == 2)
      s += __ol_bits_f32(v);
    else
      d += __ol_bits_f64(v);
  }
  return kind == 2 ? __ol_f32_bits(s) : kind == 3 ? __ol_f64_bits(d) : u;
}

static uint64_t __ol_gpu_lane_op(int op, uint64_t mask, uint64_t x, uint32_t idx, uint32_t width,
                                 const void *site) {
  struct __ol_gpu_fiber *f = __ol_gpu.fiber;
  if (!f) {
    if (!__ol_gpu_single_item())
      __ol_gpu_escape(OL_GPU_FAULT_UNEXPECTED_SYNC);
    struct __ol_gpu_fiber alone;
    alone.lane = 0;
    alone.op = op;
    alone.mask = mask;
    alone.value = x;
    alone.idx = idx;
    alone.width = width;
    return __ol_gpu_lane_result(&alone, 1, &alone);
  }
  f->op = op;
  f->site = site;
  f->mask = mask;
  f->value = x;
  f->idx = idx;
  f->width = width;
  __ol_gpu_switch_out(f, __OL_AT_LANE_OP);
  return f->result;
}

/* In each wavefront, give the lanes waiting at the site of its lowest waiting lane their
 * results (the lanes at that site are the active lanes). __gpu_sync_lane is a convergence
 * point instead: its lanes go on together once every lane of its mask that has not finished
 * waits in a __gpu_sync_lane (at any site, as __syncwarp on NVPTX), so lanes that diverged
 * before it are converged after it. With `force`, sync waits that cannot complete (a lane of the
 * mask waits elsewhere for something that will not come) are let go: the group never hangs on
 * them. Returns whether any lane got a result. */
__OL_RT int __ol_gpu_resolve_lanes(struct __ol_gpu_scheduler *s, int force) {
  int resolved = 0;
  for (uint32_t start = 0; start < s->count; start += __OFFLOADRT_HOST_LANES) {
    struct __ol_gpu_fiber *base = s->fibers + start;
    uint32_t lanes = s->count - start < __OFFLOADRT_HOST_LANES ? s->count - start : __OFFLOADRT_HOST_LANES;
    uint64_t present = lanes == 64 ? ~0ull : (1ull << lanes) - 1;
    struct __ol_gpu_fiber *first = 0;
    uint64_t group = 0, syncing = 0, live = 0;
    for (uint32_t l = 0; l < lanes; ++l) {
      struct __ol_gpu_fiber *f = base + l;
      if (f->state != __OL_DONE)
        live |= 1ull << l;
      if (f->state != __OL_AT_LANE_OP)
        continue;
      if (f->op == __OL_LANE_SYNC) {
        syncing |= 1ull << l;
        continue;
      }
      if (!first)
        first = f;
      if (f->site == first->site && f->op == first->op)
        group |= 1ull << l;
    }
    if (first) {
      for (uint64_t m = group; m; m &= m - 1)
        base[__builtin_ctzll(m)].result = __ol_gpu_lane_result(base, group, base + __builtin_ctzll(m));
      for (uint64_t m = group; m; m &= m - 1)
        base[__builtin_ctzll(m)].state = __OL_READY;
      s->at_lane_op -= (uint32_t)__builtin_popcountll(group);
      resolved = 1;
      continue;
    }
    uint64_t released = 0;
    for (uint64_t m = syncing; m; m &= m - 1) {
      struct __ol_gpu_fiber *f = base + __builtin_ctzll(m);
      uint64_t needed = f->mask & present & live;
      if (force || (needed & ~syncing) == 0)
        released |= 1ull << __builtin_ctzll(m);
    }
    for (uint64_t m = released; m; m &= m - 1) {
      base[__builtin_ctzll(m)].result = 0;
      base[__builtin_ctzll(m)].state = __OL_READY;
    }
    s->at_lane_op -= (uint32_t)__builtin_popcountll(released);
    resolved |= released != 0;
  }
  return resolved;
}

static void __ol_gpu_fiber_main(void) {
  struct __ol_gpu_scheduler *s = __ol_gpu_thread_scheduler;
  s->item(s->args);
  __ol_gpu_switch_out(__ol_gpu.fiber, __OL_DONE); /* never resumed */
  __builtin_unreachable();
}

/* Run the group's items as fibers: item(args) once per item. */
__OL_RT int __ol_gpu_run_fibers(void (*item)(const void *), const void *args) {
  uint32_t nx = __ol_gpu.ntid[0], ny = __ol_gpu.ntid[1], nz = __ol_gpu.ntid[2];
  uint64_t count = (uint64_t)nx * ny * nz;
  struct __ol_gpu_scheduler *s = count <= 0xffffffffu ? __ol_gpu_scheduler((uint32_t)count) : 0;
  if (!s)
    return OL_GPU_FAULT_NO_STACKS;
  s->count = (uint32_t)count;
  s->item = item;
  s->args = args;
  s->at_barrier = s->at_lane_op = 0;
  uint32_t i = 0;
  for (uint32_t z = 0; z < nz; ++z)
    for (uint32_t y = 0; y < ny; ++y)
      for (uint32_t x = 0; x < nx; ++x, ++i) {
        struct __ol_gpu_fiber *f = s->fibers + i;
#ifdef __OL_ASM_SWITCH
        f->context.sp = 0;
#else
        f->context.started = 0;
#endif
        f->tid[0] = x;
        f->tid[1] = y;
        f->tid[2] = z;
        f->lane = i & (__OFFLOADRT_HOST_LANES - 1);
        f->state = __OL_READY;
      }
#ifdef __OL_ASM_SWITCH
  /* The group's floating-point environment, given back when it ends (the fibers do not switch it). */
  uint32_t mxcsr = __builtin_ia32_stmxcsr();
  uint16_t control;
  __asm__ volatile("fnstcw %0" : "=m"(control));
#endif
  for (;;) {
    struct __ol_gpu_fiber *first = __ol_gpu_ready_from(s, 0);
    s->yielded = 0;
    if (first) /* the round: each fiber hands over to the next, the last one back here */
      __ol_gpu_transfer(s, &s->main, first, 0);
    __ol_gpu.fiber = 0;
    if (s->yielded)
      continue; /* some yielded (__gpu_thread_suspend) */
    if (!s->at_barrier && !s->at_lane_op)
      break;
    if (s->at_lane_op && __ol_gpu_resolve_lanes(s, 0))
      continue;
    if (s->at_barrier) { /* the barrier: everyone left is waiting at it */
      for (i = 0; i < s->count; ++i)
        if (s->fibers[i].state == __OL_AT_BARRIER)
          s->fibers[i].state = __OL_READY;
      s->at_barrier = 0;
    } else {
      (void)__ol_gpu_resolve_lanes(s, 1); /* sync waits for lanes that will not come */
    }
  }
#ifdef __OL_ASM_SWITCH
  __builtin_ia32_ldmxcsr(mxcsr);
  __asm__ volatile("fldcw %0" : : "m"(control));
#endif
  return 0;
}

#endif /* OFFLOADRT_GPU_HOST_RUNTIME_H */
