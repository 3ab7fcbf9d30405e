// SentencePiece tokenizer wrapper (spec §5.3, §4.4, §6.1) and tokenizer training with the
// reference's settings (the trainer spec stored in the KVG tokenizer model).
//
// Encoding conventions of the reference:
//   * data preparation: ids of the document, then EOS; never BOS (encode_document);
//   * prompts / evaluation: encode with EOS appended, then drop the trailing EOS when there is
//     more than one token (encode_prompt): plain ids, except that "" gives [EOS].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace pldr {

class Tokenizer {
  public:
    // Loads a SentencePiece model (.model, a serialized ModelProto). Throws pldr::Error naming
    // the file when it is missing, unreadable or not a valid model.
    explicit Tokenizer(const std::string& model_path);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // Plain ids, no BOS/EOS. Thread-safe (const).
    std::vector<int64_t> encode(std::string_view text) const;
    // encode(text) followed by EOS (the reference's data preparation: add_eos, no BOS).
    std::vector<int64_t> encode_document(std::string_view text) const;
    // The reference's prompt encoding: encode + EOS, then the trailing EOS removed when the
    // result has more than one token. Equals encode(text) except that "" gives [EOS].
    std::vector<int64_t> encode_prompt(std::string_view text) const;
    // Text of ids; throws pldr::Error for an id outside [0, vocab_size()).
    std::string decode(const std::vector<int64_t>& ids) const;
    // The piece string of one id; throws for an id outside [0, vocab_size()).
    std::string piece(int64_t id) const;

    // Token text, the one place that turns ids into the texts that callers show per token:
    //   piece_text     — the piece with SentencePiece's word marker "▁" as a space (byte pieces
    //                    stay "<0xNN>", so the result is valid UTF-8 for every id);
    //   token_text     — piece_text, except that a byte piece <0xNN> is its one byte and EOS,
    //                    BOS and PAD are "" (the pieces of a sequence then concatenate to its
    //                    decoded text);
    //   continuation_text — the text that generated `ids` add after `prompt`: decode(prompt +
    //                    ids) after prompt_text = decode(prompt), so that the leading space of
    //                    the first token is kept, or decode(ids) when prompt_text is not a
    //                    prefix of it;
    //   pieces         — the text each id adds to the decoded text of the ids before it (their
    //                    concatenation is decode(ids)) and the byte offset of each in that text.
    //                    A prefix that ends inside a character (byte pieces) decodes with a
    //                    U+FFFD for each of its bytes so far, which the next token's text
    //                    replaces: such a token gets no text, and the token that completes the
    //                    character the whole of it (the last token gives what is left).
    std::string piece_text(int64_t id) const;
    std::string token_text(int64_t id) const;
    std::string continuation_text(const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& ids,
                                  const std::string& prompt_text) const;
    std::string continuation_text(const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& ids) const {
        return continuation_text(prompt, ids, decode(prompt));
    }
    struct Pieces {
        std::vector<std::string> text;
        std::vector<int64_t> offset;
    };
    Pieces pieces(const std::vector<int64_t>& ids) const;

    int64_t vocab_size() const;
    int64_t eos_id() const;
    int64_t bos_id() const;
    int64_t pad_id() const;
    int64_t unk_id() const;
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Options of train_tokenizer. Defaults are the reference tokenizer's trainer spec (read from
// the KVG model: unigram, vocab 32000, character_coverage 0.9995 (spm default),
// max_sentence_length 125760, input_sentence_size 5,000,000, shuffle, hard_vocab_limit=false),
// except num_threads (0 = all hardware threads; the reference used 24).
struct TokenizerTrainOptions {
    std::vector<std::string> input_files;  // UTF-8 text; each line is one sentence
    std::string output_prefix;             // writes <prefix>.model and <prefix>.vocab
    int64_t vocab_size = 32000;
    std::string model_type = "unigram";  // unigram | bpe | char | word
    double character_coverage = 0.9995;
    int64_t max_sentence_length = 125760;   // bytes; longer lines are skipped by spm
    int64_t input_sentence_size = 5000000;  // sentences sampled (0 = all)
    bool shuffle_input_sentence = true;
    bool hard_vocab_limit = false;  // reference: false (the vocab may come out smaller)
    int num_threads = 0;            // 0 = std::thread::hardware_concurrency()
    unsigned seed = 0;              // sentencepiece's random generator seed (sampling)
    bool verbose = false;           // let sentencepiece log its progress to stderr
};

// Trains a SentencePiece model with the reference's special pieces: pad=0 [PAD], unk=1 [UNK],
// bos=2 [START], eos=3 [END], user-defined [SEP]=4 and [CLS]=5, byte_fallback (unigram and
// bpe; ids 6..261 are <0x00>..<0xFF>), split_digits, normalizer nmt_nfkc. Writes the two
// files atomically (trained under a temporary prefix, then renamed). Throws pldr::Error on
// bad options or input (missing/empty file, invalid UTF-8 with file and byte offset).
void train_tokenizer(const TokenizerTrainOptions& opts);

// Byte offset of the first invalid UTF-8 sequence in `data` (strict: no overlong forms,
// surrogates or code points above U+10FFFF), or -1 if `data` is valid UTF-8.
int64_t find_invalid_utf8(std::string_view data);
// Throws pldr::Error "<name>: invalid UTF-8 at byte offset N" unless `data` is valid UTF-8.
void require_utf8(std::string_view data, const std::string& name);

}  // namespace pldr
