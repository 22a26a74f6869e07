#include "common.h"
/* byte(unsigned char c): checks one-byte argument passing; does nothing. */
OL_HOST_KERNEL byte(const void *args, const ol_host_launch_t *launch) {
  ARG(unsigned char, c, 0);
  (void)c;
  (void)launch;
  return 0;
}
