// pldr tokenizer train|encode|decode: SentencePiece tokenizers with the reference's special
// pieces (io/tokenizer.h).
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

struct TokTrainArgs {
    api::TokenizerTrainOptions o;
    bool quiet = false;
};

std::string join_ids(const std::vector<int64_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

}  // namespace

void add_tokenizer(CLI::App& app) {
    auto* cmd = app.add_subcommand("tokenizer", "train a SentencePiece tokenizer, encode, decode");
    cmd->require_subcommand(1);

    auto ta = std::make_shared<TokTrainArgs>();
    auto* tr = cmd->add_subcommand("train",
                                   "train a tokenizer (reference specials: [PAD]=0 "
                                   "[UNK]=1 [START]=2 [END]=3 [SEP]=4 [CLS]=5)");
    tr->add_option("--input", ta->o.input_files, "UTF-8 text files (one sentence per line)")
        ->required();
    tr->add_option("--out", ta->o.output_prefix, "output prefix: writes PREFIX.model, PREFIX.vocab")
        ->required()
        ->check(output_path());
    add_force(tr, &ta->o.force);
    tr->add_option("--vocab-size", ta->o.vocab_size, "vocabulary size")->required();
    tr->add_option("--model-type", ta->o.model_type, "unigram, bpe, char or word")
        ->check(CLI::IsMember({"unigram", "bpe", "char", "word"}))
        ->capture_default_str();
    tr->add_option("--character-coverage", ta->o.character_coverage)->capture_default_str();
    tr->add_option("--input-sentence-size", ta->o.input_sentence_size,
                   "sentences sampled for training (0 = all)")
        ->capture_default_str();
    tr->add_option("--threads", ta->o.num_threads, "training threads (0 = all)")
        ->capture_default_str();
    tr->add_option("--seed", ta->o.seed, "sentencepiece's random seed")->capture_default_str();
    tr->add_flag("--verbose", ta->o.verbose, "show sentencepiece's log");
    tr->callback([ta]() {
        {
            api::Inputs in;
            for (const auto& f : ta->o.input_files) in.file(f);
            for (const char* ext : {".model", ".vocab"})
                in.check_file(ta->o.output_prefix + ext, "--out", ta->o.force);
        }
        api::train_tokenizer(ta->o);
        const api::Tokenizer t = api::Tokenizer::load(ta->o.output_prefix + ".model");
        std::printf("wrote %s.model and %s.vocab (%s, %lld pieces)\n", ta->o.output_prefix.c_str(),
                    ta->o.output_prefix.c_str(), ta->o.model_type.c_str(),
                    (long long)t.vocab_size());
        return 0;
    });

    auto enc = std::make_shared<std::pair<std::string, std::string>>();
    auto eos = std::make_shared<bool>(false);
    auto* en = cmd->add_subcommand("encode", "print the ids of TEXT, separated by spaces");
    en->add_option("TOKENIZER", enc->first, "SentencePiece .model file")->required();
    en->add_option("TEXT", enc->second, "text to encode")->required();
    en->add_flag("--eos", *eos, "append EOS, as data preparation does");
    en->callback([enc, eos]() {
        const api::Tokenizer t = api::Tokenizer::load(enc->first);
        api::require_utf8(enc->second, "TEXT");
        const auto ids = *eos ? t.encode_document(enc->second) : t.encode(enc->second);
        std::printf("%s\n", join_ids(ids).c_str());
        return 0;
    });

    auto dec = std::make_shared<std::pair<std::string, std::vector<std::string>>>();
    auto* de = cmd->add_subcommand("decode", "print the text of token ids");
    de->add_option("TOKENIZER", dec->first, "SentencePiece .model file")->required();
    de->add_option("ID", dec->second, "token ids (separated by spaces or commas)")->required();
    de->callback([dec]() {
        const api::Tokenizer t = api::Tokenizer::load(dec->first);
        std::vector<int64_t> ids;
        for (const std::string& s : dec->second)
            for (int64_t id : parse_ids(s, "ID")) ids.push_back(id);
        std::printf("%s\n", t.decode(ids).c_str());
        return 0;
    });
}

}  // namespace pldr::cli
