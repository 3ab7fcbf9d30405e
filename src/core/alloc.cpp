// Allocator tuning, the page cache of large blocks, and page-mapped buffers (see alloc.h).
#include "core/alloc.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"

#ifndef MREMAP_DONTUNMAP  // Linux 5.7; older C libraries lack the name
#define MREMAP_DONTUNMAP 4
#endif

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

namespace {

constexpr uintptr_t kPage = 4096;
uintptr_t page_down(uintptr_t a) {
    return a & ~(kPage - 1);
}
uintptr_t page_up(uintptr_t a) {
    return (a + kPage - 1) & ~(kPage - 1);
}

void* map_fresh(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("cannot map ", bytes, " bytes of memory: ", std::strerror(errno));
    return p;
}
// The same for a tensor's storage, failing as operator new does.
void* map_block(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
}

// Moves the pages of [from, from + len) (inside one mapping) to `to`, replacing what was mapped
// there: page-table entries change hands, nothing is copied or faulted.
bool move_pages(uintptr_t from, size_t len, uintptr_t to) {
    return mremap(reinterpret_cast<void*>(from), len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                  reinterpret_cast<void*>(to)) != MAP_FAILED;
}

// [lo, hi) split into runs of resident (true) and non-resident (false) pages.
struct Run {
    uintptr_t lo, hi;
    bool resident;
};
std::vector<Run> residency(uintptr_t lo, uintptr_t hi) {
    std::vector<Run> runs;
    if (hi <= lo) return runs;
    std::vector<unsigned char> v((hi - lo) / kPage);
    if (mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()) != 0) {
        runs.push_back({lo, hi, true});  // unknown: treat as written (never replaced)
        return runs;
    }
    for (size_t i = 0; i < v.size();) {
        const bool r = v[i] & 1;
        size_t j = i;
        while (j < v.size() && bool(v[j] & 1) == r) ++j;
        runs.push_back({lo + i * kPage, lo + j * kPage, r});
        i = j;
    }
    return runs;
}

// A span of address space that lies inside one mapping (what mremap needs to move it whole).
struct Span {
    uintptr_t addr;
    size_t len;
};

// A map_zero_pages buffer: where cached pages were moved in (fill_zero_pages), and what has
// been asked for since it was last zeroed (never filled again: it may have been written).
struct ZeroMap {
    size_t len = 0;
    std::vector<Span> filled;
    std::vector<Span> claimed;
};

class PageCache {
  public:
    static PageCache& get() {
        static PageCache* c = new PageCache;  // never destroyed: blocks may outlive statics
        return *c;
    }
    bool enabled() const { return enabled_; }

    void* allocate(size_t bytes) {
        const size_t n = page_up(bytes);
        std::lock_guard<std::mutex> lock(mu_);
        if (enabled_) {
            auto it = free_.lower_bound(n);  // the smallest cached span that holds the block
            if (it != free_.end()) {
                const Span s{it->second, it->first};
                erase(it);
                if (s.len > n) insert({s.addr + n, s.len - n});
                return reinterpret_cast<void*>(s.addr);
            }
        }
        const uintptr_t dst = reinterpret_cast<uintptr_t>(map_block(n));
        if (!enabled_ || free_bytes_ < n / 4) return reinterpret_cast<void*>(dst);
        // No cached span is large enough: the block is put together from the largest ones,
        // the rest (if any) faulted in fresh.
        std::vector<Span> pieces;
        size_t off = 0;
        while (off < n && !free_.empty()) {
            auto last = std::prev(free_.end());
            const Span s{last->second, last->first};
            erase(last);
            const size_t take = std::min(s.len, n - off);
            if (!move_pages(s.addr, take, dst + off)) {
                munmap(reinterpret_cast<void*>(s.addr), s.len);
                continue;
            }
            if (s.len > take) insert({s.addr + take, s.len - take});
            pieces.push_back({dst + off, take});
            off += take;
        }
        if (off < n) pieces.push_back({dst + off, n - off});
        if (pieces.size() > 1) {
            try {
                assembled_[dst] = std::move(pieces);
            } catch (...) {
                munmap(reinterpret_cast<void*>(dst), n);
                throw;
            }
        }
        return reinterpret_cast<void*>(dst);
    }

