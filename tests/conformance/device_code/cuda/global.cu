extern "C" __device__ unsigned int global[64];
extern "C" __global__ void write() { global[threadIdx.x] = threadIdx.x * 2; }
extern "C" __global__ void read(unsigned int *out) { out[threadIdx.x + blockDim.x * blockIdx.x] = global[threadIdx.x]; }
