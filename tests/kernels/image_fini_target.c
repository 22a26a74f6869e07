/* A valid program with a function that crashes when called. A test points the image's DT_FINI at
 * it: the load succeeds, the unload would crash in the loader's call of DT_FINI (_dl_call_fini),
 * so the test load in a separate process must find it before this process loads it. */
#include <offloadrt/host_kernel.h>

static int *volatile nowhere; /* NULL, but the compiler may not assume it */

void offloadrt_test_crash(void) { *nowhere = 1; }

OL_HOST_KERNEL harmless(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
