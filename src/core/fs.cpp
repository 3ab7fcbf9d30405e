// File helpers (see fs.h).
#include "core/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pldr {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
    const fs::path p = fs::path(path).parent_path();
    return p.empty() ? "." : p.string();
}

}  // namespace

void fsync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("cannot sync directory ", dir, ": ", std::strerror(errno));
    // Some file systems refuse fsync on a directory (EINVAL); the rename is then as durable as
    // they make it.
    if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
        const int e = errno;
        ::close(fd);
        fail("cannot sync directory ", dir, ": ", std::strerror(e));
    }
    ::close(fd);
}

void crash_point(const char* name) {
    static const char* spec = std::getenv("PLDR_CRASH_AT");
    if (!spec || !*spec) return;
    static std::atomic<long> hits{0};
    const std::string sp(spec);
    const size_t colon = sp.find(':');
    if (sp.compare(0, colon, name) != 0 || std::strlen(name) != std::min(colon, sp.size())) return;
    const long k = colon == std::string::npos ? 1 : std::atol(sp.c_str() + colon + 1);
    if (++hits == k) ::kill(::getpid(), SIGKILL);
}

AtomicFile::AtomicFile(const std::string& path, size_t size) : path_(path), size_(size) {
    static std::atomic<unsigned> counter{0};
    tmp_ = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot write ", path, ": ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::failed(int err) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    tmp_.clear();
    fail("cannot write ", path_, ": ", std::strerror(err));
}

void AtomicFile::append(std::string_view bytes) {
    PLDR_CHECK(fd_ >= 0);
    const size_t half = size_ / 2;
    size_t off = 0;
    while (off < bytes.size()) {
        // The crash tests stop here with half of the file written.
        if (!halfway_ && written_ >= half) halfway_ = true, crash_point("write.partial");
        size_t n = bytes.size() - off;
        if (written_ < half) n = std::min(n, half - written_);
        const ssize_t w = ::write(fd_, bytes.data() + off, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            failed(errno);
        }
        off += size_t(w);
        written_ += size_t(w);
    }
}

void AtomicFile::commit() {
    PLDR_CHECK(fd_ >= 0 && written_ == size_);
    crash_point("write.unsynced");
    if (::fsync(fd_) != 0) failed(errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) failed(errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) failed(errno);
    tmp_.clear();
    crash_point("write.renamed");
    fsync_dir(parent_of(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    AtomicFile f(path, bytes.size());
    f.append(bytes);
    f.commit();
}

std::string read_file(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) fail("cannot open ", path, ": ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail("cannot open ", path, ": is a directory");
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open ", path, ": ", std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) fail("cannot read ", path);
    return ss.str();
}

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

namespace {

InputSet::Entry make_entry(const std::string& path) {
    InputSet::Entry e;
    e.path = path;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
        e.exists = true;
        e.is_dir = S_ISDIR(st.st_mode);
        e.dev = static_cast<unsigned long long>(st.st_dev);
        e.ino = static_cast<unsigned long long>(st.st_ino);
    }
    std::error_code ec;
    const fs::path r = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (!ec) e.resolved = r.string();
    return e;
}

bool same(const InputSet::Entry& a, const InputSet::Entry& b) {
    if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
    return !a.resolved.empty() && a.resolved == b.resolved;
}

}  // namespace

void InputSet::add_file(const std::string& path) {
    if (!path.empty()) entries.push_back(make_entry(path));
}

void InputSet::add_dir(const std::string& path) {
    if (path.empty()) return;
    entries.push_back(make_entry(path));
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return;
    // The files of a model or data directory (and of its shard sub-folders).
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
        if (it.depth() > 1) {
            it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file(ec)) entries.push_back(make_entry(it->path().string()));
        if (entries.size() > 100000) break;  // a pathological directory: enough for the check
    }
}

void require_not_input(const std::string& out, const InputSet& in, const std::string& flag) {
    if (out.empty() || out == "-") return;
    const InputSet::Entry o = make_entry(out);
    for (const auto& e : in.entries)
        if (same(o, e))
            fail(flag, " ", out, " would overwrite the input ", e.path,
                 e.is_dir ? " (a directory)" : "",
                 e.resolved.empty() || e.resolved == e.path ? "" : " (" + e.resolved + ")",
                 "; choose another output path");
}

void require_dir_not_input(const std::string& out, const InputSet& in, const std::string& flag,
                           const std::vector<std::string>& writes) {
    if (out.empty()) return;
    const InputSet::Entry o = make_entry(out);
    for (const auto& e : in.entries)
        if (e.is_dir && same(o, e))
            fail(flag, " ", out, " is the input directory ", e.path,
                 e.resolved.empty() || e.resolved == e.path ? "" : " (" + e.resolved + ")",
                 "; writing there would overwrite it; choose another output directory");
    for (const std::string& w : writes)
        require_not_input((fs::path(out) / w).string(), in, flag + " " + out + ":");
}

bool is_checkpoint_dir(const std::string& dir) {
    std::error_code ec;
    const fs::path d(dir);
    // The names of train/checkpoint.h (kTrainStateFile, the transaction folder and its marker);
    // core sits below train; Reliability.OutputRule checks the state file's name. A folder
    // without its COMMIT marker is an interrupted first write, which opening discards: no
    // checkpoint yet.
    return fs::is_directory(d, ec) && (fs::exists(d / "train_state.safetensors", ec) ||
                                       fs::exists(d / ".ckpt-new" / "COMMIT", ec));
}

namespace {

// "a model directory" / "a training checkpoint" for an existing one, else "".
std::string model_kind(const std::string& dir) {
    if (is_checkpoint_dir(dir)) return "a pldr training checkpoint";
    if (is_model_dir(dir)) return "a model directory";
    return "";
}

}  // namespace

void require_output_path(const std::string& out, const std::string& flag) {
    PLDR_REQUIRE(!out.empty(), flag,
                 " is empty: give an output path (an empty one would write into the current "
                 "directory)");
}

void require_output_file(const std::string& out, const InputSet& in, const std::string& flag,
                         bool force) {
    require_output_path(out, flag);
    if (out == "-") return;
    require_not_input(out, in, flag);
    std::error_code ec;
    if (force || !fs::exists(fs::symlink_status(out, ec)) || ec) return;
    const std::string dir = parent_of(out), kind = model_kind(dir);
    PLDR_REQUIRE(kind.empty(), flag, " ", out, " would replace a file of ", kind, " (", dir,
                 "); choose another path, or force it (--force)");
}

void require_output_dir(const std::string& out, const InputSet& in, const std::string& flag,
                        const std::vector<std::string>& writes, bool force,
                        const std::string& own) {
    require_output_path(out, flag);
    std::error_code ec;
    PLDR_REQUIRE(!fs::exists(out, ec) || fs::is_directory(out, ec), flag, " ", out,
                 " is a file, not a directory");
    require_dir_not_input(out, in, flag, writes);
    if (force) return;
    if (!own.empty() && make_entry(out).exists && same(make_entry(out), make_entry(own))) return;
    const std::string kind = model_kind(out);
    PLDR_REQUIRE(kind.empty(), flag, " ", out, " is ", kind,
                 "; writing there would replace it; choose a new directory, or force it (--force)");
}

bool is_model_dir(const std::string& dir) {
    std::error_code ec;
    const fs::path d(dir);
    return fs::is_directory(d, ec) && fs::exists(d / "config.json", ec) &&
           (fs::exists(d / "model.safetensors", ec) ||
            fs::exists(d / "model.safetensors.index.json", ec));
}

}  // namespace pldr
