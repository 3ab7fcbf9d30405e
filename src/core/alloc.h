// Process-wide allocator tuning, and memory that goes back to the operating system on demand.
#pragma once
#include <cstddef>
#include <utility>

namespace pldr {

// A forward or training step allocates and frees tens of MB of temporaries. glibc's defaults give
// that memory back (heap trim, munmap) after each step and fault it in again at the next:
// thousands of page faults per step, which are costly on a virtual machine (measured: a third of
// a prefill's time in memset and page faults). This keeps freed memory for reuse. Peak RSS is
// unchanged (a step's peak is reached either way). Call once at program start.
void tune_allocator();

// Memory worth handing back to the system: below this, faulting the pages in again costs more
// than holding them (measured: at the M and S training shapes, trimming after every layer and
// dropping the gradient pages every step cost 15-22 % of the step). Also the allocator's mmap
// threshold (tune_allocator).
constexpr size_t kReturnBytes = size_t(64) << 20;

// Gives the allocator's free memory back to the operating system (malloc_trim): for a caller
// that has just freed a large part of its working set (at least kReturnBytes) and is about to
// fill memory that the allocator cannot reuse, so that the process's peak does not hold both.
// The page cache below keeps its pages: they move to where they are needed instead.
void release_free_memory();

// ---- the page cache: large blocks (tensor storage from kCachedPagesMin bytes) ----
// A freed block keeps its pages (resident, up to 1 GB in all) for the next block, and pages move
// between blocks and into zero-pages buffers (mremap: page-table entries change hands, nothing
// is copied or faulted). A training step of the 110M model otherwise handed its activations
// back to the system layer by layer and faulted the gradients in, then handed the gradients
// back and faulted the next step's activations in: about 1.4 GB of page faults per step, which a
// virtual machine serves at 0.3-2 GB/s (the host backs each page again). The process's peak is
// unchanged: a block takes cached pages before fresh ones, so the resident total grows only
// when the cache is empty. PLDR_PAGE_CACHE=0 turns it off: tensors then stay on the heap, and
// the training step hands freed memory back to the system after each layer (model/backward.cpp).
// From 4 MB: smaller tensors stay on the heap, which reuses them without faults too (from
// 256 KB, M-size prefills ran up to a third slower in alternated runs).
inline constexpr size_t kCachedPagesMin = size_t(4) << 20;
// A block of at least `bytes` (page-aligned; contents unspecified), and its release (the same
// byte count). Thread-safe. Throws std::bad_alloc when no memory can be mapped.
void* cached_pages_allocate(size_t bytes);
void cached_pages_free(void* p, size_t bytes);
// Gives the cached pages back to the system; the bytes the cache holds now; whether it is on.
void release_cached_pages();
size_t cached_pages_bytes();
bool page_cache_enabled();

// Hands back the whole pages of [p, p + bytes), inside a private mapping of a file, that still
// hold the file's contents: resident file pages, which read the same when a later access faults
// them in again from the page cache. A page that a write has copied (now anonymous memory, the
// only copy of what was written) stays, as do the partial pages at either end. Decided page by
// page from /proc/self/pagemap; where that cannot be read, nothing is handed back. Advisory: the
// contents never change.
void release_file_pages(const void* p, size_t bytes);

// The fraction (0 to 1) of the whole pages of [p, p + bytes), inside a mapping, that are
// resident: for a file mapping, those the page cache holds (mapped here or not); for anonymous
// memory, those written. 0 where there is no whole page or mincore fails.
double resident_fraction(const void* p, size_t bytes);

// Anonymous zero-filled pages (mmap): resident only once written. Throw pldr::Error on failure.
void* map_zero_pages(size_t bytes);
void unmap_pages(void* p, size_t bytes);
// Zeroes [p, p + bytes) (a whole mapping from map_zero_pages): from kReturnBytes up by moving
// its written pages into the page cache, or handing them back to the system when the cache is
// off (either way the buffer reads as zeros and costs no memory until written again), below that
// with memset.
void zero_pages(void* p, size_t bytes);
// Makes the pages of [p, p + bytes), inside a map_zero_pages buffer, resident with cached pages
// (zeroed) where they are not resident yet, so that the writes that follow do not fault. The
// contents do not change: a non-resident page of such a buffer reads as zeros. A part of the
// buffer that an earlier call since its last zero_pages covered is left alone (it may have been
// written since). Anything else (another pointer, the cache off or empty): nothing happens.
void fill_zero_pages(void* p, size_t bytes);

// A zero-initialised array of trivially copyable T whose pages are mapped as they are first
// written (or moved in from the page cache by fill_zero_pages), and whose zero() hands them back
// (to the page cache): for a buffer that is cleared often and filled late, part by part (the
// training gradients: the backward writes them layer by layer while it frees the layers'
// activations, so the gradients of the layers not reached yet cost no memory, as with PyTorch's
// zero_grad(set_to_none=True)).
template <typename T>
class ZeroPages {
  public:
    ZeroPages() = default;
    explicit ZeroPages(size_t n)
        : n_(n), p_(n ? static_cast<T*>(map_zero_pages(n * sizeof(T))) : nullptr) {}
    ZeroPages(ZeroPages&& o) noexcept
        : n_(std::exchange(o.n_, size_t(0))), p_(std::exchange(o.p_, nullptr)) {}
    ZeroPages& operator=(ZeroPages&& o) noexcept {
        if (this != &o) {
            unmap_pages(p_, n_ * sizeof(T));
            n_ = std::exchange(o.n_, size_t(0));
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ZeroPages(const ZeroPages&) = delete;
    ZeroPages& operator=(const ZeroPages&) = delete;
    ~ZeroPages() { unmap_pages(p_, n_ * sizeof(T)); }

    void zero() { zero_pages(p_, n_ * sizeof(T)); }
    T* data() { return p_; }
    const T* data() const { return p_; }
    size_t size() const { return n_; }
    T* begin() { return p_; }
    T* end() { return p_ + n_; }
    const T* begin() const { return p_; }
    const T* end() const { return p_ + n_; }
    T& operator[](size_t i) { return p_[i]; }
    const T& operator[](size_t i) const { return p_[i]; }

  private:
    size_t n_ = 0;
    T* p_ = nullptr;
};

}  // namespace pldr
