/* What both null drivers share: handles, fake device addresses, host functions run at a sync.
 *
 * A null driver is a benchmark's test double of a GPU driver library: every call succeeds at once
 * with plausible outputs and touches no hardware. Device addresses are fake (never dereference
 * them); host and managed allocations are real memory, since callers may write to them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*null_host_fn)(void *);

static uint64_t null_handles = 0x10000;            /* streams, events, modules, functions, contexts */
static uint64_t null_device_top = 0x7e0000000000ULL; /* the next fake device address */
static pthread_mutex_t null_lock = PTHREAD_MUTEX_INITIALIZER; /* guards null_pending */
static struct { null_host_fn fn; void *data; } *null_pending;
static size_t null_pending_count, null_pending_capacity;

/* A launch's extra array must be [BUFFER_POINTER, blob, BUFFER_SIZE, &size, END] (or absent). */
static int null_extra_ok(void **extra, void *end_marker) {
    return !extra || (extra[0] == (void *)1 && extra[1] && extra[2] == (void *)2 && extra[3] && extra[4] == end_marker
                      && *(size_t *)extra[3] <= 4096);
}

static void *null_handle(void) { return (void *)__atomic_add_fetch(&null_handles, 16, __ATOMIC_RELAXED); }

static uint64_t null_device_alloc(size_t size) {
    return __atomic_fetch_add(&null_device_top, (size + 255) & ~(uint64_t)255, __ATOMIC_RELAXED) + 256;
}

static void *null_host_alloc(size_t size) {
    void *p = NULL;
    return posix_memalign(&p, 4096, size ? size : 1) == 0 ? p : NULL;
}

/* Host functions wait for the next synchronising call (every stream counts as done by then). */
static int null_enqueue_host(null_host_fn fn, void *data) {
    pthread_mutex_lock(&null_lock);
    if (null_pending_count == null_pending_capacity) {
        size_t capacity = null_pending_capacity ? 2 * null_pending_capacity : 64;
        void *grown = realloc(null_pending, capacity * sizeof *null_pending);
        if (!grown) { pthread_mutex_unlock(&null_lock); return 2; } /* out of memory, both APIs */
        null_pending = grown;
        null_pending_capacity = capacity;
    }
    null_pending[null_pending_count].fn = fn;
    null_pending[null_pending_count++].data = data;
    pthread_mutex_unlock(&null_lock);
    return 0;
}

static int null_run_host(void) {
    for (;;) {
        pthread_mutex_lock(&null_lock);
        size_t count = null_pending_count;
        void *taken = null_pending;
        null_pending = NULL;
        null_pending_count = null_pending_capacity = 0;
        pthread_mutex_unlock(&null_lock);
        if (!count) { free(taken); return 0; }
        struct { null_host_fn fn; void *data; } *calls = taken;
        for (size_t i = 0; i < count; i++) calls[i].fn(calls[i].data);
        free(taken);
    }
}
