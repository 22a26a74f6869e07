/* A program whose constructor never returns: the test load must time out and kill it, and loading
 * must be INVALID_BINARY instead of a hang. */
#include <offloadrt/host_kernel.h>

static volatile int forever = 1;

__attribute__((constructor)) static void spin_at_load(void) {
  while (forever) {
  }
}

OL_HOST_KERNEL never_reached(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
