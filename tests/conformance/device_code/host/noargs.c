#include "common.h"
OL_HOST_KERNEL noargs(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
