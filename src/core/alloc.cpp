// Allocator tuning, the page cache of large blocks, and page-mapped buffers (see alloc.h).
#include "core/alloc.h"

#include <fcntl.h>
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
constexpr uintptr_t kUnit = uintptr_t(2) << 20;
uintptr_t unit_down(uintptr_t a) {
    return a & ~(kUnit - 1);
}
uintptr_t unit_up(uintptr_t a) {
    return (a + kUnit - 1) & ~(kUnit - 1);
}
// An anonymous mapping of page_up(bytes) bytes that starts on a kUnit boundary (null on failure).
void* map_aligned(size_t bytes) {
    const size_t n = page_up(bytes);
    void* p = mmap(nullptr, n + kUnit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = unit_up(a);
    if (b > a) munmap(p, b - a);
    munmap(reinterpret_cast<void*>(b + n), a + n + kUnit - (b + n));
    return reinterpret_cast<void*>(b);
}

void* map_fresh(size_t bytes) {
    void* p = map_aligned(bytes);
    if (!p) fail("cannot map ", bytes, " bytes of memory: ", std::strerror(errno));
    return p;
}
// The same for a tensor's storage, failing as operator new does.
void* map_block(size_t bytes) {
    void* p = map_aligned(bytes);
    if (!p) throw std::bad_alloc();
    return p;
}

// Moves the pages of [from, from + len) (inside one mapping) to `to`, replacing what was mapped
// there: page-table entries change hands, nothing is copied or faulted.
// A range that spans several kernel mappings (the cache merges neighbouring spans, whatever
// mapping their pages came from) moves in parts: mremap moves within one mapping only (EFAULT
// otherwise), so the range is halved until each part lies in one.
// Every move may split kernel mappings (vm.max_map_count bounds them: 65,530 by default).
size_t g_moves = 0;  // guarded by PageCache's mutex

// keep_source: MREMAP_DONTUNMAP, the source stays mapped (and reads zeros after).
bool move_pages(uintptr_t from, size_t len, uintptr_t to, bool keep_source = false) {
    ++g_moves;
    const int flags = MREMAP_MAYMOVE | MREMAP_FIXED | (keep_source ? MREMAP_DONTUNMAP : 0);
    if (mremap(reinterpret_cast<void*>(from), len, len, flags, reinterpret_cast<void*>(to)) !=
        MAP_FAILED)
        return true;
    if (errno != EFAULT || len <= kPage) return false;
    const size_t half = len / 2 / kPage * kPage;
    return move_pages(from, half, to, keep_source) &&
           move_pages(from + half, len - half, to + half, keep_source);
}

// /proc/self/pagemap, an entry per page: bit 63 present, bit 62 swapped out, bit 61 a file page
// (or shared anonymous memory, which a private file mapping does not hold).
constexpr uint64_t kPagePresent = uint64_t(1) << 63, kPageSwapped = uint64_t(1) << 62,
                   kPageFile = uint64_t(1) << 61;
// Calls page(address, entry) for the pages of [lo, hi) in order, reading the entries 4,096 at a
// time; returns the end of what it could read (hi, or less where pagemap cannot be read).
template <typename F>
uintptr_t scan_pagemap(uintptr_t lo, uintptr_t hi, F&& page) {
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lo;
    constexpr size_t kChunk = 4096;
    std::vector<uint64_t> e(kChunk);
    uintptr_t a = lo;  // the first page not yet looked at
    while (a < hi) {
        const size_t n = std::min<size_t>(kChunk, (hi - a) / kPage);
        if (::pread(fd, e.data(), n * 8, off_t(a / kPage * 8)) != ssize_t(n * 8)) break;
        for (size_t k = 0; k < n; ++k, a += kPage) page(a, e[k]);
    }
    ::close(fd);
    return a;
}

// [lo, hi) split into runs of pages in use (true) and not (false). In use: present, or swapped
// out (/proc/self/pagemap; a page that was written reads so until it is handed back). Where
// pagemap cannot be read, mincore (present only: a swapped-out page would read as unused) and
// *exact is false; where neither can be read, all of it is in use.
struct Run {
    uintptr_t lo, hi;
    bool resident;
};
std::vector<Run> residency(uintptr_t lo, uintptr_t hi, bool* exact = nullptr) {
    std::vector<Run> runs;
    if (exact) *exact = false;
    if (hi <= lo) return runs;
    auto add = [&](uintptr_t a, bool r) {  // page a's state, in order
        if (!runs.empty() && runs.back().resident == r && runs.back().hi == a)
            runs.back().hi = a + kPage;
        else
            runs.push_back({a, a + kPage, r});
    };
    if (scan_pagemap(lo, hi, [&](uintptr_t a, uint64_t e) {
            add(a, (e & (kPagePresent | kPageSwapped)) != 0);
        }) >= hi) {
        if (exact) *exact = true;
        return runs;
    }
    runs.clear();
    std::vector<unsigned char> v((hi - lo) / kPage);
    if (mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()) != 0) {
        runs.push_back({lo, hi, true});  // unknown: treat as written (never replaced)
        return runs;
    }
    for (size_t i = 0; i < v.size(); ++i) add(lo + i * kPage, v[i] & 1);
    return runs;
}

