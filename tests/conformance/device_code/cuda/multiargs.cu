extern "C" __global__ void multiargs(char a, int *b, short c) { b[threadIdx.x] = a + c + (int)threadIdx.x; }
