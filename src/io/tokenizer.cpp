// SentencePiece tokenizer wrapper and trainer (see tokenizer.h).
#include "io/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/fs.h"

// Exported by libsentencepiece 0.1.97 but not declared in its public headers.
namespace sentencepiece::logging {
int GetMinLogLevel();
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging

namespace pldr {

namespace {

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

// --- A check of the normalization tables before libsentencepiece sees them ---------------
// libsentencepiece (0.1.97) trusts the precompiled_charsmap of a model: a malformed double-array
// trie sends its normalizer outside the table (found by fuzz/fuzz_tokenizer: a heap read after
// the end). Every state of the trie reachable by some input is walked here, with the exact
// transitions of darts-clone's commonPrefixSearch, and every index and value is bounds-checked.

bool read_varint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
        const uint8_t b = *p++;
        *v |= uint64_t(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

// Calls f(field, wire_type, payload) for each field of a protobuf message; false if malformed.
template <typename F>
bool for_each_field(std::string_view msg, F&& f) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(msg.data());
    const uint8_t* end = p + msg.size();
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(p, end, &key)) return false;
        const uint32_t wt = uint32_t(key & 7);
        std::string_view payload;
        if (wt == 0) {
            if (!read_varint(p, end, &v)) return false;
        } else if (wt == 1 || wt == 5) {
            const size_t n = wt == 1 ? 8 : 4;
            if (size_t(end - p) < n) return false;
            p += n;
        } else if (wt == 2) {
            if (!read_varint(p, end, &v) || v > uint64_t(end - p)) return false;
            payload = std::string_view(reinterpret_cast<const char*>(p), size_t(v));
            p += v;
        } else {
            return false;
        }
        if (!f(key >> 3, wt, payload)) return false;
    }
    return true;
}

// "" when the charsmap is safe, else what is wrong with it.
std::string check_charsmap(std::string_view blob) {
    if (blob.empty()) return "";
    if (blob.size() < 4) return "a normalization table shorter than its header";
    uint32_t trie_size;
    std::memcpy(&trie_size, blob.data(), 4);
    if (trie_size >= blob.size() - 4 + 1 || trie_size % 4 != 0 || trie_size == 0)
        return "a normalization table whose trie size does not fit";
    const size_t n = trie_size / 4;
    std::vector<uint32_t> units(n);
    std::memcpy(units.data(), blob.data() + 4, trie_size);
    const std::string_view normalized = blob.substr(4 + trie_size);
    auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
    auto value = [](uint32_t u) { return u & ((1u << 31) - 1); };
    auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFF); };
    auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
    std::vector<bool> seen(n, false);
    std::vector<size_t> stack{size_t(0) ^ offset(units[0])};
    while (!stack.empty()) {
        const size_t base = stack.back();
        stack.pop_back();
        if (base < n) {
            if (seen[base]) continue;
            seen[base] = true;
        }
        for (uint32_t c = 0; c < 256; ++c) {
            const size_t child = base ^ c;
            if (child >= n) return "a normalization trie that leads outside itself";
            const uint32_t u = units[child];
            if (label(u) != c) continue;
            const size_t next = child ^ offset(u);
            if (has_leaf(u)) {
                if (next >= n) return "a normalization trie that leads outside itself";
                const size_t v = value(units[next]);
                if (v >= normalized.size() || normalized.find('\0', v) == std::string_view::npos)
                    return "a normalization rule outside the table";
            }
            if (next >= n || !seen[next]) stack.push_back(next);
        }
    }
    return "";
}

