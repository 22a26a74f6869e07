/* A program whose constructor leaves a trace outside it: each load adds 1 to the environment
 * variable OFFLOADRT_TEST_PROBE_LOADS, so a test can tell whether the library was loaded. */
#include <offloadrt/host_kernel.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void count_probe_load(void) {
  const char *value = getenv("OFFLOADRT_TEST_PROBE_LOADS");
  long loads = value ? strtol(value, NULL, 10) : 0;
  char text[32];
  snprintf(text, sizeof text, "%ld", loads + 1);
  setenv("OFFLOADRT_TEST_PROBE_LOADS", text, 1);
}

OL_HOST_KERNEL probe(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
