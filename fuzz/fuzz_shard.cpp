// Fuzz target: a token shard (.pldrtok). Half of the inputs get their payload checksum
// recomputed (low bit of the first byte after the header) so that the fuzzer reaches the
// checks behind it.
#include <cstring>

#include "fuzz_util.h"
#include "train/data_loader.h"
#include "train/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    std::string b(reinterpret_cast<const char*>(data), size);
    if (b.size() > 40 && (uint8_t(b[40]) & 1)) {
        const uint64_t h = fnv1a64(b.data() + 40, b.size() - 40);
        for (int i = 0; i < 8; ++i) b[size_t(32 + i)] = char((h >> (8 * i)) & 0xff);
    }
    const std::string p = fuzz::write_bytes("t.pldrtok", b);
    return fuzz::guarded([&] {
        ShardReader r(p);
        int64_t sum = 0;
        for (int64_t v : r.read_all()) sum += v;
        if (r.ctx() >= 2 && r.num_chunks() > 0) {
            ChunkLoader loader(r, r.ctx(), 7, true);
            std::vector<int64_t> buf;
            for (int i = 0; i < 3; ++i) sum += loader.next(2, buf).B;
        }
        (void)sum;
    });
}
