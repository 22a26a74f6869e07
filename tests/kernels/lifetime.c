/* Constructors run at load, destructors at unload: a program's life made visible. */
#include <offloadrt/host_kernel.h>
#include <string.h>

uint32_t ctor_value;
static uint32_t *dtor_target;

__attribute__((constructor(200))) static void first(void) { ctor_value = 40; }
__attribute__((constructor(201))) static void second(void) { ctor_value *= 2; }
__attribute__((constructor(202))) static void third(void) { ctor_value += 20; }

/* Remembers where the destructor must write. */
OL_HOST_KERNEL arm_destructor(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  memcpy(&dtor_target, args, sizeof dtor_target);
  return 0;
}

__attribute__((destructor)) static void on_unload(void) {
  if (dtor_target)
    *dtor_target = 0xD7;
}

/* out[i] = ctor_value + i */
OL_HOST_KERNEL global_ctor(const void *args, const ol_host_launch_t *launch) {
  uint32_t *out;
  memcpy(&out, args, sizeof out);
  for (uint32_t i = 0; i < launch->group_size.x; ++i)
    out[i] = ctor_value + i;
  return 0;
}

/* Counts how many times this copy of the library was loaded: always 1 per load. */
uint32_t load_count;
__attribute__((constructor)) static void count_load(void) { load_count += 1; }
