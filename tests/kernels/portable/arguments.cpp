// Parameters of every kind a kernel takes: none, a byte, mixed scalars and pointers, a struct by
// value, a pointer reached only through a struct by value (mirrors upstream noargs.cpp, byte.cpp,
// multiargs.cpp, composite.cpp, byval_ptr.cpp).
#include <gpuintrin.h>
#include <stdint.h>

struct Pair {
  uint32_t first;
  uint32_t second;
};

struct Holder {
  uint32_t *target;
};

extern "C" __gpu_kernel void nothing() { (void)0; }

extern "C" __gpu_kernel void one_byte(unsigned char value) { (void)value; }

extern "C" __gpu_kernel void mixed(char tag, int *where, short amount) {
  if (__gpu_thread_id(0) == 0 && where)
    *where = tag + amount;
}

extern "C" __gpu_kernel void by_value(uint8_t base, Pair pair, uint32_t *out) {
  out[__gpu_thread_id(0)] = base + pair.first + pair.second + __gpu_thread_id(0);
}

extern "C" __gpu_kernel void through_struct(Holder holder) {
  holder.target[__gpu_thread_id(0)] = __gpu_thread_id(0) * 3;
}
