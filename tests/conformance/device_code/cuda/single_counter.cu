extern "C" __global__ void single_counter(int init_loop, int addend, unsigned int *init_val, unsigned int *out) {
  if (threadIdx.x != 0)
    return;
  volatile unsigned int value = *init_val;
  for (int i = 0; i < init_loop; ++i)
    value += addend;
  *out = value;
}
