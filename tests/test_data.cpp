// Tokenizer wrapper and training, token shards, packing and corpus preparation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "io/tokenizer.h"
#include "train/prepare.h"
#include "train/shard.h"

namespace fs = std::filesystem;
using pldr::Error;
using Ids = std::vector<int64_t>;

namespace {

const std::string kData = std::string(PLDR_SOURCE_DIR) + "/data";
const std::string kKvg =
    kData + "/tokenizer/refinedweb-tokenizer-model-pldrllm-kvg-cache-paper.model";
const std::string kV1 = kData +
                        "/tokenizer/pldr-llm-v1-paper/"
                        "refinedweb-sentencepiece-unigram-cased-en-32k-pldr-llm-paper.model";
const std::string kAbl = kData +
                         "/tokenizer/pldr-llm-v1-ablation/"
                         "ablation-refinedweb-sentencepiece-unigram-cased-en-32k.model";
const std::string kShakespeare = kData + "/corpus/tinyshakespeare/train.txt";
const std::string kText = "Hello world! The quick brown fox jumps over 12345 lazy dogs.";

// A fresh temporary directory, removed when the object goes out of scope.
struct TempDir {
    fs::path path;
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path = fs::temp_directory_path() / ("pldr_data_" + std::string(info->test_suite_name()) +
                                            "_" + info->name() + "_" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string file(const std::string& name) const { return (path / name).string(); }
    std::string write(const std::string& name, const std::string& bytes) const {
        std::ofstream f(file(name), std::ios::binary);
        f << bytes;
        return file(name);
    }
};

// Runs fn, expects a pldr::Error whose message contains every one of `parts`, and one line.
template <class F>
void expect_error(F&& fn, std::initializer_list<std::string> parts) {
    try {
        fn();
        ADD_FAILURE() << "no pldr::Error thrown";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << msg << "\n  lacks: " << p;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    }
}

Ids parse_ids(const std::string& s) {
    Ids v;
    std::istringstream is(s);
    int64_t x;
    while (is >> x) v.push_back(x);
    return v;
}

// The first `max_bytes` bytes of tiny-shakespeare's train split, cut after a newline.
std::string shakespeare_prefix(size_t max_bytes) {
    std::string t = pldr::read_file(kShakespeare);
    t.resize(max_bytes);
    t.resize(t.rfind('\n') + 1);
    return t;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::string s = pldr::read_file(p);
    return std::vector<uint8_t>(s.begin(), s.end());
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

// =============================================================================================
// Tokenizer

TEST(Tok, ReferenceIdsKvg) {
    pldr::Tokenizer tok(kKvg);
    const Ids want = parse_ids(
        "4780 485 316 290 1653 2911 17560 3332 266 381 265 273 274 288 294 289 10773 3088 262");
    EXPECT_EQ(tok.encode(kText), want);
    EXPECT_EQ(tok.decode(want), kText);
    EXPECT_EQ(tok.decode(tok.encode(kText)), kText);
    EXPECT_EQ(tok.piece(4780), "\xE2\x96\x81Hello");  // ▁Hello
    EXPECT_EQ(tok.piece(3332), "\xE2\x96\x81jump");
    EXPECT_EQ(tok.piece(265), "\xE2\x96\x81");
    EXPECT_EQ(tok.piece(273), "1");
}

TEST(Tok, ReferenceIdsV1PaperAndAblation) {
    pldr::Tokenizer v1(kV1), abl(kAbl);
    EXPECT_EQ(v1.encode(kText), parse_ids("4780 482 316 290 1652 2936 17667 3414 266 382 265 273 "
                                          "274 288 294 289 10867 3059 262"));
    EXPECT_EQ(abl.encode(kText), parse_ids("4800 482 316 290 1627 3053 17441 3351 266 382 265 273 "
                                           "274 288 294 289 10117 3038 262"));
    EXPECT_EQ(v1.decode(v1.encode(kText)), kText);
    EXPECT_EQ(abl.decode(abl.encode(kText)), kText);
}

TEST(Tok, SpecialIdsAndPieces) {
    for (const auto& path : {kKvg, kV1, kAbl}) {
        pldr::Tokenizer tok(path);
        EXPECT_EQ(tok.vocab_size(), 32000);
        EXPECT_EQ(tok.pad_id(), 0);
        EXPECT_EQ(tok.unk_id(), 1);
        EXPECT_EQ(tok.bos_id(), 2);
        EXPECT_EQ(tok.eos_id(), 3);
        EXPECT_EQ(tok.piece(0), "[PAD]");
        EXPECT_EQ(tok.piece(1), "[UNK]");
        EXPECT_EQ(tok.piece(2), "[START]");
        EXPECT_EQ(tok.piece(3), "[END]");
        EXPECT_EQ(tok.piece(4), "[SEP]");
        EXPECT_EQ(tok.piece(5), "[CLS]");
        EXPECT_EQ(tok.piece(6), "<0x00>");
        EXPECT_EQ(tok.piece(261), "<0xFF>");
        EXPECT_EQ(tok.path(), path);
    }
}

TEST(Tok, DocumentAndPromptEncoding) {
    pldr::Tokenizer tok(kKvg);
    const Ids ids = tok.encode(kText);
    Ids doc = ids;
    doc.push_back(3);
    EXPECT_EQ(tok.encode_document(kText), doc);
    EXPECT_EQ(tok.encode_prompt(kText), ids);
    EXPECT_TRUE(tok.encode("").empty());
    EXPECT_EQ(tok.encode_document(""), Ids{3});
    EXPECT_EQ(tok.encode_prompt(""), Ids{3});
    // A one-token text keeps its token (only a trailing EOS is dropped).
    const Ids one = tok.encode("Hello");
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(tok.encode_prompt("Hello"), one);
    // Byte fallback: a character outside the vocabulary becomes byte pieces and round-trips.
    const std::string rare = "\xF0\x9F\xA6\x84";  // U+1F984
    const Ids r = tok.encode(rare);
    bool has_byte = false;
    for (int64_t id : r) has_byte |= (id >= 6 && id <= 261);
    EXPECT_TRUE(has_byte);
    EXPECT_EQ(tok.decode(r), rare);
}

TEST(Tok, DecodeRejectsIdsOutsideVocab) {
    pldr::Tokenizer tok(kKvg);
    expect_error([&] { tok.decode({4780, 32000}); }, {"32000", "position 1", kKvg});
    expect_error([&] { tok.decode({-1}); }, {"-1", "outside [0, 32000)"});
    expect_error([&] { tok.piece(32000); }, {"32000"});
}

TEST(Tok, MissingGarbageAndEmptyFiles) {
    TempDir t;
    const std::string missing = t.file("nope.model");
    expect_error([&] { pldr::Tokenizer x(missing); }, {missing, "file not found"});
    const std::string garbage =
        t.write("garbage.model", "this is not a protobuf \xff\xfe\x01\x02 at all");
    expect_error([&] { pldr::Tokenizer x(garbage); }, {garbage, "not a valid SentencePiece model"});
    const std::string empty = t.write("empty.model", "");
    expect_error([&] { pldr::Tokenizer x(empty); }, {empty, "empty file"});
    expect_error([&] { pldr::Tokenizer x(t.path.string()); }, {"is a directory"});
}

TEST(Tok, Utf8Validator) {
    using pldr::find_invalid_utf8;
    EXPECT_EQ(find_invalid_utf8(""), -1);
    EXPECT_EQ(find_invalid_utf8("plain ascii\n"), -1);
    EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE2\x80\x94 \xF0\x9F\x98\x80"), -1);
    EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2);
    EXPECT_EQ(find_invalid_utf8("\xC0\x80"), 0);           // overlong NUL
    EXPECT_EQ(find_invalid_utf8("x\xE0\x80\xAF"), 1);      // overlong 3-byte
    EXPECT_EQ(find_invalid_utf8("xy\xED\xA0\x80"), 2);     // surrogate U+D800
    EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0);   // above U+10FFFF
    EXPECT_EQ(find_invalid_utf8("abc\xE2\x82"), 3);        // truncated at the end
    EXPECT_EQ(find_invalid_utf8("a\xC3(b"), 1);            // bad continuation
    EXPECT_EQ(find_invalid_utf8("\x80"), 0);               // lone continuation byte
    EXPECT_EQ(find_invalid_utf8("\xF4\x8F\xBF\xBF"), -1);  // U+10FFFF itself
    expect_error([] { pldr::require_utf8("ok\xFE", "some.txt"); },
                 {"some.txt", "invalid UTF-8 at byte offset 2"});
}

// =============================================================================================
// Tokenizer training

TEST(TokTrain, SmallShakespeareUnigram) {
    TempDir t;
    // Tiny-shakespeare has no digits: add frequent numbers, which split_digits keeps apart.
    std::string text = shakespeare_prefix(200 * 1024);
    for (int i = 0; i < 300; ++i) text += "In the year 1599, act 2024 scene 31415 of 1599.\n";
    const std::string input = t.write("input.txt", text);
    pldr::TokenizerTrainOptions o;
    o.input_files = {input};
    o.output_prefix = t.file("spm");
    o.vocab_size = 500;
    o.num_threads = 2;
    const auto t0 = std::chrono::steady_clock::now();
    pldr::train_tokenizer(o);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 30.0);

