// File helpers: crash-safe whole-file writes (temp file + fsync + rename + fsync of the
// directory), checked reads, and the check that an output never replaces an input.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace pldr {

// Writes `bytes` to `path` atomically and durably: a unique temporary file in the same
// directory, fsync, rename over `path`, fsync of the directory. A crash (SIGKILL, power loss)
// at any point leaves either the old file or the new one, never a partial one.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The same, written piece by piece: for files too large to hold twice in memory (a 110M model's
// optimizer state is 1.3 GB). `size` is the file's final size (the crash tests stop at its
// half); commit() syncs and renames; destroyed uncommitted, the temporary file is removed and
// `path` is untouched.
class AtomicFile {
  public:
    AtomicFile(const std::string& path, size_t size);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    void append(std::string_view bytes);
    void commit();

  private:
    [[noreturn]] void failed(int err);
    std::string path_, tmp_;
    int fd_ = -1;
    size_t size_ = 0, written_ = 0;
    bool halfway_ = false;
};
// fsyncs a directory so that renames and creations inside it survive a crash.
void fsync_dir(const std::string& dir);
// Fault injection for the crash tests: when the environment variable PLDR_CRASH_AT is
// "NAME" or "NAME:K", the process kills itself with SIGKILL the first (or K-th) time it reaches
// crash_point("NAME"). Without the variable this is one cached getenv.
void crash_point(const char* name);
// Reads a whole file; throws pldr::Error with the path on failure.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

// The inputs of a command, for the output check below. A file input is itself; a directory
// input (a model directory, a data directory) stands for the directory and every regular file
// below it (two levels deep, the depth of a sharded checkpoint).
struct InputSet {
    void add_file(const std::string& path);
    void add_dir(const std::string& path);
    struct Entry {
        std::string path;      // as given
        std::string resolved;  // canonical (links resolved) or empty when it does not exist
        unsigned long long dev = 0, ino = 0;
        bool exists = false, is_dir = false;
    };
    std::vector<Entry> entries;
};

// Throws pldr::Error when writing the file `out` would replace one of `in` (same resolved path,
// or same device and inode, so hard and symbolic links count): "<flag> <out> would overwrite
// the input <input>". Nothing happens when `out` does not exist yet and is not an input's path.
void require_not_input(const std::string& out, const InputSet& in, const std::string& flag);
// For an output directory: refuses a directory that is one of the input directories (resolved
// path or inode), and any of the files `writes` (names inside `out`) that is an input.
void require_dir_not_input(const std::string& out, const InputSet& in, const std::string& flag,
                           const std::vector<std::string>& writes = {});
// True when `dir` is an existing directory holding a model (config.json with model.safetensors
// or model.safetensors.index.json).
bool is_model_dir(const std::string& dir);
// True when `dir` is an existing directory holding a pldr training checkpoint, complete
// (train_state.safetensors, train/checkpoint.h) or in an interrupted swap (.ckpt-new/COMMIT).
bool is_checkpoint_dir(const std::string& dir);

// The output rule, the one every writer applies (the CLI's commands, the C++, C and Python APIs;
// docs/errors.md "Outputs"):
//   - an output path must be given: "" is an error naming the flag (a file written to "" or a
//     directory "" would land in the current directory);
//   - it never replaces an input (require_not_input, require_dir_not_input);
//   - an output directory is not an existing file;
//   - writing into an existing model directory or training checkpoint needs `force`: for an
//     output directory, being one; for an output file, replacing an existing file of one.
//     The exception is the command's own checkpoint `own` (training that resumes into its --out),
//     which it may always rewrite.
// `flag` names the output in the messages ("--out", "out_dir"); "-" (standard output) passes.
void require_output_file(const std::string& out, const InputSet& in, const std::string& flag,
                         bool force);
// The first clause alone, for an output that is not one path (a prefix of several files).
void require_output_path(const std::string& out, const std::string& flag);
void require_output_dir(const std::string& out, const InputSet& in, const std::string& flag,
                        const std::vector<std::string>& writes, bool force,
                        const std::string& own = "");

}  // namespace pldr
