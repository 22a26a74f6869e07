extern "C" __global__ void noargs() {}
