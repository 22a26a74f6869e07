extern "C" __global__ void byte(unsigned char c) { (void)c; }
