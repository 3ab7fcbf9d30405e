// File helpers of the pldr API for tools and servers built on it: crash-safe writes, checked
// reads, tensor files (safetensors, npy), and the check that an output never replaces an input.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pldr/pldr.hpp"

namespace pldr::api {

// Writes `bytes` to `path` atomically and durably (temporary file, fsync, rename): a crash
// leaves the old file or the new one, never a partial one.
void write_file_atomic(const std::string& path, const std::string& bytes);
// A whole file; throws pldr::Error naming the path.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
// Throws pldr::Error "<what> is not valid UTF-8 (byte N)" unless text is UTF-8.
void require_utf8(const std::string& text, const std::string& what);

// Tensor files. save_safetensors writes the tensors (f32, f64 or i64, in order) and string
// metadata atomically; save_npy one tensor as a NumPy .npy file.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {});
void save_npy(const std::string& path, const Tensor& t);
// An i64 tensor owning a copy of `ids`.
Tensor int_tensor(std::vector<int64_t> shape, std::vector<int64_t> ids);

// The inputs of a command, and the output rule every pldr writer applies (docs/errors.md
// "Outputs"): check_file / check_dir throw pldr::Error when the output path is empty, when it
// would replace one of the inputs ("<flag> <out> would overwrite the input <input>", through
// hard or symbolic links too; a directory input stands for every file below it), and, unless
// `force`, when it writes into an existing model directory or training checkpoint (an output
// directory that is one, an output file that replaces one of its files). `own`: a checkpoint
// the command may always rewrite (training that resumes into its own --out). "-" passes
// check_file (standard output).
class Inputs {
  public:
    Inputs();
    ~Inputs();
    Inputs& file(const std::string& path);  // "" is ignored
    Inputs& dir(const std::string& path);
    void check_file(const std::string& out, const std::string& flag, bool force = false) const;
    // An output directory, and the files `writes` it will get.
    void check_dir(const std::string& out, const std::string& flag,
                   const std::vector<std::string>& writes = {}, bool force = false,
                   const std::string& own = "") const;

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace pldr::api