    // Exactly the two outputs, no temporary files left behind.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(t.path)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"input.txt", "spm.model", "spm.vocab"}));

    pldr::Tokenizer tok(t.file("spm.model"));
    EXPECT_EQ(tok.vocab_size(), 500);
    const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[START]",
                                               "[END]", "[SEP]", "[CLS]"};
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(tok.piece(i), specials[static_cast<size_t>(i)]);
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.unk_id(), 1);
    EXPECT_EQ(tok.bos_id(), 2);
    EXPECT_EQ(tok.eos_id(), 3);
    EXPECT_EQ(tok.piece(6), "<0x00>");  // byte fallback pieces follow the specials
    EXPECT_EQ(tok.piece(261), "<0xFF>");

    const std::string line = "First Citizen: Before we proceed any further, hear me speak.";
    const Ids ids = tok.encode(line);
    EXPECT_EQ(tok.decode(ids), line);
    EXPECT_LT(ids.size(), line.size());  // learned pieces merge characters
    // Digits are split one per piece: no learned piece has two digits, although "1599" is
    // frequent; unseen characters fall back to bytes and round-trip.
    for (int64_t id = 262; id < tok.vocab_size(); ++id) {
        const std::string p = tok.piece(id);
        EXPECT_LE(std::count_if(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }), 1)
            << p;
    }
    const Ids y = tok.encode("year 1599");
    ASSERT_GE(y.size(), 4u);
    EXPECT_EQ(tok.piece(y[y.size() - 1]), "9");
    EXPECT_EQ(tok.piece(y[y.size() - 2]), "9");
    EXPECT_EQ(tok.piece(y[y.size() - 3]), "5");
    const std::string accents = "\xC3\xA9t\xC3\xA9 \xE6\x97\xA5";  // été 日: not in the input
    const Ids d = tok.encode(accents);
    EXPECT_EQ(tok.decode(d), accents);
    EXPECT_NE(std::find(d.begin(), d.end(), 6 + 0xC3), d.end());  // byte piece <0xC3>
    // The .vocab file lists the same pieces, one per line.
    const std::string vocab = pldr::read_file(t.file("spm.vocab"));
    EXPECT_EQ(std::count(vocab.begin(), vocab.end(), '\n'), 500);
    EXPECT_EQ(vocab.substr(0, 6), "[PAD]\t");
}

