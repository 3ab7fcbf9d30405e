// Corpus preparation (see prepare.h).
#include "train/prepare.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/fs.h"
#include "io/tokenizer.h"
#include "train/shard.h"

namespace pldr {

namespace {

// One split's streaming state: pending documents (text), the packer, and the packed output.
struct SplitBuilder {
    int64_t block_docs;
    Packer packer;
    std::vector<std::string> pending;
    std::vector<int64_t> out;
    SplitStats stats;

    SplitBuilder(int64_t ctx, int64_t block) : block_docs(block), packer(ctx) {}

    void add(std::string_view doc, const Tokenizer& tok, int threads) {
        pending.emplace_back(doc);
        ++stats.documents;
        if (static_cast<int64_t>(pending.size()) == block_docs) flush(tok, threads);
    }

    // Encodes the pending block (in parallel; results in document order) and packs it.
    void flush(const Tokenizer& tok, int threads) {
        if (pending.empty()) return;
        const auto n = static_cast<int64_t>(pending.size());
        std::vector<std::vector<int64_t>> ids(static_cast<size_t>(n));
        std::string err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t i = 0; i < n; ++i) {
            try {
                ids[static_cast<size_t>(i)] = tok.encode_document(pending[static_cast<size_t>(i)]);
            } catch (const std::exception& e) {
#pragma omp critical(pldr_prepare_err)
                if (err.empty()) err = e.what();
            }
        }
        if (!err.empty()) throw Error(err);
        for (const auto& d : ids) stats.tokens += static_cast<int64_t>(d.size());
        packer.add_block(ids, &out);
        pending.clear();
    }

    void finish(const Tokenizer& tok, int threads) {
        flush(tok, threads);
        stats.chunks = static_cast<int64_t>(out.size()) / packer.chunk_len();
        stats.dropped_tokens = static_cast<int64_t>(packer.remainder().size());
    }
};

// Calls fn(doc) for every non-empty document of `text`; returns the number of empty ones.
template <class F>
int64_t for_each_document(const std::string& text, bool one_doc_per_line, F&& fn) {
    int64_t empty = 0;
    if (!one_doc_per_line) {
        if (text.empty()) return 1;
        fn(std::string_view(text));
        return 0;
    }
    size_t pos = 0;
    while (pos < text.size()) {
        size_t e = text.find('\n', pos);
        if (e == std::string::npos) e = text.size();
        size_t end = e;
        if (end > pos && text[end - 1] == '\r') --end;  // CRLF line ends
        if (end > pos)
            fn(std::string_view(text).substr(pos, end - pos));
        else
            ++empty;
        pos = e + 1;
    }
    return empty;
}

std::string hex64(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
}

nlohmann::ordered_json split_json(const std::string& file, const SplitStats& s, int64_t ctx) {
    nlohmann::ordered_json j;
    j["file"] = file;
    j["documents"] = s.documents;
    j["tokens"] = s.tokens;
    j["chunks"] = s.chunks;
    j["packed_tokens"] = s.chunks * ctx;
    j["dropped_tokens"] = s.dropped_tokens;
    return j;
}

// The options, and every input a file listed once.
void check_options(const PrepareOptions& o, const std::string& who) {
    PLDR_REQUIRE(o.ctx >= 2, who, ": ctx ", o.ctx, " must be at least 2");
    PLDR_REQUIRE(o.ctx <= (int64_t{1} << 31), who, ": ctx ", o.ctx, " is too large");
    PLDR_REQUIRE(o.block_docs >= 1, who, ": block_docs ", o.block_docs, " must be at least 1");
    PLDR_REQUIRE(
        std::isfinite(o.valid_fraction) && o.valid_fraction >= 0.0 && o.valid_fraction <= 0.5, who,
        ": validation fraction ", o.valid_fraction, " must be in [0, 0.5]");
    PLDR_REQUIRE(o.valid_fraction == 0.0 || o.valid_fraction >= 1e-12, who,
                 ": validation fraction ", o.valid_fraction, " is too small (use 0 for none)");
    PLDR_REQUIRE(o.valid_fraction == 0.0 || o.valid_files.empty(), who,
                 ": give either a validation fraction or validation files, not both");
    PLDR_REQUIRE(!o.output_dir.empty(), who, ": no output directory");
    PLDR_REQUIRE(!o.input_files.empty(), who, ": no input files");
    PLDR_REQUIRE(o.num_threads >= 0, who, ": num_threads ", o.num_threads, " must be >= 0");
    if (o.tokenizer_path.empty()) fail(who, ": no tokenizer given");
    if (!file_exists(o.tokenizer_path))
        fail(who, ": tokenizer ", o.tokenizer_path, ": file not found");
    std::set<std::string> seen;
    for (const auto* list : {&o.input_files, &o.valid_files})
        for (const auto& f : *list) {
            if (!file_exists(f)) fail(who, ": input ", f, ": file not found");
            if (!seen.insert(std::filesystem::weakly_canonical(f).string()).second)
                fail(who, ": input ", f, " is listed twice");
        }
}

// The tokenizer in meta.json: its file (size, checksum), special ids and a few pieces.
nlohmann::ordered_json tokenizer_json(const Tokenizer& tok, const std::string& path) {
    const std::string bytes = read_file(path);
    nlohmann::ordered_json t;
    t["file"] = std::filesystem::path(path).filename().string();
    t["path"] = path;
    t["bytes"] = bytes.size();
    t["fnv1a64"] = hex64(fnv1a64(bytes.data(), bytes.size()));
    t["vocab_size"] = tok.vocab_size();
    t["pad_id"] = tok.pad_id();
    t["unk_id"] = tok.unk_id();
    t["bos_id"] = tok.bos_id();
    t["eos_id"] = tok.eos_id();
    nlohmann::ordered_json pieces;
    for (int64_t id : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5},
                       int64_t{100}, int64_t{1000}, tok.vocab_size() - 1})
        if (id < tok.vocab_size()) pieces[std::to_string(id)] = tok.piece(id);
    t["pieces"] = pieces;
    return t;
}

}  // namespace

