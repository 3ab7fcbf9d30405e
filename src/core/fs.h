// File helpers: atomic whole-file writes (temp file + fsync + rename) and checked reads.
#pragma once
#include <string>
#include <string_view>

namespace pldr {

// Writes `bytes` to `path` atomically: a crash leaves either the old file or the new one.
void write_file_atomic(const std::string& path, std::string_view bytes);
// Reads a whole file; throws pldr::Error with the path on failure.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace pldr
