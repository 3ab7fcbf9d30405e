// The page cache of large blocks and the zero-pages buffers (core/alloc.h): contents survive
// every move of pages between blocks, a zero-pages buffer reads zeros after zero() and keeps
// what was written after fill_zero_pages, whatever the order of the calls.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/alloc.h"
#include "core/tensor.h"

namespace {

struct Block {
    uint32_t* p = nullptr;
    size_t n = 0;  // uint32 words
    uint32_t tag = 0;
};

void write(Block& b) {
    for (size_t i = 0; i + 1 < b.n; i += 97) b.p[i] = b.tag ^ uint32_t(i);
    b.p[b.n - 1] = b.tag;
}
bool intact(const Block& b) {
    for (size_t i = 0; i + 1 < b.n; i += 97)
        if (b.p[i] != (b.tag ^ uint32_t(i))) return false;
    return b.p[b.n - 1] == b.tag;
}

}  // namespace

// Blocks of random sizes allocated and freed in random order (the cache carves, assembles from
// several cached spans and moves pages): every live block keeps its contents.
TEST(PageCache, BlocksKeepTheirContentsThroughAllocationsAndFrees) {
    std::mt19937 rng(7);
    std::vector<Block> live;
    uint32_t tag = 1;
    for (int op = 0; op < 600; ++op) {
        if (live.size() < 3 || (live.size() < 40 && rng() % 2)) {
            Block b;
            b.n = (size_t(64) << 10) + rng() % (size_t(3) << 20);  // 256 KB .. 12 MB
            b.p = static_cast<uint32_t*>(pldr::cached_pages_allocate(b.n * 4));
            ASSERT_EQ(reinterpret_cast<uintptr_t>(b.p) % 4096, 0u);
            b.tag = tag++;
            write(b);
            live.push_back(b);
        } else {
            const size_t i = rng() % live.size();
            EXPECT_TRUE(intact(live[i])) << "op " << op;
            pldr::cached_pages_free(live[i].p, live[i].n * 4);
            live.erase(live.begin() + long(i));
        }
        if (op % 50 == 0) {
            for (const Block& b : live) {
                EXPECT_TRUE(intact(b)) << "op " << op;
            }
        }
    }
    for (const Block& b : live) {
        EXPECT_TRUE(intact(b)) << "at the end";
        pldr::cached_pages_free(b.p, b.n * 4);
    }
    if (pldr::page_cache_enabled()) {
        EXPECT_GT(pldr::cached_pages_bytes(), 0u);
    }
    pldr::release_cached_pages();
    EXPECT_EQ(pldr::cached_pages_bytes(), 0u);
}

// A gradient-like buffer: parts filled from the cache and written, parts written without a fill,
// parts filled twice (the second fill must not touch what the first one's writer wrote), then
// zeroed: zeros everywhere, and the cache's pages (moved out of the buffer) still serve blocks.
TEST(PageCache, ZeroPagesFilledFromTheCacheKeepWritesAndZeroAgain) {
    const size_t n = pldr::kReturnBytes / sizeof(float) + 12345;  // reclaimed, not memset
    pldr::ZeroPages<float> z(n);
    std::mt19937 rng(3);
    for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE(round);
        // Activation-like blocks to free into the cache.
        std::vector<Block> tmp;
        for (int k = 0; k < 12; ++k) {
            Block b;
            b.n = (size_t(1) << 20) + rng() % (size_t(2) << 20);
            b.p = static_cast<uint32_t*>(pldr::cached_pages_allocate(b.n * 4));
            b.tag = uint32_t(k + 100);
            write(b);
            tmp.push_back(b);
        }
        std::vector<float> expect(n, 0.0f);
        const size_t parts = 9;
        for (size_t q = 0; q < parts; ++q) {
            if (q < tmp.size()) pldr::cached_pages_free(tmp[q].p, tmp[q].n * 4);
            const size_t lo = n * q / parts, hi = n * (q + 1) / parts;
            if (q % 3 != 2) pldr::fill_zero_pages(z.data() + lo, (hi - lo) * sizeof(float));
            for (size_t i = lo; i < hi; ++i) ASSERT_EQ(z[i], 0.0f) << i;  // fill keeps zeros
            for (size_t i = lo; i < hi; i += 61) z[i] = expect[i] = float(i % 1000) + 1.0f;
            // A second fill over written parts changes nothing (micro-batches accumulate).
            pldr::fill_zero_pages(z.data() + lo / 2, (hi - lo / 2) * sizeof(float));
        }
        for (size_t i = 0; i < n; i += 61) ASSERT_EQ(z[i], expect[i]) << i;
        for (size_t q = parts; q < tmp.size(); ++q) {
            ASSERT_TRUE(intact(tmp[q]));
            pldr::cached_pages_free(tmp[q].p, tmp[q].n * 4);
        }
        const size_t cached_before = pldr::cached_pages_bytes();
        z.zero();
        // The written pages moved into the cache (not handed back to the system).
        if (pldr::page_cache_enabled()) {
            EXPECT_GE(pldr::cached_pages_bytes(), cached_before + (size_t(32) << 20));
        }
        size_t nonzero = 0;
        for (float x : z) nonzero += x != 0.0f;
        ASSERT_EQ(nonzero, 0u);
        // The reclaimed pages serve new blocks with their contents intact.
        Block b;
        b.n = size_t(20) << 20;
        b.p = static_cast<uint32_t*>(pldr::cached_pages_allocate(b.n * 4));
        b.tag = 9;
        write(b);
        EXPECT_TRUE(intact(b));
        pldr::cached_pages_free(b.p, b.n * 4);
    }
}