// "" when the normalizer and denormalizer tables of a serialized ModelProto are safe.
std::string check_model_tables(std::string_view proto) {
    std::string bad;
    const bool ok = for_each_field(proto, [&](uint64_t field, uint32_t wt, std::string_view m) {
        if ((field == 3 || field == 5) && wt == 2) {  // normalizer_spec, denormalizer_spec
            return for_each_field(m, [&](uint64_t f2, uint32_t wt2, std::string_view b) {
                if (f2 == 2 && wt2 == 2 && bad.empty()) bad = check_charsmap(b);
                return true;
            });
        }
        return true;
    });
    if (!ok) return "malformed protobuf";
    return bad;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// UTF-8

int64_t find_invalid_utf8(std::string_view data) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    const size_t n = data.size();
    size_t i = 0;
    while (i < n) {
        const unsigned c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;  // no overlong forms
            if (c == 0xED) hi = 0x9F;  // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;  // no overlong forms
            if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
        } else {
            return static_cast<int64_t>(i);
        }
        if (i + len > n) return static_cast<int64_t>(i);
        if (p[i + 1] < lo || p[i + 1] > hi) return static_cast<int64_t>(i);
        for (size_t k = 2; k < len; ++k)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return static_cast<int64_t>(i);
        i += len;
    }
    return -1;
}

void require_utf8(std::string_view data, const std::string& name) {
    const int64_t bad = find_invalid_utf8(data);
    if (bad >= 0) fail(name, ": invalid UTF-8 at byte offset ", bad);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
    struct stat st;
    if (::stat(model_path.c_str(), &st) != 0) fail("tokenizer ", model_path, ": file not found");
    if (S_ISDIR(st.st_mode)) fail("tokenizer ", model_path, ": is a directory");
    // Read the bytes ourselves so that I/O problems and parse problems read differently.
    const std::string bytes = read_file(model_path);
    if (bytes.empty()) fail("tokenizer ", model_path, ": empty file, not a SentencePiece model");
    const std::string bad = check_model_tables(bytes);
    if (!bad.empty())
        fail("tokenizer ", model_path, ": not a valid SentencePiece model (", bad, ")");
    const auto st2 = sp_->LoadFromSerializedProto(bytes);
    if (!st2.ok())
        fail("tokenizer ", model_path, ": not a valid SentencePiece model (",
             one_line(st2.ToString()), ")");
    if (sp_->GetPieceSize() <= 0) fail("tokenizer ", model_path, ": the model has no pieces");
    if (sp_->eos_id() < 0) fail("tokenizer ", model_path, ": the model has no EOS piece");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    if (!st.ok()) fail("tokenizer ", path_, ": encode failed: ", one_line(st.ToString()));
    return std::vector<int64_t>(ids.begin(), ids.end());
}

std::vector<int64_t> Tokenizer::encode_document(std::string_view text) const {
    std::vector<int64_t> ids = encode(text);
    ids.push_back(eos_id());
    return ids;
}

std::vector<int64_t> Tokenizer::encode_prompt(std::string_view text) const {
    std::vector<int64_t> ids = encode_document(text);
    if (ids.size() > 1) ids.pop_back();
    return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
    const int64_t v = vocab_size();
    std::vector<int> ii;
    ii.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= v)
            fail("tokenizer ", path_, ": cannot decode id ", ids[i], " at position ", i,
                 ": outside [0, ", v, ")");
        ii.push_back(static_cast<int>(ids[i]));
    }
    std::string out;
    const auto st = sp_->Decode(ii, &out);
    if (!st.ok()) fail("tokenizer ", path_, ": decode failed: ", one_line(st.ToString()));
    return out;
}

std::string Tokenizer::piece(int64_t id) const {
    PLDR_REQUIRE(id >= 0 && id < vocab_size(), "tokenizer ", path_, ": id ", id, " outside [0, ",
                 vocab_size(), ")");
    return sp_->IdToPiece(static_cast<int>(id));
}

std::string Tokenizer::piece_text(int64_t id) const {
    const std::string p = piece(id);
    std::string out;
    for (size_t i = 0; i < p.size();) {
        if (p.compare(i, 3, "\xE2\x96\x81") == 0) {  // "▁" (U+2581)
            out += ' ';
            i += 3;
        } else {
            out += p[i++];
        }
    }
    return out;
}

std::string Tokenizer::token_text(int64_t id) const {
    const std::string p = piece(id);
    if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
        const std::string hex = p.substr(3, 2);
        char* end = nullptr;
        const long v = std::strtol(hex.c_str(), &end, 16);
        if (end && *end == '\0') return std::string(1, char(v));
    }
    if (id == eos_id() || id == bos_id() || id == pad_id()) return "";
    return piece_text(id);
}

