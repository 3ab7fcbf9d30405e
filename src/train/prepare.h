// Corpus preparation: raw UTF-8 text → tokenized, packed train/valid token shards
// (spec §5.3, §11.5; formats in docs/formats.md).
//
// Documents are encoded as the reference does (SentencePiece ids + EOS, no BOS) and packed in
// the reference's 'pack' mode (pack_documents in train/shard.h): blocks of `block_docs`
// documents, carried remainder in front, cut into ctx-token chunks, only complete chunks
// written, final remainder dropped. Train and validation are packed as two separate streams
// (the reference shares one remainder between them; we do not).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pldr {

struct PrepareOptions {
    std::string tokenizer_path;            // SentencePiece .model
    std::vector<std::string> input_files;  // UTF-8 text, in order
    // true: each non-empty line ('\n'-separated, a trailing '\r' removed) is one document;
    // false: each whole non-empty file is one document.
    bool one_doc_per_line = true;
    int64_t ctx = 1024;         // chunk length (the reference's context_length), ≥ 2
    int64_t block_docs = 1600;  // documents per packing block (reference: 16 × 100)
    // Validation split by document: with f > 0, k = round(1/f) and the documents of
    // input_files with global index i (counting non-empty documents from 0) and
    // i % k == k/2 go to validation. Must be in [0, 0.5]. 0 with no valid_files: no validation.
    double valid_fraction = 0.0;
    // Alternatively, explicit validation files (then valid_fraction must be 0): all their
    // documents go to validation and all documents of input_files to train.
    std::vector<std::string> valid_files;
    std::string output_dir;  // created if missing; gets train.pldrtok, valid.pldrtok, meta.json
    int num_threads = 0;     // encoding threads (OpenMP); 0 = the OpenMP default
};

struct SplitStats {
    int64_t documents = 0;       // non-empty documents in the split
    int64_t tokens = 0;          // their tokens including one EOS each, before packing
    int64_t chunks = 0;          // complete ctx-token chunks written
    int64_t dropped_tokens = 0;  // final remainder, not written (tokens = chunks·ctx + dropped)
};

struct PrepareStats {
    SplitStats train, valid;
    bool has_valid = false;       // false: no validation split, no valid.pldrtok
    int64_t empty_documents = 0;  // empty lines (or empty files) skipped
    int64_t vocab_size = 0;
    int64_t ctx = 0;
};

// Runs the whole preparation. Throws pldr::Error (one line, naming the file where there is one)
// for: a missing or invalid tokenizer, a missing input file, invalid UTF-8 (file and byte
// offset), no non-empty document, ctx < 2, bad options, or a split too small to fill one chunk.
PrepareStats prepare_corpus(const PrepareOptions& opts);

}  // namespace pldr
