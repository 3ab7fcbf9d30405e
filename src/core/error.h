// Error handling: pldr::Error for recoverable problems (bad input, files, configs);
// the CLI turns it into one line on stderr and exit code 1. PLDR_CHECK guards invariants: it
// throws pldr::InternalError (a bug, exit code 2; docs/errors.md).
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "pldr/error.hpp"  // pldr::Error (shared with the public API, include/pldr/)

namespace pldr {

// A broken internal invariant (a bug, not bad input). Derives from Error so that library code
// that reports errors generically still sees it.
struct InternalError : Error {
    using Error::Error;
};

namespace detail {
inline void concat_into(std::ostringstream&) {}
template <typename A, typename... R>
void concat_into(std::ostringstream& os, const A& a, const R&... r) {
    os << a;
    concat_into(os, r...);
}
}  // namespace detail

// Builds a message from any streamable parts: fail("bad id ", id, " >= ", vocab).
template <typename... A>
std::string cat(const A&... a) {
    std::ostringstream os;
    detail::concat_into(os, a...);
    return os.str();
}

template <typename... A>
[[noreturn]] void fail(const A&... a) {
    throw Error(cat(a...));
}

// Checked int64 arithmetic for every size a user sets and every size derived from them
// (batches × batch, prompt + max_new, steps × batch × accum, batch × seq, ...): the exact
// result, or pldr::Error naming the quantity when it does not fit in 64 bits; a wrapped product
// would pass the range checks after it and give a silently wrong result (docs/errors.md, the
// SIZE-*-overflow rows).
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        fail(what, " is too large: ", a, " x ", b, " does not fit in 64 bits");
    return r;
}
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        fail(what, " is too large: ", a, " + ", b, " does not fit in 64 bits");
    return r;
}

}  // namespace pldr

// Input validation that reports to the user (throws pldr::Error).
#define PLDR_REQUIRE(cond, ...)                 \
    do {                                        \
        if (!(cond)) ::pldr::fail(__VA_ARGS__); \
    } while (0)

// Internal invariant (a bug if it fires): throws with file and line.
#define PLDR_CHECK(cond)                                                                         \
    do {                                                                                         \
        if (!(cond))                                                                             \
            throw ::pldr::InternalError(                                                         \
                ::pldr::cat("internal check failed: ", #cond, " at ", __FILE__, ":", __LINE__)); \
    } while (0)
