// A global variable written by one kernel and read by another, and globals set by prioritised
// constructors or reset by a destructor (mirrors upstream global.cpp, global_ctor.cpp, global_dtor.cpp).
#include <gpuintrin.h>
#include <stdint.h>

extern "C" {

[[gnu::visibility("default")]] uint32_t table[64];
uint32_t seeded[64];
uint32_t reset_at_unload[64];

[[gnu::constructor(202)]] void seed_last() {
  for (unsigned i = 0; i < 64; i++)
    seeded[i] += 20;
}

[[gnu::constructor(200)]] void seed_first() {
  for (unsigned i = 0; i < 64; i++)
    seeded[i] = 40;
}

[[gnu::constructor(201)]] void seed_second() {
  for (unsigned i = 0; i < 64; i++)
    seeded[i] *= 2;
}

[[gnu::destructor]] void reset_table() {
  for (unsigned i = 0; i < 64; i++)
    reset_at_unload[i] = 1;
}

__gpu_kernel void fill_table() {
  table[__gpu_thread_id(0)] = __gpu_thread_id(0);
  table[__gpu_thread_id(0)] *= 2;
}

__gpu_kernel void read_table(uint32_t *out) {
  out[__gpu_thread_id(0) + __gpu_num_threads(0) * __gpu_block_id(0)] = table[__gpu_thread_id(0)];
}

__gpu_kernel void read_seeded(uint32_t *out) {
  seeded[__gpu_thread_id(0)] += __gpu_thread_id(0);
  out[__gpu_thread_id(0) + __gpu_num_threads(0) * __gpu_block_id(0)] = seeded[__gpu_thread_id(0)];
}

__gpu_kernel void unload_marker() {}
}
