extern "C" __global__ void localmem(unsigned int *out) {
  extern __shared__ unsigned int shared[];
  shared[threadIdx.x] = threadIdx.x * 2;
  out[threadIdx.x + blockDim.x * blockIdx.x] = shared[threadIdx.x];
}