TEST(TokTrain, BpeAndCharModels) {
    TempDir t;
    const std::string input = t.write("input.txt", shakespeare_prefix(60 * 1024));
    pldr::TokenizerTrainOptions o;
    o.input_files = {input};
    o.num_threads = 2;
    o.output_prefix = t.file("bpe");
    o.model_type = "bpe";
    o.vocab_size = 400;
    pldr::train_tokenizer(o);
    pldr::Tokenizer bpe(t.file("bpe.model"));
    EXPECT_EQ(bpe.piece(3), "[END]");
    EXPECT_EQ(bpe.piece(6), "<0x00>");
    const std::string s = "What say you, sir?";
    EXPECT_EQ(bpe.decode(bpe.encode(s)), s);

    o.output_prefix = t.file("char");
    o.model_type = "char";
    o.vocab_size = 60;
    pldr::train_tokenizer(o);
    pldr::Tokenizer ch(t.file("char.model"));
    EXPECT_EQ(ch.piece(5), "[CLS]");
    EXPECT_LE(ch.vocab_size(), 60);
    // A char model has one piece per character (plus the ▁ of the word start).
    EXPECT_EQ(ch.encode("sir").size(), 4u);
}

TEST(TokTrain, DeterministicForAFixedSeedAndThreadCount) {
    TempDir t;
    pldr::TokenizerTrainOptions o;
    o.input_files = {t.write("input.txt", shakespeare_prefix(60 * 1024))};
    o.vocab_size = 400;
    o.num_threads = 2;
    o.output_prefix = t.file("one");
    pldr::train_tokenizer(o);
    o.output_prefix = t.file("two");
    pldr::train_tokenizer(o);
    const std::string v1 = pldr::read_file(t.file("one.vocab"));
    EXPECT_EQ(v1, pldr::read_file(t.file("two.vocab")));
    EXPECT_EQ(std::count(v1.begin(), v1.end(), '\n'), 400);
}

TEST(TokTrain, RejectsBadInput) {
    TempDir t;
    pldr::TokenizerTrainOptions o;
    o.output_prefix = t.file("m");
    o.vocab_size = 500;
    o.num_threads = 2;

    o.input_files = {t.write("bad.txt", "hello\nw\xC3orld\n")};
    expect_error([&] { pldr::train_tokenizer(o); }, {"bad.txt", "invalid UTF-8 at byte offset 7"});
    o.input_files = {t.write("empty.txt", "")};
    expect_error([&] { pldr::train_tokenizer(o); }, {"empty.txt", "empty file"});
    o.input_files = {t.write("newlines.txt", "\n\n\n")};
    expect_error([&] { pldr::train_tokenizer(o); }, {"newlines.txt", "no non-empty line"});
    o.input_files = {t.file("missing.txt")};
    expect_error([&] { pldr::train_tokenizer(o); }, {"missing.txt", "file not found"});
    o.input_files = {};
    expect_error([&] { pldr::train_tokenizer(o); }, {"no input files"});

    o.input_files = {t.write("ok.txt", "some text\nmore text\n")};
    o.vocab_size = 262;
    expect_error([&] { pldr::train_tokenizer(o); }, {"vocab size 262", "at least 263"});
    o.vocab_size = 500;
    o.model_type = "wordpiece";
    expect_error([&] { pldr::train_tokenizer(o); }, {"unknown model type 'wordpiece'"});
    o.model_type = "unigram";
    o.character_coverage = 0;
    expect_error([&] { pldr::train_tokenizer(o); }, {"character coverage"});
    o.character_coverage = 0.9995;
    o.output_prefix = t.file("no/such/dir/m");
    expect_error([&] { pldr::train_tokenizer(o); }, {"output directory", "does not exist"});
    // Nothing was written by the failed runs.
    EXPECT_FALSE(fs::exists(t.file("m.model")));
}

// =============================================================================================
// Shards

