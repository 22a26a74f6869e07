/* A null libamdhip64.so for benchmarks: the HIP entry points hip-python binds (with dlsym, at each
 * function's first call), each succeeding at once with plausible outputs: one device, fake device
 * addresses, handles from a counter. hipDeviceProp_t is laid out by the bindings, so the caller
 * hands a filled one to null_set_device_properties first (its layout is the bindings' business). */
#include <stddef.h>
#include "nullcommon.h"

#define EXPORT __attribute__((visibility("default")))
typedef int hipError_t;
#define OK 0
#define EVENT_DISABLE_TIMING 0x2 /* hipEventDisableTiming */

static unsigned char *device_properties;
static size_t device_properties_size;

EXPORT void null_set_device_properties(const void *properties, size_t size) {
    free(device_properties);
    device_properties = malloc(size);
    if (device_properties) memcpy(device_properties, properties, size);
    device_properties_size = device_properties ? size : 0;
}

EXPORT hipError_t hipInit(unsigned flags) { (void)flags; return OK; }
EXPORT hipError_t hipDriverGetVersion(int *v) { *v = 70000000; return OK; }  /* HIP 7.0.0 */
EXPORT hipError_t hipRuntimeGetVersion(int *v) { *v = 70000000; return OK; }
EXPORT hipError_t hipGetDeviceCount(int *n) { *n = 1; return OK; }
EXPORT hipError_t hipSetDevice(int dev) { return dev == 0 ? OK : 101; }
EXPORT hipError_t hipGetDevice(int *dev) { *dev = 0; return OK; }
EXPORT hipError_t hipSetDeviceFlags(unsigned flags) { (void)flags; return OK; }
EXPORT hipError_t hipGetDevicePropertiesR0600(void *properties, int dev) {
    if (dev != 0) return 101;
    if (!device_properties) return 1;  /* hipErrorInvalidValue: null_set_device_properties was not called */
    memcpy(properties, device_properties, device_properties_size);
    return OK;
}
EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)64 << 30; return OK; }
EXPORT hipError_t hipDeviceSynchronize(void) { return null_run_host(); }
EXPORT hipError_t hipDeviceCanAccessPeer(int *can, int dev, int peer) { (void)dev; (void)peer; *can = 0; return OK; }
EXPORT hipError_t hipDeviceEnablePeerAccess(int peer, unsigned flags) { (void)peer; (void)flags; return OK; }
EXPORT const char *hipGetErrorName(hipError_t status) { return status == OK ? "hipSuccess" : "hipErrorNullDriver"; }
EXPORT const char *hipGetErrorString(hipError_t status) { return status == OK ? "no error" : "an error of the null driver"; }
EXPORT hipError_t hipMalloc(void **p, size_t size) { *p = (void *)null_device_alloc(size); return OK; }
EXPORT hipError_t hipHostMalloc(void **p, size_t size, unsigned flags) { (void)flags; *p = null_host_alloc(size); return *p ? OK : 2; }
EXPORT hipError_t hipMallocManaged(void **p, size_t size, unsigned flags) { (void)flags; *p = null_host_alloc(size); return *p ? OK : 2; }
EXPORT hipError_t hipFree(void *p) { (void)p; return OK; }  /* fake addresses; managed memory leaks (benchmarks only) */
EXPORT hipError_t hipHostFree(void *p) { free(p); return OK; }
EXPORT hipError_t hipMemcpyHtoDAsync(void *d, const void *s, size_t n, void *st) {
    (void)d; (void)s; (void)n; (void)st; null_counted(NULL_COPIES); return OK;
}
EXPORT hipError_t hipMemcpyDtoHAsync(void *d, const void *s, size_t n, void *st) {
    (void)d; (void)s; (void)n; (void)st; null_counted(NULL_COPIES); return OK;
}
EXPORT hipError_t hipMemcpyDtoDAsync(void *d, const void *s, size_t n, void *st) {
    (void)d; (void)s; (void)n; (void)st; null_counted(NULL_COPIES); return OK;
}
EXPORT hipError_t hipMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, void *st) {
    (void)d; (void)dd; (void)s; (void)sd; (void)n; (void)st; return OK;
}
EXPORT hipError_t hipMemsetD8Async(void *d, unsigned char v, size_t n, void *s) { (void)d; (void)v; (void)n; (void)s; return OK; }
EXPORT hipError_t hipMemsetD16Async(void *d, unsigned short v, size_t n, void *s) { (void)d; (void)v; (void)n; (void)s; return OK; }
EXPORT hipError_t hipMemsetD32Async(void *d, int v, size_t n, void *s) { (void)d; (void)v; (void)n; (void)s; return OK; }
EXPORT hipError_t hipModuleLoadData(void **module, const void *image) { (void)image; *module = null_handle(); return OK; }
EXPORT hipError_t hipModuleUnload(void *module) { (void)module; return OK; }
EXPORT hipError_t hipModuleGetFunction(void **fn, void *module, const char *name) {
    (void)module; (void)name; *fn = null_handle(); return OK;
}
EXPORT hipError_t hipModuleGetGlobal(void **p, size_t *size, void *module, const char *name) {
    (void)module; (void)name; if (p) *p = (void *)null_device_alloc(8); if (size) *size = 8; return OK;
}
EXPORT hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)params;
    if (!null_extra_ok(extra, (void *)3)) return 1;  /* hipErrorInvalidValue */
    null_counted(NULL_LAUNCHES);
    return OK;
}
EXPORT hipError_t hipModuleOccupancyMaxPotentialBlockSize(int *grid, int *block, void *f, size_t shared, int limit) {
    (void)f; (void)shared; (void)limit; *grid = 208; *block = 1024; return OK;
}
EXPORT hipError_t hipStreamCreateWithFlags(void **s, unsigned flags) { (void)flags; *s = null_handle(); return OK; }
EXPORT hipError_t hipStreamDestroy(void *s) { (void)s; return OK; }
EXPORT hipError_t hipStreamSynchronize(void *s) { (void)s; return null_run_host(); }
EXPORT hipError_t hipStreamQuery(void *s) { (void)s; return OK; }
EXPORT hipError_t hipStreamWaitEvent(void *s, void *e, unsigned flags) { (void)s; (void)e; (void)flags; return OK; }
EXPORT hipError_t hipLaunchHostFunc(void *s, null_host_fn fn, void *data) { (void)s; return null_enqueue_host(fn, data); }
EXPORT hipError_t hipEventCreateWithFlags(void **e, unsigned flags) {
    *e = null_event(!(flags & EVENT_DISABLE_TIMING));
    return OK;
}
EXPORT hipError_t hipEventDestroy(void *e) { (void)e; return OK; }
EXPORT hipError_t hipEventRecord(void *e, void *s) { (void)s; null_event_recorded(e); return OK; }
EXPORT hipError_t hipEventSynchronize(void *e) { (void)e; return null_run_host(); }
EXPORT hipError_t hipEventQuery(void *e) { (void)e; return OK; }
EXPORT hipError_t hipEventElapsedTime(float *ms, void *start, void *end) { (void)start; (void)end; *ms = 0.0f; return OK; }
EXPORT hipError_t hipHostRegister(void *p, size_t size, unsigned flags) { (void)p; (void)size; (void)flags; return OK; }
EXPORT hipError_t hipHostUnregister(void *p) { (void)p; return OK; }
EXPORT hipError_t hipHostGetDevicePointer(void **d, void *p, unsigned flags) { (void)flags; *d = p; return OK; }
