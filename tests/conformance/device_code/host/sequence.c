#include "common.h"
#include <stddef.h>
/* sequence(uint32_t idx, uint32_t *inout): a Fibonacci step */
struct sequence_args { uint32_t idx; uint32_t *inout; };
OL_HOST_KERNEL sequence(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  ARG(uint32_t, idx, offsetof(struct sequence_args, idx));
  ARG(uint32_t *, inout, offsetof(struct sequence_args, inout));
  inout[idx] = idx == 0 ? 0 : idx == 1 ? 1 : inout[idx - 1] + inout[idx - 2];
  return 0;
}
