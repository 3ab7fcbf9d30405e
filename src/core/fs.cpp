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

void write_file_atomic(const std::string& path, std::string_view bytes) {
    static std::atomic<unsigned> counter{0};
    const std::string tmp =
        path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot write ", path, ": ", std::strerror(errno));
    size_t off = 0;
    const size_t half = bytes.size() / 2;
    bool halfway = false;
    while (off < bytes.size()) {
        // The crash tests stop here with half of the file written.
        if (!halfway && off >= half) halfway = true, crash_point("write.partial");
        const size_t n = off < half ? half - off : bytes.size() - off;
        ssize_t w = ::write(fd, bytes.data() + off, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            fail("cannot write ", path, ": ", std::strerror(e));
        }
        off += size_t(w);
    }
    crash_point("write.unsynced");
    if (::fsync(fd) != 0) {
        int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail("cannot write ", path, ": ", std::strerror(e));
    }
    if (::close(fd) != 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        fail("cannot write ", path, ": ", std::strerror(e));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        fail("cannot write ", path, ": ", std::strerror(e));
    }
    crash_point("write.renamed");
    fsync_dir(parent_of(path));
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

bool is_model_dir(const std::string& dir) {
    std::error_code ec;
    const fs::path d(dir);
    return fs::is_directory(d, ec) && fs::exists(d / "config.json", ec) &&
           (fs::exists(d / "model.safetensors", ec) ||
            fs::exists(d / "model.safetensors.index.json", ec));
}

}  // namespace pldr