TEST(Shard, Fnv1aKnownValues) {
    EXPECT_EQ(pldr::fnv1a64("", 0), 0xcbf29ce484222325ull);
    EXPECT_EQ(pldr::fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(pldr::fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

TEST(Shard, RoundTripUint16) {
    TempDir t;
    std::mt19937_64 rng(7);
    Ids tokens(static_cast<size_t>(4 * 1000));
    for (auto& x : tokens) x = static_cast<int64_t>(rng() % 32000);
    tokens[0] = 0;
    tokens[1] = 31999;
    const std::string p = t.file("a.pldrtok");
    pldr::write_shard(p, tokens, 32000, 1000);
    EXPECT_EQ(fs::file_size(p), 40u + 2u * tokens.size());

    pldr::ShardReader r(p);
    EXPECT_EQ(r.size(), 4000);
    EXPECT_EQ(r.vocab_size(), 32000);
    EXPECT_EQ(r.ctx(), 1000);
    EXPECT_EQ(r.num_chunks(), 4);
    EXPECT_EQ(r.dtype(), 2);
    EXPECT_EQ(r.read_all(), tokens);
    EXPECT_EQ(r[1], 31999);
    EXPECT_EQ(r[3999], tokens[3999]);
    Ids part(5);
    r.read(1998, 5, part.data());
    EXPECT_EQ(part, Ids(tokens.begin() + 1998, tokens.begin() + 2003));
    expect_error([&] { (void)r[4000]; }, {p, "index 4000"});
    expect_error([&] { r.read(3998, 3, part.data()); }, {p, "outside [0, 4000)"});
    expect_error([&] { r.read(-1, 1, part.data()); }, {p});

    // Moving keeps the mapping valid.
    pldr::ShardReader moved(std::move(r));
    EXPECT_EQ(moved[1], 31999);
    // No temporary file left by the atomic write.
    EXPECT_EQ(std::distance(fs::directory_iterator(t.path), fs::directory_iterator()), 1);
}

TEST(Shard, RoundTripUint32AndHeaderLayout) {
    TempDir t;
    const Ids tokens = {0, 65535, 65536, 70000, 99999, 3, 12345};
    const std::string p = t.file("b.pldrtok");
    pldr::write_shard(p, tokens, 100000, 0);
    pldr::ShardReader r(p);
    EXPECT_EQ(r.dtype(), 4);
    EXPECT_EQ(r.ctx(), 0);
    EXPECT_EQ(r.num_chunks(), 0);
    EXPECT_EQ(r.read_all(), tokens);

    const auto b = read_bytes(p);
    ASSERT_EQ(b.size(), 40u + 4u * tokens.size());
    EXPECT_EQ(std::memcmp(b.data(), "PLDRTOK\0", 8), 0);
    auto u32 = [&](size_t off) {
        uint32_t v;
        std::memcpy(&v, b.data() + off, 4);
        return v;
    };
    auto u64 = [&](size_t off) {
        uint64_t v;
        std::memcpy(&v, b.data() + off, 8);
        return v;
    };
    EXPECT_EQ(u32(8), 1u);        // version
    EXPECT_EQ(u32(12), 100000u);  // vocab
    EXPECT_EQ(u32(16), 4u);       // dtype
    EXPECT_EQ(u32(20), 0u);       // ctx
    EXPECT_EQ(u64(24), 7u);       // count
    EXPECT_EQ(u64(32), pldr::fnv1a64(b.data() + 40, b.size() - 40));
    EXPECT_EQ(u32(40 + 4 * 3), 70000u);  // little-endian payload
    EXPECT_EQ(b[40 + 4 * 2 + 2], 1);     // 65536 = 0x00010000

    // An empty shard is valid.
    pldr::write_shard(t.file("e.pldrtok"), {}, 10, 0);
    EXPECT_EQ(pldr::ShardReader(t.file("e.pldrtok")).size(), 0);
    EXPECT_EQ(pldr::shard_dtype_for_vocab(65536), 2);
    EXPECT_EQ(pldr::shard_dtype_for_vocab(65537), 4);
}

TEST(Shard, CorruptionIsDetected) {
    TempDir t;
    Ids tokens;
    for (int64_t i = 0; i < 64; ++i) tokens.push_back(i * 7 % 500);
    const std::string p = t.file("c.pldrtok");
    pldr::write_shard(p, tokens, 500, 16);
    const auto good = read_bytes(p);

    auto bad = good;
    bad[40 + 37] ^= 0x01;  // one payload bit
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "checksum mismatch (corrupt shard)"});

    bad = good;
    bad.pop_back();
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "truncated"});

    bad.assign(good.begin(), good.begin() + 20);
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "truncated"});

    bad = good;
    bad.push_back(0);
    bad.push_back(0);
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "2 unexpected trailing bytes"});

    bad = good;
    bad[0] = 'X';
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "bad magic"});

    bad = good;
    bad[8] = 2;  // version 2
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "unsupported version 2"});

    bad = good;
    bad[16] = 3;  // dtype 3
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "bad dtype code 3"});

    bad = good;
    bad[20] = 15;  // ctx 15 does not divide 64 tokens
    write_bytes(p, bad);
    expect_error([&] { pldr::ShardReader r(p); }, {p, "not a whole number of 15-token chunks"});

    // Header vocab lowered below a payload token (the payload checksum still matches).
    bad = good;
    bad[12] = 100;
    bad[13] = 0;
    write_bytes(p, bad);
    const size_t first = static_cast<size_t>(
        std::find_if(tokens.begin(), tokens.end(), [](int64_t x) { return x >= 100; }) -
        tokens.begin());
    expect_error(
        [&] { pldr::ShardReader r(p); },
        {p, "token " + std::to_string(tokens[first]) + " at position " + std::to_string(first),
         "vocab size 100"});

    expect_error([&] { pldr::ShardReader r(t.file("missing.pldrtok")); },
                 {"missing.pldrtok", "cannot open"});

    write_bytes(p, good);
    EXPECT_EQ(pldr::ShardReader(p).read_all(), tokens);
}

