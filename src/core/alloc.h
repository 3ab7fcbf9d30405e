// Process-wide allocator tuning for the pldr tool and the benchmarks.
#pragma once

namespace pldr {

// A forward or training step allocates and frees tens of MB of temporaries. glibc's defaults give
// that memory back (heap trim, munmap) after each step and fault it in again at the next:
// thousands of page faults per step, which are costly on a virtual machine (measured: a third of
// a prefill's time in memset and page faults). This keeps freed memory for reuse. Peak RSS is
// unchanged (a step's peak is reached either way). Call once at program start.
void tune_allocator();

}  // namespace pldr
