#include "common.h"
#include <stddef.h>
/* multiargs(char A, int *B, short C): B[tid] = A + C + tid */
struct multiargs_args { char a; int *b; short c; };
OL_HOST_KERNEL multiargs(const void *args, const ol_host_launch_t *launch) {
  ARG(char, a, offsetof(struct multiargs_args, a));
  ARG(int *, b, offsetof(struct multiargs_args, b));
  ARG(short, c, offsetof(struct multiargs_args, c));
  FOR_EACH_TID b[tid] = a + c + (int)tid;
  return 0;
}
