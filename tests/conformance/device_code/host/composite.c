#include "common.h"
#include <stddef.h>
/* composite(uint8_t N, struct Foo { uint32_t a, b; } F, uint32_t *Out): Out[tid] = N + F.a + F.b + tid */
struct foo_pair { uint32_t a, b; };
struct composite_args { uint8_t n; struct foo_pair f; uint32_t *out; };
OL_HOST_KERNEL composite(const void *args, const ol_host_launch_t *launch) {
  ARG(uint8_t, n, offsetof(struct composite_args, n));
  ARG(struct foo_pair, f, offsetof(struct composite_args, f));
  ARG(uint32_t *, out, offsetof(struct composite_args, out));
  FOR_EACH_TID out[tid] = n + f.a + f.b + tid;
  return 0;
}