// A span of address space.
struct Span {
    uintptr_t addr;
    size_t len;
};

// A map_zero_pages buffer: its length, and the parts fill_zero_pages was asked for since it was
// last zeroed (never filled again: they may have been written).
struct ZeroMap {
    size_t len = 0;
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
            auto it = by_len_.lower_bound(n);  // the smallest cached span that holds the block
            if (it != by_len_.end()) {
                const Span s{it->second, it->first};
                erase(s);
                if (s.len > n) insert({s.addr + n, s.len - n});
                return reinterpret_cast<void*>(s.addr);
            }
        }
        const uintptr_t dst = reinterpret_cast<uintptr_t>(map_block(n));
        if (!enabled_ || free_bytes_ < n / 4) return reinterpret_cast<void*>(dst);
        // No cached span is large enough: the block is put together from the largest ones,
        // the rest (if any) faulted in fresh. (Where a move fails half way, the block holds
        // fresh pages there: its contents are unspecified anyway.)
        size_t off = 0;
        while (unit_down(n) > off) {
            const Span s = take_aligned(unit_down(n) - off);
            if (!s.len) break;
            if (!move_pages(s.addr, s.len, dst + off)) {
                munmap(reinterpret_cast<void*>(s.addr), s.len);
                continue;
            }
            off += s.len;
        }
        while (off < n && !free_.empty()) {
            const Span s = take_largest();
            const size_t take = std::min(s.len, n - off);
            const bool moved = move_pages(s.addr, take, dst + off);
            if (!moved) {
                munmap(reinterpret_cast<void*>(s.addr), s.len);
                continue;
            }
            if (s.len > take) insert({s.addr + take, s.len - take});
            off += take;
        }
        return reinterpret_cast<void*>(dst);
    }

    void free(void* p, size_t bytes) {
        if (!p) return;
        const size_t n = page_up(bytes);
        std::lock_guard<std::mutex> lock(mu_);
        if (!enabled_ || free_bytes_ + n > kCachedPagesMax) {
            munmap(p, n);
            return;
        }
        try {
            insert({reinterpret_cast<uintptr_t>(p), n});
        } catch (...) {  // no memory for the bookkeeping: the block goes back to the system
            munmap(p, n);
        }
        trim_count();
    }

    void release() {
        std::lock_guard<std::mutex> lock(mu_);
        release_locked();
    }
    void release_locked() {
        for (const auto& [addr, len] : free_) munmap(reinterpret_cast<void*>(addr), len);
        free_.clear();
        by_len_.clear();
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
            // Moved pages leave the address space cut into more and more kernel mappings. Now
            // and then the cache starts afresh: its pages go back to the system (one step's
            // worth of page faults), and the mappings with them.
            if (g_moves > kMovesBeforeRelease) {
                release_locked();
                g_moves = 0;
            }
            reclaim(base, page_up(bytes));
        }
        if (zm != zero_maps_.end()) zm->second.claimed.clear();
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
        const uintptr_t zlo = it->first, zhi = it->first + page_up(zm.len);
        for (const Span& t : todo) {
            if (free_.empty()) break;
            // Whole units, also where they reach past t: a unit none of whose pages is in use
            // reads zeros and was never written. (Without pagemap, a swapped-out page would
            // look unused: then only the units inside t.)
            const uintptr_t ulo = std::max(zlo, unit_down(t.addr)),
                            uhi = std::min(zhi, unit_up(t.addr + t.len));
            bool exact = false;
            std::vector<Run> runs = residency(ulo, uhi, &exact);
            if (!exact) runs = residency(t.addr, t.addr + t.len);
            for (const Run& r : runs) {
                if (r.resident) continue;
                const uintptr_t rhi = unit_down(r.hi);
                for (uintptr_t at = unit_up(r.lo); at < rhi;) {
                    const Span s = take_aligned(rhi - at);
                    if (!s.len) break;
                    const size_t take = s.len;
                    if (!move_pages(s.addr, take, at)) {
                        // Part of it may have moved in: zeroed like the rest. What is left of
                        // the span goes back to the system.
                        std::memset(reinterpret_cast<void*>(at), 0, take);
                        munmap(reinterpret_cast<void*>(s.addr), s.len);
                        continue;
                    }
                    std::memset(reinterpret_cast<void*>(at), 0, take);
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

    // A span joins its neighbours in the address space (fewer, larger spans: the cache does
    // not split into ever smaller pieces from step to step).
    void insert(Span s) {
        auto next = free_.lower_bound(s.addr);
        if (next != free_.end() && next->first == s.addr + s.len) {
            s.len += next->second;
            erase({next->first, next->second});
        }
        next = free_.lower_bound(s.addr);
        if (next != free_.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == s.addr) {
                const Span p{prev->first, prev->second};
                erase(p);
                s = {p.addr, p.len + s.len};
            }
        }
        free_.emplace(s.addr, s.len);
        by_len_.emplace(s.len, s.addr);
        free_bytes_ += s.len;
    }
    void erase(const Span& s) {
        free_.erase(s.addr);
        auto [lo, hi] = by_len_.equal_range(s.len);
        for (auto it = lo; it != hi; ++it)
            if (it->second == s.addr) {
                by_len_.erase(it);
                break;
            }
        free_bytes_ -= s.len;
    }
    // Up to max_len bytes (whole kUnits) of cached pages that start on a kUnit boundary: the
    // aligned middle of the largest span that has one; what lies around it stays cached.
    // {0, 0} when no span holds a whole aligned unit.
    Span take_aligned(size_t max_len) {
        if (max_len < kUnit) return {0, 0};
        for (auto it = by_len_.rbegin(); it != by_len_.rend() && it->first >= kUnit; ++it) {
            const Span s{it->second, it->first};
            const uintptr_t a = unit_up(s.addr), b = unit_down(s.addr + s.len);
            if (b <= a) continue;
            const size_t take = std::min<size_t>(b - a, unit_down(max_len));
            erase(s);
            if (a > s.addr) insert({s.addr, a - s.addr});
            if (s.addr + s.len > a + take) insert({a + take, s.addr + s.len - a - take});
            return {a, take};
        }
        return {0, 0};
    }
    Span take_largest() {
        auto last = std::prev(by_len_.end());
        const Span s{last->second, last->first};
        erase(s);
        return s;
    }
    // At most kMaxSpans cached spans: the smallest go back first.
    void trim_count() {
        while (free_.size() > kMaxSpans) {
            auto it = by_len_.begin();
            const Span s{it->second, it->first};
            munmap(reinterpret_cast<void*>(s.addr), s.len);
            erase(s);
        }
    }

    // Moves the resident pages of a zero-pages buffer into the cache and maps fresh zero pages
    // in their place. The pages leave with MREMAP_DONTUNMAP: the buffer's range stays mapped
    // throughout (reading zeros), so that no other mapping can land in it before it is mapped
    // afresh below.
    void reclaim(uintptr_t base, size_t len) {
        for (const Run& r0 : residency(base, base + len)) {
            const Run r{unit_up(r0.lo), unit_down(r0.hi), r0.resident};
            if (r.hi <= r.lo) continue;
            const size_t n = r.hi - r.lo;
            if (!r.resident || n < kMinSpan || free_bytes_ + n > kCachedPagesMax) continue;
            // To a destination mapped first: without MREMAP_FIXED, Linux 6.18 refused (EINVAL)
            // to move a range that starts a mapping.
            void* dst = map_aligned(n);
            if (!dst) continue;
            // Whatever moved is the cache's now; a part that did not is fresh pages there.
            move_pages(r.lo, n, reinterpret_cast<uintptr_t>(dst), /*keep_source=*/true);
            insert({reinterpret_cast<uintptr_t>(dst), n});
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
    static constexpr size_t kMovesBeforeRelease = 4096;

    std::mutex mu_;
    bool enabled_ = true;
    std::map<uintptr_t, size_t> free_;         // cached spans: address → length
    std::multimap<size_t, uintptr_t> by_len_;  // the same spans by length
    size_t free_bytes_ = 0;
    std::map<uintptr_t, ZeroMap> zero_maps_;  // by base address
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

void release_file_pages(const void* p, size_t bytes) {
    const uintptr_t lo = page_up(reinterpret_cast<uintptr_t>(p));
    const uintptr_t hi = page_down(reinterpret_cast<uintptr_t>(p) + bytes);
    if (hi <= lo) return;
    // Runs of present file pages go back; where pagemap cannot be read, the pages from there on
    // stay.
    uintptr_t run = 0;  // the start of the current run of pages to hand back, or 0
    auto flush = [&](uintptr_t end) {
        if (run) ::madvise(reinterpret_cast<void*>(run), end - run, MADV_DONTNEED);
        run = 0;
    };
    flush(scan_pagemap(lo, hi, [&](uintptr_t a, uint64_t e) {
        const bool back = (e & kPagePresent) && (e & kPageFile);
        if (back && !run) run = a;
        if (!back) flush(a);
    }));
}

double resident_fraction(const void* p, size_t bytes) {
    const uintptr_t lo = page_up(reinterpret_cast<uintptr_t>(p));
    const uintptr_t hi = page_down(reinterpret_cast<uintptr_t>(p) + bytes);
    if (hi <= lo) return 0;
    const size_t n = (hi - lo) / kPage;
    std::vector<unsigned char> in(n);
    if (::mincore(reinterpret_cast<void*>(lo), hi - lo, in.data()) != 0) return 0;
    size_t resident = 0;
    for (unsigned char c : in) resident += c & 1;
    return double(resident) / double(n);
}

}  // namespace pldr
