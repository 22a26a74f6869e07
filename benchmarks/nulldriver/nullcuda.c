/* A null libcuda.so.1 for benchmarks: the driver entry points cuda.bindings resolves through
 * cuGetProcAddress_v2, each succeeding at once with plausible outputs (one sm_90 device, fake device
 * addresses, handles from a counter). Entry points it does not name answer CUDA_ERROR_NOT_FOUND.
 *
 * Every kernel has the parameters of the benchmark's PTX kernel (nulldriver.CUDA_PTX): four 8-byte
 * parameters, 32 bytes. cuFuncGetParamInfo answers that layout, and a launch whose `extra` buffer is
 * larger fails with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as an H100 refuses a buffer longer than the
 * parameters (a shorter one it accepts silently; see gpu-hardware-facts.md). Besides what offloadrt's
 * CUDA plugin calls, it answers what cuda.core needs to make a stream, load a library, launch with
 * cuLaunchKernelEx and record events. */
#include <stddef.h>
#include "nullcommon.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;
#define OK 0
#define INVALID_VALUE 1
#define LAUNCH_OUT_OF_RESOURCES 701
#define NOT_FOUND 500
#define PARAMETERS 4      /* every kernel's parameters: PARAMETERS of PARAMETER_SIZE bytes each */
#define PARAMETER_SIZE 8
#define EVENT_DISABLE_TIMING 0x2