TEST(Shard, WriterRejectsBadInput) {
    TempDir t;
    const std::string p = t.file("w.pldrtok");
    expect_error(
        [&] {
            pldr::write_shard(p, {1, 2, 500}, 500, 0);
        },
        {p, "token 500 at position 2"});
    expect_error([&] { pldr::write_shard(p, {1, -2}, 500, 0); }, {p, "token -2"});
    expect_error(
        [&] {
            pldr::write_shard(p, {1, 2, 3}, 500, 2);
        },
        {p, "not a whole number of 2-token chunks"});
    expect_error([&] { pldr::write_shard(p, {1}, 0, 0); }, {p, "vocab size 0"});
    expect_error([&] { pldr::write_shard(p, {1}, int64_t{1} << 32, 0); }, {p, "vocab size"});
    EXPECT_FALSE(fs::exists(p));
}

// =============================================================================================
// Packing (reference 'pack' mode)

TEST(ShardPack, CarryAcrossBlocks) {
    // Blocks of 2 documents, chunks of 4.
    const std::vector<Ids> docs = {{10, 11, 3}, {12, 3}, {13, 14, 15, 16, 3}, {17, 3}, {18, 19, 3}};
    Ids rem;
    const Ids out = pldr::pack_documents(docs, 4, 2, &rem);
    // block 1: [10 11 3 12 | 3]             → chunk [10 11 3 12], carry [3]
    // block 2: [3 | 13 14 15 16 3 17 3]     → chunks [3 13 14 15] [16 3 17 3], carry []
    // block 3: [18 19 3]                    → no chunk, carry [18 19 3] (final, dropped)
    EXPECT_EQ(out, (Ids{10, 11, 3, 12, 3, 13, 14, 15, 16, 3, 17, 3}));
    EXPECT_EQ(rem, (Ids{18, 19, 3}));

    // Streaming packer, block by block, gives the same and shows the carried tail.
    pldr::Packer pk(4);
    Ids o2;
    pk.add_block({docs[0], docs[1]}, &o2);
    EXPECT_EQ(o2, (Ids{10, 11, 3, 12}));
    EXPECT_EQ(pk.remainder(), Ids{3});
    pk.add_block({docs[2], docs[3]}, &o2);
    EXPECT_TRUE(pk.remainder().empty());
    pk.add_block({docs[4]}, &o2);
    EXPECT_EQ(o2, out);
    EXPECT_EQ(pk.remainder(), rem);
}

TEST(ShardPack, LongDocumentAndShortBlocks) {
    // A 13-token document is several chunks of 5; the 3-token tail joins the next block.
    Ids longdoc;
    for (int64_t i = 100; i < 112; ++i) longdoc.push_back(i);
    longdoc.push_back(3);
    const std::vector<Ids> docs = {longdoc, {7, 3}, {8, 3}, {9, 9, 9, 3}};
    Ids rem;
    const Ids out = pldr::pack_documents(docs, 5, 1, &rem);
    // block 1: 13 tokens → chunks [100..104] [105..109], carry [110 111 3]
    // block 2: [110 111 3 | 7 3] → one chunk, carry []
    // block 3: [8 3] → nothing, carry [8 3]
    // block 4: [8 3 | 9 9 9 3] → chunk [8 3 9 9 9], carry [3] (final, dropped)
    EXPECT_EQ(out, (Ids{100, 101, 102, 103, 104, 105, 106, 107, 108, 109,
                        110, 111, 3,   7,   3,   8,   3,   9,   9,   9}));
    EXPECT_EQ(rem, Ids{3});
    EXPECT_EQ(out.size() % 5, 0u);
}

TEST(ShardPack, FinalRemainderDroppedAndExactFit) {
    Ids rem = {42};
    // Exactly two chunks: no remainder.
    EXPECT_EQ(pldr::pack_documents({{1, 2, 3}, {4, 5, 3}}, 3, 16, &rem), (Ids{1, 2, 3, 4, 5, 3}));
    EXPECT_TRUE(rem.empty());
    // Fewer tokens than one chunk: nothing is emitted.
    EXPECT_TRUE(pldr::pack_documents({{1, 3}, {2, 3}}, 5, 16, &rem).empty());
    EXPECT_EQ(rem, (Ids{1, 3, 2, 3}));
    EXPECT_TRUE(pldr::pack_documents({}, 5, 16, &rem).empty());
    EXPECT_TRUE(rem.empty());
    expect_error([] { pldr::pack_documents({{1}}, 0, 1); }, {"chunk length 0"});
    expect_error([] { pldr::pack_documents({{1}}, 2, 0); }, {"block size 0"});
}

TEST(ShardPack, BlockSizeDoesNotChangeTheStream) {
    // With the remainder carried, the emitted stream is the whole concatenation cut into
    // chunks, whatever the block size; the final tail is what is left.
    std::mt19937 rng(3);
    std::vector<Ids> docs;
    Ids all;
    for (int d = 0; d < 57; ++d) {
        Ids doc;
        const int len = static_cast<int>(rng() % 23);
        for (int i = 0; i < len; ++i) doc.push_back(10 + static_cast<int64_t>(rng() % 1000));
        doc.push_back(3);
        all.insert(all.end(), doc.begin(), doc.end());
        docs.push_back(doc);
    }
    for (int64_t L : {2, 7, 16, 64}) {
        const size_t full = all.size() / static_cast<size_t>(L) * static_cast<size_t>(L);
        for (int64_t B : {1, 2, 5, 16, 100}) {
            Ids rem;
            const Ids out = pldr::pack_documents(docs, L, B, &rem);
            EXPECT_EQ(out, Ids(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(full)))
                << L << " " << B;
            EXPECT_EQ(rem, Ids(all.begin() + static_cast<std::ptrdiff_t>(full), all.end()));
        }
    }
}

