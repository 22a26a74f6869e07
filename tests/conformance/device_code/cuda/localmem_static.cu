extern "C" __global__ void localmem_static(unsigned int *out) {
  __shared__ unsigned int shared_mem[64];
  shared_mem[threadIdx.x] = 2;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int sum = 0;
    for (unsigned int i = 0; i < blockDim.x; ++i)
      sum += shared_mem[i];
    out[blockIdx.x] = sum;
  }
}
