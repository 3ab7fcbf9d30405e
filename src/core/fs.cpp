// File helpers (see fs.h).
#include "core/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pldr {

void write_file_atomic(const std::string& path, std::string_view bytes) {
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("cannot write ", path, ": ", std::strerror(errno));
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            fail("cannot write ", path, ": ", std::strerror(e));
        }
        off += size_t(w);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        fail("cannot write ", path, ": ", std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        fail("cannot write ", path, ": ", std::strerror(e));
    }
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

}  // namespace pldr
