/* Helpers shared by the host versions of the conformance device kernels.
 * A host kernel runs one whole work-group per call; `for_each_item` loops over its items,
 * and tid/ntid/bid mirror the GPU thread id, group size and group id in x. */
#include <offloadrt/host_kernel.h>
#include <string.h>

#define ARG(type, name, offset) type name; memcpy(&name, (const char *)args + (offset), sizeof name)
#define NTID (launch->group_size.x)
#define BID (launch->group_id.x)
#define FOR_EACH_TID for (uint32_t tid = 0; tid < NTID; ++tid)
