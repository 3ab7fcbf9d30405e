// Token shards (.pldrtok): a versioned, checksummed binary file of token ids, and the
// reference's 'pack' chunking (spec §5.3, §11.5). Format: docs/formats.md.
//
// Header (40 bytes, little-endian):
//   0  magic "PLDRTOK\0" (8 bytes)     8  version u32 = 1        12 vocab size u32
//   16 dtype u32 (2 = u16, 4 = u32)    20 ctx u32 (0 = unpacked)  24 token count u64
//   32 FNV-1a 64 of the payload u64    40 payload: count × dtype bytes
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pldr {

inline constexpr char kShardMagic[8] = {'P', 'L', 'D', 'R', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 40;

// FNV-1a 64-bit hash of n bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);

// dtype code a shard uses for `vocab_size` ids: 2 (uint16) when vocab ≤ 65536, else 4.
int shard_dtype_for_vocab(int64_t vocab_size);

// Writes `tokens` as a shard, atomically (temp file + rename). Every token must be in
// [0, vocab_size); 2 ≤ vocab_size < 2^32; ctx is the chunk length the tokens were packed
// for (0 = unpacked; otherwise the token count must be a multiple of ctx).
void write_shard(const std::string& path, const std::vector<int64_t>& tokens, int64_t vocab_size,
                 int64_t ctx);

// Read-only view of a shard, memory-mapped. Opening validates everything: magic, version,
// dtype, file size against the header (a truncated or overlong file is an error), the
// payload checksum ("<path>: checksum mismatch (corrupt shard)") and that every token is
// below the vocab size. Errors are one line and name the file.
class ShardReader {
  public:
    explicit ShardReader(const std::string& path);
    ~ShardReader();
    ShardReader(ShardReader&& o) noexcept;
    ShardReader& operator=(ShardReader&& o) noexcept;
    ShardReader(const ShardReader&) = delete;
    ShardReader& operator=(const ShardReader&) = delete;

    int64_t size() const { return count_; }  // number of tokens
    int64_t vocab_size() const { return vocab_; }
    int64_t ctx() const { return ctx_; }  // 0 = unpacked
    // Number of complete ctx-token chunks (size() / ctx()); 0 when unpacked.
    int64_t num_chunks() const { return ctx_ > 0 ? count_ / ctx_ : 0; }
    int dtype() const { return dtype_; }
    uint64_t checksum() const { return checksum_; }
    const std::string& path() const { return path_; }

    // Token i; throws pldr::Error when i is outside [0, size()).
    int64_t operator[](int64_t i) const;
    // Copies tokens [begin, begin + n) to out; throws when the range is outside the shard.
    void read(int64_t begin, int64_t n, int64_t* out) const;
    // All tokens (convenience for tests and small shards).
    std::vector<int64_t> read_all() const;

  private:
    int64_t get(int64_t i) const;
    void release() noexcept;

    std::string path_;
    void* map_ = nullptr;
    size_t map_len_ = 0;
    const unsigned char* payload_ = nullptr;
    int64_t count_ = 0, vocab_ = 0, ctx_ = 0;
    int dtype_ = 0;
    uint64_t checksum_ = 0;
};

// The reference's 'pack' mode (KVG pldr_data_prep.py, spec §5.3/§11.5). Documents are taken
// in blocks of `block_docs`; each block's stream (the carried remainder, then every document's
// ids, which already end with EOS) is cut into consecutive chunk_len-token chunks; complete
// chunks are emitted in order and the short tail is carried to the next block. The final
// remainder is never emitted: it is returned through `remainder` when that is non-null.
// The chunks are returned back to back: chunk i is [i·chunk_len, (i+1)·chunk_len).
std::vector<int64_t> pack_documents(const std::vector<std::vector<int64_t>>& docs,
                                    int64_t chunk_len, int64_t block_docs,
                                    std::vector<int64_t>* remainder = nullptr);

// Streaming form of pack_documents: feed blocks of documents one at a time; the packer keeps
// the carried remainder between blocks. pack_documents is this packer run over the blocks.
class Packer {
  public:
    explicit Packer(int64_t chunk_len);
    // Appends the complete chunks of (remainder + block's documents) to `out`; keeps the tail.
    void add_block(const std::vector<std::vector<int64_t>>& block, std::vector<int64_t>* out);
    const std::vector<int64_t>& remainder() const { return rem_; }
    int64_t chunk_len() const { return chunk_len_; }

  private:
    int64_t chunk_len_;
    std::vector<int64_t> rem_;
};

}  // namespace pldr
