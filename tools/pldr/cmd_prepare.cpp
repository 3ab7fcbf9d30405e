// pldr prepare --tokenizer T.model --out SHARD_DIR [--ctx C] [--valid-fraction F | --valid FILE...]
// [--whole-files] FILE...: tokenize, pack and write train/valid token shards (train/prepare.h),
// then print a summary with the unigram entropy of each split.
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

struct PrepareArgs {
    api::PrepareOptions o;
    bool whole_files = false;
};

void print_split(const char* name, const api::SplitStats& s) {
    std::printf(
        "  %-5s %8lld documents %11lld tokens -> %8lld chunks (%lld tokens dropped)  "
        "unigram entropy %.4f nats/token\n",
        name, (long long)s.documents, (long long)s.tokens, (long long)s.chunks,
        (long long)s.dropped_tokens, s.unigram_entropy);
}

}  // namespace

void add_prepare(CLI::App& app) {
    auto a = std::make_shared<PrepareArgs>();
    auto* cmd = app.add_subcommand("prepare", "tokenize and pack a text corpus into token shards");
    cmd->add_option("--tokenizer", a->o.tokenizer_path, "SentencePiece .model file")->required();
    cmd->add_option("--out", a->o.output_dir,
                    "output directory (train.pldrtok, valid.pldrtok, meta.json)")
        ->required()
        ->check(output_path());
    add_force(cmd, &a->o.force);
    cmd->add_option("--ctx", a->o.ctx, "chunk length in tokens (the model sees ctx - 1)")
        ->capture_default_str();
    auto* vf = cmd->add_option("--valid-fraction", a->o.valid_fraction,
                               "send every round(1/F)-th document to validation");
    auto* vfiles = cmd->add_option("--valid", a->o.valid_files, "validation text files");
    vf->excludes(vfiles);
    cmd->add_flag("--whole-files", a->whole_files,
                  "each file is one document (default: each non-empty line)");
    cmd->add_option("--block-docs", a->o.block_docs, "documents per packing block")
        ->capture_default_str();
    cmd->add_option("--threads", a->o.num_threads, "encoding threads (0 = OpenMP default)");
    cmd->add_option("FILE", a->o.input_files, "UTF-8 text files")->required();
    cmd->callback([a]() {
        a->o.one_doc_per_line = !a->whole_files;
        {
            api::Inputs in;
            in.file(a->o.tokenizer_path);
            for (const auto& f : a->o.input_files) in.file(f);
            for (const auto& f : a->o.valid_files) in.file(f);
            in.check_dir(a->o.output_dir, "--out", {"train.pldrtok", "valid.pldrtok", "meta.json"},
                         a->o.force);
        }
        const api::PrepareStats st = api::prepare_corpus(a->o);
        std::printf("prepared %s: vocab %lld, ctx %lld, %lld empty documents skipped\n",
                    a->o.output_dir.c_str(), (long long)st.vocab_size, (long long)st.ctx,
                    (long long)st.empty_documents);
        print_split("train", st.train);
        if (st.has_valid) print_split("valid", st.valid);
        return 0;
    });
}

}  // namespace pldr::cli