// =============================================================================================
// Corpus preparation

namespace {

// Independent expectation: encode each non-empty line + EOS, split by the documented rule,
// concatenate each split and cut it into ctx chunks (no Packer involved).
struct Expected {
    Ids train, valid;
    int64_t ntrain = 0, nvalid = 0, train_tokens = 0, valid_tokens = 0;
};

Expected expected_split(const pldr::Tokenizer& tok, const std::vector<std::string>& docs, int64_t k,
                        int64_t ctx) {
    Expected e;
    for (size_t i = 0; i < docs.size(); ++i) {
        Ids ids = tok.encode(docs[i]);
        ids.push_back(tok.eos_id());
        const bool v = k > 0 && static_cast<int64_t>(i) % k == k / 2;
        (v ? e.valid : e.train).insert((v ? e.valid : e.train).end(), ids.begin(), ids.end());
        (v ? e.nvalid : e.ntrain)++;
    }
    e.train_tokens = static_cast<int64_t>(e.train.size());
    e.valid_tokens = static_cast<int64_t>(e.valid.size());
    e.train.resize(e.train.size() / static_cast<size_t>(ctx) * static_cast<size_t>(ctx));
    e.valid.resize(e.valid.size() / static_cast<size_t>(ctx) * static_cast<size_t>(ctx));
    return e;
}

// Empty lines: '\n' at the start of the text or right after another '\n'.
int64_t count_empty_lines(const std::string& text) {
    int64_t n = 0;
    for (size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n' && (i == 0 || text[i - 1] == '\n')) ++n;
    return n;
}

std::vector<std::string> nonempty_lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream is(text);
    std::string line;
    while (std::getline(is, line))
        if (!line.empty()) out.push_back(line);
    return out;
}

}  // namespace

TEST(Prepare, EndToEndLinesWithFraction) {
    TempDir t;
    // Two files of one-line documents, with some empty lines that must be skipped.
    std::string text = shakespeare_prefix(12 * 1024);
    const size_t cut = text.find('\n', text.size() / 2) + 1;
    const std::string a = t.write("a.txt", "\n" + text.substr(0, cut) + "\n\n");
    const std::string b = t.write("b.txt", text.substr(cut));
    pldr::PrepareOptions o;
    o.tokenizer_path = kKvg;
    o.input_files = {a, b};
    o.ctx = 32;
    o.block_docs = 7;
    o.valid_fraction = 0.1;  // k = 10: documents 5, 15, 25, ... go to validation
    o.output_dir = t.file("out");
    o.num_threads = 2;
    const auto st = pldr::prepare_corpus(o);

    pldr::Tokenizer tok(kKvg);
    const auto docs = nonempty_lines(text);
    const Expected e = expected_split(tok, docs, 10, 32);
    ASSERT_GT(e.valid.size(), 0u);
    EXPECT_EQ(st.train.documents, e.ntrain);
    EXPECT_EQ(st.valid.documents, e.nvalid);
    EXPECT_EQ(st.train.documents + st.valid.documents, static_cast<int64_t>(docs.size()));
    EXPECT_EQ(st.train.tokens, e.train_tokens);
    EXPECT_EQ(st.valid.tokens, e.valid_tokens);
    EXPECT_EQ(st.empty_documents,
              count_empty_lines(pldr::read_file(a)) + count_empty_lines(pldr::read_file(b)));
    EXPECT_GT(st.empty_documents, 3);  // the three added, plus tiny-shakespeare's blank lines
    EXPECT_TRUE(st.has_valid);

    pldr::ShardReader tr(t.file("out/train.pldrtok")), va(t.file("out/valid.pldrtok"));
    EXPECT_EQ(tr.ctx(), 32);
    EXPECT_EQ(tr.vocab_size(), 32000);
    EXPECT_EQ(tr.dtype(), 2);
    EXPECT_EQ(tr.read_all(), e.train);
    EXPECT_EQ(va.read_all(), e.valid);
    EXPECT_EQ(tr.num_chunks(), st.train.chunks);
    EXPECT_EQ(va.num_chunks(), st.valid.chunks);
    EXPECT_EQ(st.train.chunks * 32 + st.train.dropped_tokens, st.train.tokens);
    EXPECT_EQ(st.valid.chunks * 32 + st.valid.dropped_tokens, st.valid.tokens);
    // The packed stream equals pack_documents over the same documents.
    std::vector<Ids> tdocs;
    for (size_t i = 0; i < docs.size(); ++i)
        if (i % 10 != 5) tdocs.push_back(tok.encode_document(docs[i]));
    EXPECT_EQ(pldr::pack_documents(tdocs, 32, 1600), e.train);

    const auto meta = nlohmann::json::parse(pldr::read_file(t.file("out/meta.json")));
    EXPECT_EQ(meta["ctx"], 32);
    EXPECT_EQ(meta["block_docs"], 7);
    EXPECT_EQ(meta["tokenizer"]["file"],
              "refinedweb-tokenizer-model-pldrllm-kvg-cache-paper.model");
    EXPECT_EQ(meta["tokenizer"]["vocab_size"], 32000);
    EXPECT_EQ(meta["tokenizer"]["eos_id"], 3);
    EXPECT_EQ(meta["tokenizer"]["pieces"]["3"], "[END]");
    EXPECT_FALSE(meta["tokenizer"]["pieces"].contains("4780"));
    EXPECT_EQ(meta["tokenizer"]["pieces"]["31999"], tok.piece(31999));
    EXPECT_EQ(meta["split"]["mode"], "fraction");
    EXPECT_EQ(meta["split"]["every"], 10);
    EXPECT_EQ(meta["split"]["offset"], 5);
    for (const char* s : {"train", "valid"}) {
        const auto& m = meta[s];
        const auto& ss = std::string(s) == "train" ? st.train : st.valid;
        EXPECT_EQ(m["documents"], ss.documents) << s;
        EXPECT_EQ(m["tokens"], ss.tokens) << s;
        EXPECT_EQ(m["chunks"], ss.chunks) << s;
        EXPECT_EQ(m["dropped_tokens"], ss.dropped_tokens) << s;
        EXPECT_EQ(m["packed_tokens"], ss.chunks * 32) << s;
    }
    ASSERT_EQ(meta["sources"].size(), 2u);
    EXPECT_EQ(meta["sources"][0]["path"], a);
    EXPECT_EQ(meta["sources"][1]["path"], b);
    EXPECT_EQ(meta["sources"][0]["empty_documents"].get<int64_t>() +
                  meta["sources"][1]["empty_documents"].get<int64_t>(),
              st.empty_documents);
}

