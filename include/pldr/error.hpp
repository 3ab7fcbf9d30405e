// pldr::Error, the one exception type of the pldr library (public API and internals alike):
// a one-line message naming the file, option or value at fault.
#pragma once
#include <stdexcept>

namespace pldr {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace pldr
