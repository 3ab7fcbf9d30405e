// Shared helpers of the fuzz targets (fuzz/README.md): a private scratch directory, files
// written from the input, splitting one input into several files, and the rule that bad input
// may only ever surface as pldr::Error.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace pldr::fuzz {

// A scratch directory for this process, created once (TMPDIR or /tmp) and removed when the
// process exits normally (libFuzzer's -runs/-max_total_time end does; a crash keeps it).
inline const std::string& scratch() {
    struct Dir {
        std::string path;
        Dir() {
            const char* t = std::getenv("TMPDIR");
            path = std::string(t && *t ? t : "/tmp") + "/pldr-fuzz-XXXXXX";
            if (!::mkdtemp(path.data())) std::abort();
        }
        ~Dir() {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
    };
    static const Dir dir;
    return dir.path;
}

inline std::string write_bytes(const std::string& name, std::string_view bytes) {
    const std::string p = scratch() + "/" + name;
    std::FILE* f = std::fopen(p.c_str(), "wb");
    if (!f) std::abort();
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
        std::abort();
    std::fclose(f);
    return p;
}

// Multi-file inputs: the parts are separated by this line (seeds are built with it; the
// dictionaries hold it so that the fuzzer can make and remove parts).
inline constexpr std::string_view kSep = "\n--PLDR-FILE--\n";

inline std::vector<std::string_view> split_parts(std::string_view in, size_t max_parts) {
    std::vector<std::string_view> out;
    while (out.size() + 1 < max_parts) {
        const size_t k = in.find(kSep);
        if (k == std::string_view::npos) break;
        out.push_back(in.substr(0, k));
        in.remove_prefix(k + kSep.size());
    }
    out.push_back(in);
    return out;
}

// Runs f; pldr::Error (bad input, reported as one line) is the expected outcome of most inputs.
// A broken invariant (pldr::InternalError) or any other exception is a bug: abort, so that
// libFuzzer records the input.
template <typename F>
int guarded(F&& f) {
    try {
        f();
    } catch (const pldr::InternalError& e) {
        std::fprintf(stderr, "internal error: %s\n", e.what());
        std::abort();
    } catch (const pldr::Error& e) {
        static const bool verbose = std::getenv("PLDR_FUZZ_VERBOSE") != nullptr;
        if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}

}  // namespace pldr::fuzz