    void free(void* p, size_t bytes) {
        if (!p) return;
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        const size_t n = page_up(bytes);
        std::lock_guard<std::mutex> lock(mu_);
        std::vector<Span> pieces{{a, n}};
        auto it = assembled_.find(a);
        if (it != assembled_.end()) {
            pieces = std::move(it->second);
            assembled_.erase(it);
        }
        if (!enabled_ || free_bytes_ + n > kCachedPagesMax) {
            munmap(p, n);
            return;
        }
        size_t done = 0;
        try {
            for (; done < pieces.size(); ++done) insert(pieces[done]);
        } catch (...) {  // no memory for the bookkeeping: the rest goes back to the system
            for (; done < pieces.size(); ++done)
                munmap(reinterpret_cast<void*>(pieces[done].addr), pieces[done].len);
        }
        trim_count();
    }

    void release() {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [len, addr] : free_) munmap(reinterpret_cast<void*>(addr), len);
        free_.clear();
        free_bytes_ = 0;
    }

    size_t cached_bytes() {
        std::lock_guard<std::mutex> lock(mu_);
        return free_bytes_;
    }

    void* map_zero(size_t bytes) {
        void* p = map_fresh(bytes);
#ifdef MADV_HUGEPAGE
        // A large buffer whose pages fault in again after every zero(): in 2 MB pages where the
        // kernel allows it, 512 times fewer faults. A hint; failure changes nothing.
        if (bytes >= kReturnBytes) madvise(p, bytes, MADV_HUGEPAGE);
#endif
        std::lock_guard<std::mutex> lock(mu_);
        zero_maps_[reinterpret_cast<uintptr_t>(p)].len = bytes;
        return p;
    }

    void unmap_zero(void* p, size_t bytes) {
        if (!p) return;
        std::lock_guard<std::mutex> lock(mu_);
        zero_maps_.erase(reinterpret_cast<uintptr_t>(p));
        munmap(p, bytes);
    }

    void zero(void* p, size_t bytes) {
        if (!p) return;
        const uintptr_t base = reinterpret_cast<uintptr_t>(p);
        std::lock_guard<std::mutex> lock(mu_);
        auto zm = zero_maps_.find(base);
        if (bytes < kReturnBytes) {
            std::memset(p, 0, bytes);
        } else if (!enabled_ || zm == zero_maps_.end()) {
            // A private anonymous mapping reads as zeros after MADV_DONTNEED (pages dropped).
            if (madvise(p, bytes, MADV_DONTNEED) != 0) std::memset(p, 0, bytes);
        } else {
            reclaim(base, page_up(bytes), zm->second);
        }
        if (zm != zero_maps_.end()) zm->second.filled.clear(), zm->second.claimed.clear();
    }

    void fill_zero(void* p, size_t bytes) {
        const uintptr_t lo = page_up(reinterpret_cast<uintptr_t>(p));
        const uintptr_t hi = page_down(reinterpret_cast<uintptr_t>(p) + bytes);
        std::lock_guard<std::mutex> lock(mu_);
        if (!enabled_ || hi <= lo) return;
        auto it = zero_maps_.upper_bound(lo);
        if (it == zero_maps_.begin()) return;
        --it;
        ZeroMap& zm = it->second;
        if (hi > it->first + zm.len) return;  // not inside one map_zero_pages buffer
        // Only what no earlier call asked for: pages filled or written since the buffer was
        // zeroed are never replaced, and the non-resident pages of the rest read zeros.
        std::vector<Span> todo{{lo, hi - lo}};
        for (const Span& c : zm.claimed) {
            std::vector<Span> next;
            for (const Span& t : todo) {
                const uintptr_t a = std::max(t.addr, c.addr),
                                b = std::min(t.addr + t.len, c.addr + c.len);
                if (a >= b) {
                    next.push_back(t);
                    continue;
                }
                if (t.addr < a) next.push_back({t.addr, a - t.addr});
                if (b < t.addr + t.len) next.push_back({b, t.addr + t.len - b});
            }
            todo = std::move(next);
        }
        zm.claimed.push_back({lo, hi - lo});
        for (const Span& t : todo) {
            if (free_.empty()) break;
            for (const Run& r : residency(t.addr, t.addr + t.len)) {
                if (r.resident) continue;
                for (uintptr_t at = r.lo; at < r.hi && !free_.empty();) {
                    auto last = std::prev(free_.end());
                    const Span s{last->second, last->first};
                    erase(last);
                    const size_t take = std::min<size_t>(s.len, r.hi - at);
                    if (!move_pages(s.addr, take, at)) {
                        munmap(reinterpret_cast<void*>(s.addr), s.len);
                        continue;
                    }
                    if (s.len > take) insert({s.addr + take, s.len - take});
                    std::memset(reinterpret_cast<void*>(at), 0, take);
                    zm.filled.push_back({at, take});
                    at += take;
                }
            }
        }
    }

  private:
    PageCache() {
        const char* e = std::getenv("PLDR_PAGE_CACHE");
        enabled_ = !(e && std::string(e) == "0");
    }

    void insert(const Span& s) {
        free_.emplace(s.len, s.addr);
        free_bytes_ += s.len;
    }
    void erase(std::multimap<size_t, uintptr_t>::iterator it) {
        free_bytes_ -= it->first;
        free_.erase(it);
    }
    // At most kMaxSpans cached spans (each one a kernel mapping): the smallest go back first.
    void trim_count() {
        while (free_.size() > kMaxSpans) {
            auto it = free_.begin();
            munmap(reinterpret_cast<void*>(it->second), it->first);
            erase(it);
        }
    }

    // Moves the resident pages of a zero-pages buffer into the cache and maps fresh zero pages
    // in their place. The buffer is cut where fill_zero moved pages in (each piece, and each
    // stretch between pieces, lies inside one mapping, so that mremap can move it). The pages
    // leave with MREMAP_DONTUNMAP: the buffer's range stays mapped throughout (reading zeros),
    // so that no other mapping can land in it before it is mapped afresh below.
    void reclaim(uintptr_t base, size_t len, ZeroMap& zm) {
        std::vector<Span> cuts = zm.filled;
        std::sort(cuts.begin(), cuts.end(),
                  [](const Span& a, const Span& b) { return a.addr < b.addr; });
        std::vector<Span> segments;
        uintptr_t at = base;
        for (const Span& c : cuts) {
            if (c.addr > at) segments.push_back({at, c.addr - at});
            segments.push_back(c);
            at = c.addr + c.len;
        }
        if (base + len > at) segments.push_back({at, base + len - at});
        for (const Span& s : segments)
            for (const Run& r : residency(s.addr, s.addr + s.len)) {
                const size_t n = r.hi - r.lo;
                if (!r.resident || n < kMinSpan || free_bytes_ + n > kCachedPagesMax) continue;
                void* q =
                    mremap(reinterpret_cast<void*>(r.lo), n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
                if (q != MAP_FAILED) insert({reinterpret_cast<uintptr_t>(q), n});
            }
        trim_count();
        // Fresh zero pages over the whole buffer, in one mapping again (what was not moved out is
        // dropped).
        void* q = mmap(reinterpret_cast<void*>(base), len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (q == MAP_FAILED) {
            // Cannot happen for a range we own; keep the contract (zeros) the slow way.
            std::memset(reinterpret_cast<void*>(base), 0, len);
            return;
        }
#ifdef MADV_HUGEPAGE
        madvise(q, len, MADV_HUGEPAGE);
#endif
    }

    // Cached pages beyond this go back to the system (glibc's trim threshold, tune_allocator).
    static constexpr size_t kCachedPagesMax = size_t(1) << 30;
    static constexpr size_t kMaxSpans = 4096;
    static constexpr size_t kMinSpan = 64 * 1024;

    std::mutex mu_;
    bool enabled_ = true;
    std::multimap<size_t, uintptr_t> free_;  // cached spans by length
    size_t free_bytes_ = 0;
    std::unordered_map<uintptr_t, std::vector<Span>> assembled_;  // blocks of several spans
    std::map<uintptr_t, ZeroMap> zero_maps_;                      // by base address
};

}  // namespace

void* cached_pages_allocate(size_t bytes) {
    return PageCache::get().allocate(bytes);
}
void cached_pages_free(void* p, size_t bytes) {
    PageCache::get().free(p, bytes);
}
void release_cached_pages() {
    PageCache::get().release();
}
size_t cached_pages_bytes() {
    return PageCache::get().cached_bytes();
}
bool page_cache_enabled() {
    return PageCache::get().enabled();
}

void* map_zero_pages(size_t bytes) {
    return PageCache::get().map_zero(bytes);
}

void unmap_pages(void* p, size_t bytes) {
    PageCache::get().unmap_zero(p, bytes);
}

void zero_pages(void* p, size_t bytes) {
    PageCache::get().zero(p, bytes);
}

void fill_zero_pages(void* p, size_t bytes) {
    PageCache::get().fill_zero(p, bytes);
}

}  // namespace pldr