TEST(Prepare, WholeFilesWithValidationFilesAndTrainedTokenizer) {
    TempDir t;
    // A tokenizer trained here (vocab 300), whole-file documents, explicit validation file.
    const std::string corpus = shakespeare_prefix(40 * 1024);
    const std::string tin = t.write("tok_input.txt", corpus);
    pldr::TokenizerTrainOptions to;
    to.input_files = {tin};
    to.output_prefix = t.file("tok");
    to.vocab_size = 400;
    to.num_threads = 2;
    pldr::train_tokenizer(to);
    pldr::Tokenizer tok(t.file("tok.model"));

    const std::vector<std::string> texts = {corpus.substr(0, 3000), corpus.substr(3000, 5000), "",
                                            corpus.substr(8000, 2500)};
    std::vector<std::string> files;
    for (size_t i = 0; i < texts.size(); ++i)
        files.push_back(t.write(pldr::cat("f", i, ".txt"), texts[i]));
    pldr::PrepareOptions o;
    o.tokenizer_path = t.file("tok.model");
    o.input_files = {files[0], files[1], files[2]};
    o.valid_files = {files[3]};
    o.one_doc_per_line = false;
    o.ctx = 64;
    o.block_docs = 1;
    o.output_dir = t.file("out/nested");
    const auto st = pldr::prepare_corpus(o);
    EXPECT_EQ(st.train.documents, 2);
    EXPECT_EQ(st.valid.documents, 1);
    EXPECT_EQ(st.empty_documents, 1);
    EXPECT_EQ(st.vocab_size, 400);

    Ids train, valid;
    for (int i : {0, 1}) {
        const Ids d = tok.encode_document(texts[static_cast<size_t>(i)]);
        train.insert(train.end(), d.begin(), d.end());
    }
    valid = tok.encode_document(texts[3]);
    EXPECT_EQ(st.train.tokens, static_cast<int64_t>(train.size()));
    EXPECT_EQ(st.valid.tokens, static_cast<int64_t>(valid.size()));
    train.resize(train.size() / 64 * 64);
    valid.resize(valid.size() / 64 * 64);
    pldr::ShardReader tr(t.file("out/nested/train.pldrtok")),
        va(t.file("out/nested/valid.pldrtok"));
    EXPECT_EQ(tr.read_all(), train);
    EXPECT_EQ(va.read_all(), valid);
    EXPECT_EQ(tr.vocab_size(), 400);
    // Each whole-file document ends with exactly one EOS inside the stream.
    EXPECT_EQ(std::count(train.begin(), train.end(), 3), st.train.dropped_tokens == 0 ? 2 : 1);
    const auto meta = nlohmann::json::parse(pldr::read_file(t.file("out/nested/meta.json")));
    EXPECT_EQ(meta["split"]["mode"], "files");
    EXPECT_EQ(meta["one_doc_per_line"], false);
    EXPECT_EQ(meta["sources"][3]["role"], "valid");
    EXPECT_EQ(meta["tokenizer"]["pieces"]["399"], tok.piece(399));
}

TEST(Prepare, SotuTokenCountsMatchTheDataReadme) {
    // data/README.md: the SOTU valid split has 12 documents and 99,222 KVG tokens without
    // BOS/EOS; prepared with one EOS per document that is 99,234 tokens.
    TempDir t;
    pldr::PrepareOptions o;
    o.tokenizer_path = kKvg;
    o.input_files = {kData + "/corpus/sotu/valid.txt"};
    o.ctx = 1024;
    o.output_dir = t.file("out");
    const auto st = pldr::prepare_corpus(o);
    EXPECT_EQ(st.train.documents, 12);
    EXPECT_EQ(st.train.tokens, 99222 + 12);
    EXPECT_EQ(st.train.chunks, 99234 / 1024);
    EXPECT_EQ(st.train.dropped_tokens, 99234 % 1024);
    pldr::ShardReader r(t.file("out/train.pldrtok"));
    EXPECT_EQ(r.size(), 96 * 1024);
    EXPECT_EQ(r[0],
              pldr::Tokenizer(kKvg).encode(pldr::read_file(o.input_files[0]).substr(0, 200))[0]);
}