// Tensor storage from kCachedPagesMin bytes comes from the cache: a large tensor copied, moved,
// resized and freed in a loop keeps its values.
TEST(PageCache, LargeTensorsKeepTheirValues) {
    for (int r = 0; r < 20; ++r) {
        pldr::Tensor<float> a({int64_t(pldr::kCachedPagesMin / sizeof(float)) + r * 1000});
        for (int64_t i = 0; i < a.numel(); ++i) a[i] = float(i % 1009);
        pldr::Tensor<float> b = a;
        b.resize_for_overwrite({a.numel() * 3});
        for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(b[i], float(i % 1009));
        pldr::Tensor<float> c = std::move(a);
        ASSERT_EQ(c[c.numel() - 1], float((c.numel() - 1) % 1009));
    }
    // It was the cache's: a freed large tensor's pages are there (not under AddressSanitizer,
    // where tensors stay on the heap).
    pldr::release_cached_pages();
    { pldr::Tensor<float> t({int64_t(pldr::kCachedPagesMin / sizeof(float))}); }
    if (pldr::page_cache_enabled() && !PLDR_ASAN) {
        EXPECT_GE(pldr::cached_pages_bytes(), pldr::kCachedPagesMin);
    }
}

// Pages move between blocks in whole 2 MB units where they can: the kernel then moves a page
// table's worth of entries at once, which a virtual machine's shadow page tables carry over, while
// 4 KB pages moved one by one each cost a host fault at their next touch there (measured on
// the PVM guests of 2026-12-07: 0.6-0.8 GB/s against 20 GB/s for a memset after the move). So
// fresh blocks and zero-pages buffers start on a 2 MB boundary, and a fill of a zero-pages buffer
// takes its whole units from the cache.
TEST(PageCache, BlocksStartOnTwoMegabyteUnitsAndFillsTakeWholeUnits) {
    constexpr uintptr_t kUnit = uintptr_t(2) << 20;
    for (size_t bytes : {pldr::kCachedPagesMin, (size_t(5) << 20) + 12288, size_t(13) << 20}) {
        pldr::release_cached_pages();  // a fresh mapping, not a cached span
        void* p = pldr::cached_pages_allocate(bytes);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kUnit, 0u) << bytes;
        std::memset(p, 1, bytes);
        pldr::cached_pages_free(p, bytes);
    }
    const size_t n = pldr::kReturnBytes / sizeof(float) * 2 + 777;
    pldr::ZeroPages<float> z(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data()) % kUnit, 0u);
    if (!pldr::page_cache_enabled() || PLDR_ASAN) return;
    std::fill(z.begin(), z.end(), 2.0f);
    pldr::release_cached_pages();
    z.zero();  // its pages move into the cache
    const size_t cached = pldr::cached_pages_bytes();
    EXPECT_GE(cached, n * sizeof(float) - 2 * kUnit);
    // A fill over an odd range (not on unit boundaries) takes every whole unit it covers, even
    // those that reach past it (nothing there was written): only the partial units at the
    // buffer's end are left out.
    const size_t lo = 1000, hi = n - 3000;
    pldr::fill_zero_pages(z.data() + lo, (hi - lo) * sizeof(float));
    EXPECT_GE(cached - pldr::cached_pages_bytes(), n * sizeof(float) / kUnit * kUnit - kUnit);
    for (size_t i = 0; i < n; i += 1021) ASSERT_EQ(z[i], 0.0f) << i;
}

// resident_fraction counts the whole pages inside the range that are resident: of anonymous
// memory, those written.
TEST(Residency, TheFractionOfWholePagesWritten) {
    const size_t page = 4096, n = 64;
    void* m = mmap(nullptr, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    char* p = static_cast<char*>(m);
    EXPECT_EQ(pldr::resident_fraction(p, n * page), 0.0);
    for (size_t i = 0; i < n; i += 4) p[i * page + 7] = 1;  // 16 of 64 pages
    EXPECT_DOUBLE_EQ(pldr::resident_fraction(p, n * page), 0.25);
    // The partial pages at either end do not count: pages 1..62, of which 15 written.
    EXPECT_DOUBLE_EQ(pldr::resident_fraction(p + 1, n * page - 2), 15.0 / 62.0);
    EXPECT_EQ(pldr::resident_fraction(p + 1, page), 0.0);  // no whole page
    for (size_t i = 0; i < n; ++i) p[i * page] = 2;
    EXPECT_EQ(pldr::resident_fraction(p, n * page), 1.0);
    munmap(m, n * page);
}
