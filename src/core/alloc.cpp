// Allocator tuning (see alloc.h).
#include "core/alloc.h"

#include <malloc.h>

namespace pldr {

void tune_allocator() {
#ifdef M_TRIM_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace pldr
