// Allocator tuning and page-mapped buffers (see alloc.h).
#include "core/alloc.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace pldr {

void tune_allocator() {
#ifdef M_TRIM_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, int(kReturnBytes));
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void release_free_memory() {
    malloc_trim(0);
}

void* map_zero_pages(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("cannot map ", bytes, " bytes of memory: ", std::strerror(errno));
#ifdef MADV_HUGEPAGE
    // A large buffer that zero_pages drops every step faults in again every step: in 2 MB pages
    // where the kernel allows it, 512 times fewer faults. A hint; failure changes nothing.
    if (bytes >= kReturnBytes) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void unmap_pages(void* p, size_t bytes) {
    if (p) munmap(p, bytes);
}

void zero_pages(void* p, size_t bytes) {
    if (!p) return;
    if (bytes < kReturnBytes) {
        std::memset(p, 0, bytes);
        return;
    }
    // A private anonymous mapping reads as zeros after MADV_DONTNEED (its pages are dropped).
    if (madvise(p, bytes, MADV_DONTNEED) != 0) std::memset(p, 0, bytes);
}

}  // namespace pldr
