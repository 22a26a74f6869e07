/* A program whose constructor crashes (a NULL write): loading it must be INVALID_BINARY, found by the
 * test load in a separate process, and this process must live on. */
#include <offloadrt/host_kernel.h>

static int *volatile nowhere; /* NULL, but the compiler may not assume it */

__attribute__((constructor)) static void crash_at_load(void) { *nowhere = 1; }

OL_HOST_KERNEL never_reached(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
