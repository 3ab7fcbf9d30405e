// Token shards and packing (see shard.h, docs/formats.md).
#include "train/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/fs.h"

namespace pldr {

static_assert(std::endian::native == std::endian::little, "shard I/O assumes a little-endian host");

namespace {

constexpr int64_t kMaxVocab = (int64_t{1} << 32) - 1;

template <class T>
void put(std::string& s, size_t off, T v) {
    std::memcpy(s.data() + off, &v, sizeof(T));
}

template <class T>
T get_at(const unsigned char* p, size_t off) {
    T v;
    std::memcpy(&v, p + off, sizeof(T));
    return v;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int shard_dtype_for_vocab(int64_t vocab_size) {
    return vocab_size <= 65536 ? 2 : 4;
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_shard(const std::string& path, const std::vector<int64_t>& tokens, int64_t vocab_size,
                 int64_t ctx) {
    PLDR_REQUIRE(vocab_size >= 1 && vocab_size <= kMaxVocab, "shard ", path, ": vocab size ",
                 vocab_size, " outside [1, 2^32 - 1]");
    PLDR_REQUIRE(ctx >= 0 && ctx <= kMaxVocab, "shard ", path, ": ctx ", ctx,
                 " outside [0, 2^32 - 1]");
    const int64_t n = static_cast<int64_t>(tokens.size());
    PLDR_REQUIRE(ctx == 0 || n % ctx == 0, "shard ", path, ": ", n,
                 " tokens are not a whole number of ", ctx, "-token chunks");
    const int dtype = shard_dtype_for_vocab(vocab_size);
    std::string buf(static_cast<size_t>(kShardHeaderBytes + n * dtype), '\0');
    unsigned char* payload = reinterpret_cast<unsigned char*>(buf.data()) + kShardHeaderBytes;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tokens[static_cast<size_t>(i)];
        if (t < 0 || t >= vocab_size)
            fail("shard ", path, ": token ", t, " at position ", i, " outside [0, ", vocab_size,
                 ")");
        if (dtype == 2) {
            const auto v = static_cast<uint16_t>(t);
            std::memcpy(payload + i * 2, &v, 2);
        } else {
            const auto v = static_cast<uint32_t>(t);
            std::memcpy(payload + i * 4, &v, 4);
        }
    }
    std::memcpy(buf.data(), kShardMagic, 8);
    put<uint32_t>(buf, 8, kShardVersion);
    put<uint32_t>(buf, 12, static_cast<uint32_t>(vocab_size));
    put<uint32_t>(buf, 16, static_cast<uint32_t>(dtype));
    put<uint32_t>(buf, 20, static_cast<uint32_t>(ctx));
    put<uint64_t>(buf, 24, static_cast<uint64_t>(n));
    put<uint64_t>(buf, 32, fnv1a64(payload, static_cast<size_t>(n * dtype)));
    write_file_atomic(path, buf);
}

// ---------------------------------------------------------------------------------------------
// Reader

ShardReader::ShardReader(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("shard ", path, ": cannot open: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail("shard ", path, ": cannot stat: ", std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("shard ", path, ": not a regular file");
    }
    const auto file_len = static_cast<uint64_t>(st.st_size);
    if (file_len < static_cast<uint64_t>(kShardHeaderBytes)) {
        ::close(fd);
        fail("shard ", path, ": truncated (", file_len, " bytes, smaller than the ",
             kShardHeaderBytes, "-byte header)");
    }
    void* m = ::mmap(nullptr, static_cast<size_t>(file_len), PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (m == MAP_FAILED) fail("shard ", path, ": cannot mmap: ", std::strerror(map_errno));
    map_ = m;
    map_len_ = static_cast<size_t>(file_len);
    try {
        const auto* p = static_cast<const unsigned char*>(map_);
        if (std::memcmp(p, kShardMagic, 8) != 0)
            fail("shard ", path, ": bad magic (not a .pldrtok token shard)");
        const auto version = get_at<uint32_t>(p, 8);
        if (version != kShardVersion)
            fail("shard ", path, ": unsupported version ", version, " (this build reads ",
                 kShardVersion, ")");
        const auto vocab = get_at<uint32_t>(p, 12);
        const auto dtype = get_at<uint32_t>(p, 16);
        const auto ctx = get_at<uint32_t>(p, 20);
        const auto count = get_at<uint64_t>(p, 24);
        checksum_ = get_at<uint64_t>(p, 32);
        if (vocab == 0) fail("shard ", path, ": vocab size 0 in the header");
        if (dtype != 2 && dtype != 4) fail("shard ", path, ": bad dtype code ", dtype);
        if (dtype == 2 && vocab > 65536)
            fail("shard ", path, ": dtype uint16 cannot hold vocab size ", vocab);
        const uint64_t payload_len = file_len - static_cast<uint64_t>(kShardHeaderBytes);
        if (count > payload_len / dtype)
            fail("shard ", path, ": truncated (header says ", count, " tokens = ", count * dtype,
                 " payload bytes, file has ", payload_len, ")");
        if (count * dtype != payload_len)
            fail("shard ", path, ": ", payload_len - count * dtype,
                 " unexpected trailing bytes after ", count, " tokens");
        if (ctx > 0 && count % ctx != 0)
            fail("shard ", path, ": ", count, " tokens are not a whole number of ", ctx,
                 "-token chunks");
        payload_ = p + kShardHeaderBytes;
        count_ = static_cast<int64_t>(count);
        vocab_ = vocab;
        ctx_ = ctx;
        dtype_ = static_cast<int>(dtype);
        if (fnv1a64(payload_, static_cast<size_t>(payload_len)) != checksum_)
            fail("shard ", path, ": checksum mismatch (corrupt shard)");
        uint32_t max_tok = 0;
        if (dtype_ == 2) {
            for (int64_t i = 0; i < count_; ++i)
                max_tok = std::max<uint32_t>(max_tok, get_at<uint16_t>(payload_, i * 2));
        } else {
            for (int64_t i = 0; i < count_; ++i)
                max_tok = std::max(max_tok, get_at<uint32_t>(payload_, i * 4));
        }
        if (count_ > 0 && max_tok >= vocab) {
            for (int64_t i = 0; i < count_; ++i)
                if (get(i) >= vocab_)
                    fail("shard ", path, ": token ", get(i), " at position ", i,
                         " is not below the vocab size ", vocab_);
        }
    } catch (...) {
        release();
        throw;
    }
}

void ShardReader::release() noexcept {
    if (map_ != nullptr) ::munmap(map_, map_len_);
    map_ = nullptr;
    map_len_ = 0;
    payload_ = nullptr;
}

ShardReader::~ShardReader() {
    release();
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_len_(o.map_len_),
      payload_(o.payload_),
      count_(o.count_),
      vocab_(o.vocab_),
      ctx_(o.ctx_),
      dtype_(o.dtype_),
      checksum_(o.checksum_) {
    o.map_ = nullptr;
    o.payload_ = nullptr;
    o.map_len_ = 0;
    o.count_ = 0;
}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
    if (this != &o) {
        release();
        path_ = std::move(o.path_);
        map_ = o.map_;
        map_len_ = o.map_len_;
        payload_ = o.payload_;
        count_ = o.count_;
        vocab_ = o.vocab_;
        ctx_ = o.ctx_;
        dtype_ = o.dtype_;
        checksum_ = o.checksum_;
        o.map_ = nullptr;
        o.payload_ = nullptr;
        o.map_len_ = 0;
        o.count_ = 0;
    }
    return *this;
}

int64_t ShardReader::get(int64_t i) const {
    return dtype_ == 2 ? int64_t{get_at<uint16_t>(payload_, static_cast<size_t>(i) * 2)}
                       : int64_t{get_at<uint32_t>(payload_, static_cast<size_t>(i) * 4)};
}

int64_t ShardReader::operator[](int64_t i) const {
    if (i < 0 || i >= count_) fail("shard ", path_, ": index ", i, " outside [0, ", count_, ")");
    return get(i);
}

void ShardReader::read(int64_t begin, int64_t n, int64_t* out) const {
    if (begin < 0 || n < 0 || begin > count_ || n > count_ - begin)
        fail("shard ", path_, ": range [", begin, ", ", begin, " + ", n, ") outside [0, ", count_,
             ")");
    if (dtype_ == 2) {
        for (int64_t i = 0; i < n; ++i)
            out[i] = get_at<uint16_t>(payload_, static_cast<size_t>(begin + i) * 2);
    } else {
        for (int64_t i = 0; i < n; ++i)
            out[i] = get_at<uint32_t>(payload_, static_cast<size_t>(begin + i) * 4);
    }
}

std::vector<int64_t> ShardReader::read_all() const {
    std::vector<int64_t> v(static_cast<size_t>(count_));
    read(0, count_, v.data());
    return v;
}

// ---------------------------------------------------------------------------------------------
// Packing

Packer::Packer(int64_t chunk_len) : chunk_len_(chunk_len) {
    PLDR_REQUIRE(chunk_len >= 1, "pack: chunk length ", chunk_len, " must be >= 1");
}

void Packer::add_block(const std::vector<std::vector<int64_t>>& block, std::vector<int64_t>* out) {
    // stream = remainder ++ docs; emit floor(|stream| / L) chunks; keep the tail.
    std::vector<int64_t> stream;
    size_t total = rem_.size();
    for (const auto& d : block) total += d.size();
    stream.reserve(total);
    stream.insert(stream.end(), rem_.begin(), rem_.end());
    for (const auto& d : block) stream.insert(stream.end(), d.begin(), d.end());
    const size_t L = static_cast<size_t>(chunk_len_);
    const size_t full = (stream.size() / L) * L;
    out->insert(out->end(), stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(full));
    rem_.assign(stream.begin() + static_cast<std::ptrdiff_t>(full), stream.end());
}

std::vector<int64_t> pack_documents(const std::vector<std::vector<int64_t>>& docs,
                                    int64_t chunk_len, int64_t block_docs,
                                    std::vector<int64_t>* remainder) {
    PLDR_REQUIRE(block_docs >= 1, "pack: block size ", block_docs, " documents must be >= 1");
    Packer packer(chunk_len);
    std::vector<int64_t> out;
    const size_t B = static_cast<size_t>(block_docs);
    std::vector<std::vector<int64_t>> block;
    for (size_t b = 0; b < docs.size(); b += B) {
        const size_t e = std::min(docs.size(), b + B);
        block.assign(docs.begin() + static_cast<std::ptrdiff_t>(b),
                     docs.begin() + static_cast<std::ptrdiff_t>(e));
        packer.add_block(block, &out);
    }
    if (remainder != nullptr) *remainder = packer.remainder();
    return out;
}

}  // namespace pldr
