// pldr::Error, the one exception type of the pldr library (public API and internals alike):
// a one-line message naming the file, option or value at fault.
#pragma once
#include <stdexcept>

namespace pldr {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A broken internal invariant (a bug, not bad input; tools exit with code 2). Derives from
// Error so that code that reports errors generically still sees it.
struct InternalError : Error {
    using Error::Error;
};

}  // namespace pldr