std::string Tokenizer::continuation_text(const std::vector<int64_t>& prompt,
                                         const std::vector<int64_t>& ids,
                                         const std::string& prompt_text) const {
    std::vector<int64_t> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string s = decode(all);
    if (s.size() >= prompt_text.size() && s.compare(0, prompt_text.size(), prompt_text) == 0)
        return s.substr(prompt_text.size());
    return decode(ids);
}

Tokenizer::Pieces Tokenizer::pieces(const std::vector<int64_t>& ids) const {
    static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
    Pieces out;
    std::string prev;
    std::vector<int64_t> prefix;
    for (size_t i = 0; i < ids.size(); ++i) {
        prefix.push_back(ids[i]);
        std::string cur = decode(prefix);
        if (i + 1 < ids.size() && cur.size() >= kReplacement.size() &&
            cur.compare(cur.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
            out.offset.push_back(int64_t(prev.size()));
            out.text.emplace_back();
            continue;
        }
        // Otherwise the decoded text of a prefix extends the previous one; should it not, the
        // common prefix counts as the previous text.
        size_t k = 0;
        while (k < prev.size() && k < cur.size() && prev[k] == cur[k]) ++k;
        out.offset.push_back(int64_t(k));
        out.text.push_back(cur.substr(k));
        prev = std::move(cur);
    }
    return out;
}

int64_t Tokenizer::vocab_size() const {
    return sp_->GetPieceSize();
}
int64_t Tokenizer::eos_id() const {
    return sp_->eos_id();
}
int64_t Tokenizer::bos_id() const {
    return sp_->bos_id();
}
int64_t Tokenizer::pad_id() const {
    return sp_->pad_id();
}
int64_t Tokenizer::unk_id() const {
    return sp_->unk_id();
}

// ---------------------------------------------------------------------------------------------
// Training

namespace {

// Feeds the (already validated) lines of the input files to the trainer, one sentence per
// line, skipping empty lines; avoids sentencepiece's comma-separated `input` list.
class LineIterator : public sentencepiece::SentenceIterator {
  public:
    explicit LineIterator(const std::vector<std::string>* texts) : texts_(texts) { advance(); }
    bool done() const override { return file_ >= texts_->size(); }
    void Next() override { advance(); }
    const std::string& value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    void advance() {
        while (file_ < texts_->size()) {
            const std::string& t = (*texts_)[file_];
            if (pos_ >= t.size()) {
                ++file_;
                pos_ = 0;
                continue;
            }
            size_t e = t.find('\n', pos_);
            if (e == std::string::npos) e = t.size();
            line_.assign(t, pos_, e - pos_);
            pos_ = e + 1;
            if (!line_.empty()) return;
        }
        line_.clear();
    }

    const std::vector<std::string>* texts_;
    size_t file_ = 0, pos_ = 0;
    std::string line_;
};

struct LogLevelGuard {
    int saved;
    explicit LogLevelGuard(int level) : saved(sentencepiece::logging::GetMinLogLevel()) {
        sentencepiece::logging::SetMinLogLevel(level);
    }
    ~LogLevelGuard() { sentencepiece::logging::SetMinLogLevel(saved); }
};

}  // namespace

void train_tokenizer(const TokenizerTrainOptions& o) {
    const std::string who = "train_tokenizer";
    PLDR_REQUIRE(!o.input_files.empty(), who, ": no input files");
    PLDR_REQUIRE(!o.output_prefix.empty(), who, ": empty output prefix");
    const bool bytes = o.model_type == "unigram" || o.model_type == "bpe";
    PLDR_REQUIRE(bytes || o.model_type == "char" || o.model_type == "word", who,
                 ": unknown model type '", o.model_type, "' (unigram|bpe|char|word)");
    // 6 special pieces ([PAD] [UNK] [START] [END] [SEP] [CLS]), 256 byte pieces for
    // unigram/bpe (byte fallback), and at least one learned piece.
    const int64_t required = 6 + (bytes ? 256 : 0);
    PLDR_REQUIRE(o.vocab_size > required && o.vocab_size <= (int64_t{1} << 31) - 1, who,
                 ": vocab size ", o.vocab_size, " must be at least ", required + 1,
                 " for model type ", o.model_type, " (", required, " required pieces)");
    PLDR_REQUIRE(o.character_coverage > 0.0 && o.character_coverage <= 1.0, who,
                 ": character coverage ", o.character_coverage, " must be in (0, 1]");
    PLDR_REQUIRE(o.max_sentence_length > 0 && o.max_sentence_length <= (int64_t{1} << 31) - 1, who,
                 ": max_sentence_length ", o.max_sentence_length, " must be positive");
    PLDR_REQUIRE(o.input_sentence_size >= 0, who, ": input_sentence_size ", o.input_sentence_size,
                 " must be >= 0");
    PLDR_REQUIRE(o.num_threads >= 0 && o.num_threads <= 1024, who, ": num_threads ", o.num_threads,
                 " must be in [0, 1024]");

    std::vector<std::string> texts;
    texts.reserve(o.input_files.size());
    for (const auto& f : o.input_files) {
        if (!file_exists(f)) fail(who, ": input ", f, ": file not found");
        std::string t = read_file(f);
        if (t.empty()) fail(who, ": input ", f, ": empty file");
        require_utf8(t, who + ": input " + f);
        if (t.find_first_not_of("\n") == std::string::npos)
            fail(who, ": input ", f, ": no non-empty line");
        texts.push_back(std::move(t));
    }

    const std::filesystem::path prefix(o.output_prefix);
    const std::filesystem::path dir =
        prefix.has_parent_path() ? prefix.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        fail(who, ": output directory ", dir.string(), " does not exist");

    const std::string tmp = o.output_prefix + ".tmp." + std::to_string(::getpid());
    const int threads = o.num_threads > 0
                            ? o.num_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::unordered_map<std::string, std::string> kw = {
        {"model_prefix", tmp},
        {"vocab_size", std::to_string(o.vocab_size)},
        {"model_type", o.model_type},
        {"character_coverage", cat(o.character_coverage)},
        {"max_sentence_length", std::to_string(o.max_sentence_length)},
        {"input_sentence_size", std::to_string(o.input_sentence_size)},
        {"shuffle_input_sentence", o.shuffle_input_sentence ? "true" : "false"},
        {"hard_vocab_limit", o.hard_vocab_limit ? "true" : "false"},
        {"num_threads", std::to_string(threads)},
        {"pad_id", "0"},
        {"unk_id", "1"},
        {"bos_id", "2"},
        {"eos_id", "3"},
        {"pad_piece", "[PAD]"},
        {"unk_piece", "[UNK]"},
        {"bos_piece", "[START]"},
        {"eos_piece", "[END]"},
        {"user_defined_symbols", "[SEP],[CLS]"},
        {"byte_fallback", bytes ? "true" : "false"},
        {"split_digits", "true"},
        {"normalization_rule_name", "nmt_nfkc"},
    };

    const std::string tmp_model = tmp + ".model", tmp_vocab = tmp + ".vocab";
    auto cleanup = [&] {
        std::remove(tmp_model.c_str());
        std::remove(tmp_vocab.c_str());
    };
    sentencepiece::util::Status st;
    {
        LogLevelGuard quiet(o.verbose ? 0 : 2);
        sentencepiece::SetRandomGeneratorSeed(o.seed);
        LineIterator it(&texts);
        st = sentencepiece::SentencePieceTrainer::Train(kw, &it);
    }
    if (!st.ok()) {
        cleanup();
        fail(who, ": sentencepiece training failed for ", o.output_prefix, ": ",
             one_line(st.ToString()));
    }
    if (!file_exists(tmp_model) || !file_exists(tmp_vocab)) {
        cleanup();
        fail(who, ": sentencepiece wrote no model for ", o.output_prefix);
    }
    const std::string out_model = o.output_prefix + ".model";
    const std::string out_vocab = o.output_prefix + ".vocab";
    // The vocabulary first: once the .model is in place, its .vocab is too.
    if (std::rename(tmp_vocab.c_str(), out_vocab.c_str()) != 0 ||
        std::rename(tmp_model.c_str(), out_model.c_str()) != 0) {
        cleanup();
        fail(who, ": cannot write ", out_model);
    }
}

}  // namespace pldr