PrepareStats prepare_corpus(const PrepareOptions& o) {
    const std::string who = "prepare";
    check_options(o, who);

    const Tokenizer tok(o.tokenizer_path);
    const int threads = o.num_threads > 0 ? o.num_threads : omp_get_max_threads();
    const int64_t k =
        o.valid_fraction > 0.0 ? static_cast<int64_t>(std::llround(1.0 / o.valid_fraction)) : 0;
    const bool has_valid = k > 0 || !o.valid_files.empty();

    PrepareStats stats;
    stats.has_valid = has_valid;
    stats.vocab_size = tok.vocab_size();
    stats.ctx = o.ctx;
    SplitBuilder train(o.ctx, o.block_docs), valid(o.ctx, o.block_docs);
    nlohmann::ordered_json sources = nlohmann::ordered_json::array();
    int64_t doc_index = 0;  // over the non-empty documents of input_files

    auto scan = [&](const std::string& f, bool is_valid_file) {
        std::string text = read_file(f);
        require_utf8(text, who + ": input " + f);
        int64_t ndocs = 0;
        const int64_t empty = for_each_document(text, o.one_doc_per_line, [&](std::string_view d) {
            ++ndocs;
            bool to_valid = is_valid_file;
            if (!is_valid_file) {
                to_valid = k > 0 && doc_index % k == k / 2;
                ++doc_index;
            }
            (to_valid ? valid : train).add(d, tok, threads);
        });
        stats.empty_documents += empty;
        nlohmann::ordered_json s;
        s["path"] = f;
        s["role"] = is_valid_file ? "valid" : "input";
        s["bytes"] = text.size();
        s["documents"] = ndocs;
        s["empty_documents"] = empty;
        sources.push_back(std::move(s));
    };
    for (const auto& f : o.input_files) scan(f, false);
    for (const auto& f : o.valid_files) scan(f, true);

    if (train.stats.documents + valid.stats.documents == 0)
        fail(who, ": empty corpus: no non-empty document in ",
             o.input_files.size() + o.valid_files.size(),
             " input file(s) (first: ", o.input_files.front(), ")");
    if (train.stats.documents == 0)
        fail(who, ": no training documents (all ", valid.stats.documents,
             " documents went to validation)");
    if (has_valid && valid.stats.documents == 0)
        fail(who, ": no validation documents (validation fraction ", o.valid_fraction,
             " selects every ", k, "-th document from index ", k / 2, "; the inputs have ",
             doc_index, " document(s))");

    train.finish(tok, threads);
    valid.finish(tok, threads);
    auto too_small = [&](const char* name, const SplitStats& s) {
        if (s.chunks == 0)
            fail(who, ": the ", name, " split is too small: ", s.documents, " document(s), ",
                 s.tokens, " tokens, fewer than one chunk of ctx = ", o.ctx, " tokens");
    };
    too_small("train", train.stats);
    if (has_valid) too_small("validation", valid.stats);
    stats.train = train.stats;
    stats.valid = valid.stats;

    std::error_code ec;
    std::filesystem::create_directories(o.output_dir, ec);
    if (!std::filesystem::is_directory(o.output_dir))
        fail(who, ": cannot create output directory ", o.output_dir,
             ec ? ": " + ec.message() : std::string());
    const std::filesystem::path dir(o.output_dir);
    write_shard((dir / "train.pldrtok").string(), train.out, tok.vocab_size(), o.ctx);
    if (has_valid)
        write_shard((dir / "valid.pldrtok").string(), valid.out, tok.vocab_size(), o.ctx);
    else
        std::filesystem::remove(dir / "valid.pldrtok", ec);  // no stale split from an old run

    nlohmann::ordered_json meta;
    meta["format"] = "pldr-prepared-corpus";
    meta["version"] = 1;
    meta["tokenizer"] = tokenizer_json(tok, o.tokenizer_path);
    meta["ctx"] = o.ctx;
    meta["block_docs"] = o.block_docs;
    meta["one_doc_per_line"] = o.one_doc_per_line;
    meta["encoding"] = "sentencepiece ids + EOS per document, no BOS";
    meta["packing"] = "pack";
    {
        nlohmann::ordered_json sp;
        if (!o.valid_files.empty()) {
            sp["mode"] = "files";
        } else if (k > 0) {
            sp["mode"] = "fraction";
            sp["valid_fraction"] = o.valid_fraction;
            sp["every"] = k;
            sp["offset"] = k / 2;
        } else {
            sp["mode"] = "none";
        }
        meta["split"] = sp;
    }
    meta["sources"] = sources;
    meta["empty_documents"] = stats.empty_documents;
    meta["train"] = split_json("train.pldrtok", stats.train, o.ctx);
    meta["valid"] = has_valid ? split_json("valid.pldrtok", stats.valid, o.ctx)
                              : nlohmann::ordered_json(nullptr);
    write_file_atomic((dir / "meta.json").string(), meta.dump(2) + "\n");
    return stats;
}

}  // namespace pldr
