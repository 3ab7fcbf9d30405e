// Fuzz target: a SentencePiece model file through pldr's load path (io/tokenizer), then an
// encode / decode round of a fixed text.
#include "fuzz_util.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    const std::string p = fuzz::write_bytes("t.model", {reinterpret_cast<const char*>(data), size});
    return fuzz::guarded([&] {
        Tokenizer t(p);
        const auto ids =
            t.encode_prompt("The state of the Union is strong. \xc3\xa9\xe2\x82\xac 42");
        (void)t.decode(ids);
        for (int64_t i = 0; i < std::min<int64_t>(t.vocab_size(), 8); ++i) (void)t.piece(i);
    });
}
