extern "C" __global__ void foo(unsigned int *out) { out[threadIdx.x] = threadIdx.x; }