static CUresult cuInit(unsigned flags) { (void)flags; return OK; }
static CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
static CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
static CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? OK : 101; }
static CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev; strncpy(name, "Null CUDA Device", (size_t)len); if (len > 0) name[len - 1] = 0; return OK;
}
static CUresult cuDeviceGetUuid(unsigned char *uuid, int dev) { (void)dev; memset(uuid, 0x42, 16); return OK; }
static CUresult cuDeviceTotalMem(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return OK; }
static CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    (void)dev;
    switch (attribute) {
    case 1: case 2: case 3: *value = 1024; break;           /* threads per block, block x, y */
    case 4: *value = 64; break;                             /* block z */
    case 5: *value = 0x7fffffff; break;                     /* grid x */
    case 6: case 7: *value = 65535; break;                  /* grid y, z */
    case 8: *value = 48 << 10; break;                       /* shared memory per block */
    case 10: *value = 32; break;                            /* warp size */
    case 13: *value = 1980000; break;                       /* clock, kHz */
    case 16: *value = 132; break;                           /* multiprocessors */
    case 36: *value = 2619000; break;                       /* memory clock, kHz */
    case 37: *value = 5120; break;                          /* memory bus, bits */
    case 38: *value = 50 << 20; break;                      /* L2 */
    case 39: *value = 2048; break;                          /* threads per multiprocessor */
    case 75: *value = 9; break;                             /* compute capability 9.0 */
    case 76: *value = 0; break;
    case 97: *value = 227 << 10; break;                     /* shared memory opt-in */
    default: *value = 1; break;
    }
    return OK;
}
static CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) {
    (void)dev; *flags = 0; *active = 0; return OK;
}
static CUresult cuDevicePrimaryCtxSetFlags(int dev, unsigned flags) { (void)dev; (void)flags; return OK; }
static void *primary_context;
static CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    (void)dev; if (!primary_context) primary_context = null_handle(); *ctx = primary_context; return OK;
}
static CUresult cuDevicePrimaryCtxRelease(int dev) { (void)dev; return OK; }
static CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return OK; }
static CUresult cuCtxGetCurrent(void **ctx) { *ctx = primary_context; return OK; }
static CUresult cuCtxSynchronize(void) { return null_run_host(); }
static CUresult cuCtxEnablePeerAccess(void *ctx, unsigned flags) { (void)ctx; (void)flags; return OK; }
static CUresult cuDeviceCanAccessPeer(int *can, int dev, int peer) { (void)dev; (void)peer; *can = 0; return OK; }
static CUresult cuGetErrorName(CUresult status, const char **name) {
    *name = status == OK ? "CUDA_SUCCESS" : "CUDA_ERROR_NULL_DRIVER"; return OK;
}
static CUresult cuGetErrorString(CUresult status, const char **text) {
    *text = status == OK ? "no error" : "an error of the null driver"; return OK;
}
static CUresult cuMemAlloc(CUdeviceptr *p, size_t size) { *p = null_device_alloc(size); return OK; }
static CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) {
    (void)flags; *p = (CUdeviceptr)null_host_alloc(size); return *p ? OK : 2;
}
static CUresult cuMemAllocHost(void **p, size_t size) { *p = null_host_alloc(size); return *p ? OK : 2; }
static CUresult cuMemFree(CUdeviceptr p) {
    (void)p; return OK; /* device addresses are fake; managed memory is leaked (benchmarks only) */
}
static CUresult cuMemFreeHost(void *p) { free(p); return OK; }
static CUresult cuMemcpyAsync4(uint64_t a, uint64_t b, size_t n, void *s) {
    (void)a; (void)b; (void)n; (void)s; null_counted(NULL_COPIES); return OK;
}
static CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, void *st) {
    (void)d; (void)dc; (void)s; (void)sc; (void)n; (void)st; return OK;
}
static CUresult cuMemset1DAsync(CUdeviceptr d, unsigned v, size_t n, void *s) { (void)d; (void)v; (void)n; (void)s; return OK; }
static CUresult cuMemset2DAsync(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h, void *s) {
    (void)d; (void)pitch; (void)v; (void)w; (void)h; (void)s; return OK;
}
static CUresult cuModuleLoadData(void **module, const void *image) { (void)image; *module = null_handle(); return OK; }
static CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n, void *options, void **values) {
    (void)n; (void)options; (void)values; return cuModuleLoadData(module, image);
}
static CUresult cuModuleUnload(void *module) { (void)module; return OK; }
static CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
    (void)module; (void)name; *fn = null_handle(); return OK;
}
static CUresult cuModuleGetGlobal(CUdeviceptr *p, size_t *size, void *module, const char *name) {
    (void)module; (void)name; if (p) *p = null_device_alloc(8); if (size) *size = 8; return OK;
}
/* The launch checks of both launch calls: a well-formed `extra` no longer than the parameters. */
static CUresult launched(void **extra) {
    if (!null_extra_ok(extra, (void *)0)) return INVALID_VALUE;
    if (extra && *(size_t *)extra[3] > PARAMETERS * PARAMETER_SIZE) return LAUNCH_OUT_OF_RESOURCES;
    null_counted(NULL_LAUNCHES);
    return OK;
}
static CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)params;
    return launched(extra);
}
/* CUlaunchConfig's fields are not read: the null driver runs nothing. */
static CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    (void)config; (void)f; (void)params; return launched(extra);
}
static CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
    (void)f;
    if (index >= PARAMETERS) return INVALID_VALUE;
    if (offset) *offset = index * PARAMETER_SIZE;
    if (size) *size = PARAMETER_SIZE;
    return OK;
}
static CUresult cuKernelGetParamInfo(void *k, size_t index, size_t *offset, size_t *size) {
    return cuFuncGetParamInfo(k, index, offset, size);
}
static CUresult cuKernelGetParamCount(void *k, size_t *count) { (void)k; *count = PARAMETERS; return OK; }
static CUresult cuFuncSetAttribute(void *f, int attribute, int value) { (void)f; (void)attribute; (void)value; return OK; }
static CUresult cuFuncGetAttribute(int *value, int attribute, void *f) { (void)attribute; (void)f; *value = 0; return OK; }
static CUresult cuOccupancyMaxPotentialBlockSize(int *grid, int *block, void *f, void *cb, size_t shared, int limit) {
    (void)f; (void)cb; (void)shared; (void)limit; *grid = 264; *block = 1024; return OK;
}
static CUresult cuCreate2(void **handle, unsigned flags) { (void)flags; *handle = null_handle(); return OK; }
static CUresult cuHandle1(void *handle) { (void)handle; return OK; }
static CUresult cuSync1(void *handle) { (void)handle; return null_run_host(); }
static CUresult cuEventCreate(void **event, unsigned flags) {
    *event = null_event(!(flags & EVENT_DISABLE_TIMING));
    return OK;
}
static CUresult cuEventRecord(void *event, void *stream) { (void)stream; null_event_recorded(event); return OK; }
static CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) { (void)stream; (void)event; (void)flags; return OK; }
static CUresult cuLaunchHostFunc(void *stream, null_host_fn fn, void *data) { (void)stream; return null_enqueue_host(fn, data); }
static CUresult cuEventElapsedTime(float *ms, void *start, void *end) { (void)start; (void)end; *ms = 0.0f; return OK; }
static CUresult cuMemHostRegister(void *p, size_t size, unsigned flags) { (void)p; (void)size; (void)flags; return OK; }
static CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags) { (void)flags; *d = (CUdeviceptr)p; return OK; }

/* What cuda.core calls besides (found by running it: Device.set_current, create_stream, ObjectCode
 * from PTX, get_kernel, launch, Stream.record, Event.sync). */
static CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return OK;
}
static CUresult cuStreamCreateWithPriority(void **stream, unsigned flags, int priority) {
    (void)flags; (void)priority; *stream = null_handle(); return OK;
}
static CUresult cuLibraryLoadData(void **library, const void *code, void *jit_options, void **jit_values,
                                  unsigned jit_count, void *options, void **values, unsigned count) {
    (void)code; (void)jit_options; (void)jit_values; (void)jit_count; (void)options; (void)values; (void)count;
    *library = null_handle();
    return OK;
}
static CUresult cuLibraryGetKernel(void **kernel, void *library, const char *name) {
    (void)library; (void)name; *kernel = null_handle(); return OK;
}
static CUresult cuStreamGetCtx(void *stream, void **ctx) { (void)stream; *ctx = primary_context; return OK; }
static CUresult cuStreamGetDevice(void *stream, int *dev) { (void)stream; *dev = 0; return OK; }
static CUresult cuStreamGetFlags(void *stream, unsigned *flags) { (void)stream; *flags = 1; return OK; }
static CUresult cuStreamGetPriority(void *stream, int *priority) { (void)stream; *priority = 0; return OK; }
static CUresult cuStreamGetId(void *stream, unsigned long long *id) { *id = (uintptr_t)stream; return OK; }
static CUresult cuCtxGetDevice(int *dev) { *dev = 0; return OK; }
static CUresult cuCtxGetId(void *ctx, unsigned long long *id) { *id = (uintptr_t)ctx; return OK; }
/* A CUkernel and its CUfunction are the same handle here: nothing tells them apart. */
static CUresult cuKernelGetFunction(void **function, void *kernel) { *function = kernel; return OK; }

static const struct { const char *name; void *fn; } entry_points[] = {
#define E(name) {#name, (void *)name}
#define A(name, fn) {#name, (void *)fn}
    E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceGetUuid),
    E(cuDeviceTotalMem), E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxGetState), E(cuDevicePrimaryCtxSetFlags),
    E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease), E(cuCtxSetCurrent), E(cuCtxGetCurrent),
    E(cuCtxSynchronize), E(cuCtxEnablePeerAccess), E(cuDeviceCanAccessPeer), E(cuGetErrorName), E(cuGetErrorString),
    E(cuMemAlloc), E(cuMemAllocManaged), E(cuMemAllocHost), E(cuMemFree), E(cuMemFreeHost),
    A(cuMemcpyHtoDAsync, cuMemcpyAsync4), A(cuMemcpyDtoHAsync, cuMemcpyAsync4), A(cuMemcpyDtoDAsync, cuMemcpyAsync4),
    E(cuMemcpyPeerAsync), A(cuMemsetD8Async, cuMemset1DAsync), A(cuMemsetD16Async, cuMemset1DAsync),
    A(cuMemsetD32Async, cuMemset1DAsync), A(cuMemsetD2D8Async, cuMemset2DAsync),
    A(cuMemsetD2D16Async, cuMemset2DAsync), A(cuMemsetD2D32Async, cuMemset2DAsync),
    E(cuModuleLoadData), E(cuModuleLoadDataEx), E(cuModuleUnload), E(cuModuleGetFunction), E(cuModuleGetGlobal),
    E(cuLaunchKernel), E(cuFuncSetAttribute), E(cuFuncGetAttribute), E(cuOccupancyMaxPotentialBlockSize),
    A(cuStreamCreate, cuCreate2), A(cuStreamDestroy, cuHandle1), A(cuStreamSynchronize, cuSync1),
    A(cuStreamQuery, cuHandle1), E(cuStreamWaitEvent), E(cuLaunchHostFunc),
    E(cuEventCreate), A(cuEventDestroy, cuHandle1), E(cuEventRecord),
    A(cuEventSynchronize, cuSync1), A(cuEventQuery, cuHandle1), E(cuEventElapsedTime),
    E(cuMemHostRegister), A(cuMemHostUnregister, cuHandle1), E(cuMemHostGetDevicePointer),
    E(cuLaunchKernelEx), E(cuFuncGetParamInfo), E(cuKernelGetParamInfo), E(cuKernelGetParamCount),
    E(cuCtxGetStreamPriorityRange), E(cuStreamCreateWithPriority), E(cuLibraryLoadData),
    A(cuLibraryUnload, cuHandle1), E(cuLibraryGetKernel), E(cuKernelGetFunction), E(cuStreamGetCtx),
    E(cuStreamGetDevice), E(cuStreamGetFlags), E(cuStreamGetPriority), E(cuStreamGetId), E(cuCtxGetDevice),
    E(cuCtxGetId),
#undef E
#undef A
};

/* How cuda.bindings finds every entry point (by its base name, at the first driver call). */
__attribute__((visibility("default")))
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)version; (void)flags;
    for (size_t i = 0; i < sizeof entry_points / sizeof entry_points[0]; i++) {
        if (strcmp(symbol, entry_points[i].name) == 0) {
            *pfn = entry_points[i].fn;
            if (status) *status = 0;  /* CU_GET_PROC_ADDRESS_SUCCESS */
            return OK;
        }
    }
    *pfn = NULL;
    if (status) *status = 1;  /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
}

__attribute__((visibility("default")))
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* The entry points by address, for measuring the bare C call from ctypes (the benchmark's floor). */
__attribute__((visibility("default"))) void *null_entry_point(const char *symbol) {
    void *fn = NULL;
    cuGetProcAddress_v2(symbol, &fn, 0, 0, NULL);
    return fn;
}
