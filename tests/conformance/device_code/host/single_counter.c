#include "common.h"
#include <stddef.h>
/* single_counter(int32_t init_loop, int32_t addend, uint32_t *init_val, uint32_t *out):
 * item 0 only: *out = *init_val + init_loop * addend, the long way (a volatile loop). */
struct single_counter_args { int32_t init_loop; int32_t addend; uint32_t *init_val; uint32_t *out; };
OL_HOST_KERNEL single_counter(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  ARG(int32_t, init_loop, offsetof(struct single_counter_args, init_loop));
  ARG(int32_t, addend, offsetof(struct single_counter_args, addend));
  ARG(uint32_t *, init_val, offsetof(struct single_counter_args, init_val));
  ARG(uint32_t *, out, offsetof(struct single_counter_args, out));
  volatile uint32_t value = *init_val;
  for (int32_t i = 0; i < init_loop; ++i)
    value += addend;
  *out = value;
  return 0;
}