TEST(Prepare, CrlfLineEnds) {
    TempDir t;
    const std::string f =
        t.write("crlf.txt", "Hello world!\r\n\r\nThe quick brown fox.\r\nlast line");
    pldr::PrepareOptions o;
    o.tokenizer_path = kKvg;
    o.input_files = {f};
    o.ctx = 4;
    o.output_dir = t.file("out");
    const auto st = pldr::prepare_corpus(o);
    EXPECT_EQ(st.train.documents, 3);
    EXPECT_EQ(st.empty_documents, 1);
    pldr::Tokenizer tok(kKvg);
    Ids all;
    for (const char* d : {"Hello world!", "The quick brown fox.", "last line"}) {
        const Ids ids = tok.encode_document(d);
        all.insert(all.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(st.train.tokens, static_cast<int64_t>(all.size()));
    all.resize(all.size() / 4 * 4);
    EXPECT_EQ(pldr::ShardReader(t.file("out/train.pldrtok")).read_all(), all);
}

TEST(Prepare, NoValidationSplit) {
    TempDir t;
    const std::string a = t.write("a.txt", shakespeare_prefix(4 * 1024));
    // A stale validation shard from an earlier run must not survive.
    fs::create_directories(t.file("out"));
    t.write("out/valid.pldrtok", "stale");
    pldr::PrepareOptions o;
    o.tokenizer_path = kKvg;
    o.input_files = {a};
    o.ctx = 16;
    o.output_dir = t.file("out");
    const auto st = pldr::prepare_corpus(o);
    EXPECT_FALSE(st.has_valid);
    EXPECT_EQ(st.valid.documents, 0);
    EXPECT_FALSE(fs::exists(t.file("out/valid.pldrtok")));
    const auto meta = nlohmann::json::parse(pldr::read_file(t.file("out/meta.json")));
    EXPECT_TRUE(meta["valid"].is_null());
    EXPECT_EQ(meta["split"]["mode"], "none");
    EXPECT_EQ(pldr::ShardReader(t.file("out/train.pldrtok")).num_chunks(), st.train.chunks);
}

TEST(Prepare, RejectsBadInput) {
    TempDir t;
    const std::string good = t.write("good.txt", shakespeare_prefix(4 * 1024));
    pldr::PrepareOptions o;
    o.tokenizer_path = kKvg;
    o.input_files = {good};
    o.ctx = 16;
    o.output_dir = t.file("out");

    auto with = [&](auto change) {
        pldr::PrepareOptions x = o;
        change(x);
        return x;
    };
    const std::string bad = t.write("bad.txt", "fine line\nsecond \xE9t\xE9 line\n");
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) {
                           x.input_files = {good, bad};
                       })); },
                 {"bad.txt", "invalid UTF-8 at byte offset 17"});
    const std::string empty = t.write("empty.txt", "\n\n\n");
    const std::string empty2 = t.write("empty2.txt", "");
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) { x.input_files = {empty, empty2}; }));
        },
        {"empty corpus", "empty.txt"});
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) { x.tokenizer_path = t.file("none.model"); }));
        },
        {"none.model", "file not found"});
    const std::string garbage = t.write("garbage.model", "garbage");
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.tokenizer_path = garbage; })); },
                 {"garbage.model", "not a valid SentencePiece model"});
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.ctx = 1; })); },
                 {"ctx 1 must be at least 2"});
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.ctx = 100000; })); },
                 {"train split is too small", "fewer than one chunk of ctx = 100000"});
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) { x.input_files = {t.file("missing.txt")}; }));
        },
        {"missing.txt", "file not found"});
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) { x.input_files = {good, good}; }));
        },
        {"good.txt", "listed twice"});
    const std::string one = t.write("one.txt", shakespeare_prefix(2000));  // one document
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) {
                x.input_files = {one};
                x.one_doc_per_line = false;
                x.valid_fraction = 0.5;
            }));
        },
        {"no validation documents"});
    expect_error(
        [&] {
            pldr::prepare_corpus(with([&](auto& x) {
                x.valid_fraction = 0.2;
                x.valid_files = {one};
            }));
        },
        {"either a validation fraction or validation files"});
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.valid_fraction = 1e-300; })); },
                 {"is too small"});
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.valid_fraction = 0.7; })); },
                 {"validation fraction 0.7"});
    const std::string tiny_valid = t.write("tiny_valid.txt", "Hi.\n");
    expect_error(
        [&] { pldr::prepare_corpus(with([&](auto& x) { x.valid_files = {tiny_valid}; })); },
        {"validation split is too small", "1 document(s)"});
    expect_error([&] { pldr::prepare_corpus(with([&](auto& x) { x.block_docs = 0; })); },
                 {"block_docs 0"});
    // None of the failed runs wrote anything.
    EXPECT_FALSE(fs::exists(t.file("out/train.pldrtok")));
    EXPECT_FALSE(fs::exists(t.file("out/meta.json")));
}
