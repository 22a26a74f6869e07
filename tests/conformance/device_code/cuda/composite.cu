struct foo_pair { unsigned int a, b; };
extern "C" __global__ void composite(unsigned char n, foo_pair f, unsigned int *out) {
  out[threadIdx.x] = n + f.a + f.b + threadIdx.x;
}
