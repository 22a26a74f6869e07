/* A program that needs a symbol from another library (dlopen_dep.c). Built without that library,
 * or with it deleted after linking, the dynamic loader must reject it. */
#include <offloadrt/host_kernel.h>

extern int offloadrt_test_dep_value(void);

OL_HOST_KERNEL call_dep(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return offloadrt_test_dep_value() - 42;
}
