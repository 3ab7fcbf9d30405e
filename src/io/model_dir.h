// A Hugging Face style PLDR-LLM model directory (spec §9):
//   config.json
//   model.safetensors                        (single file), or
//   model.safetensors.index.json + shards    ({"metadata": ..., "weight_map": {name: shard}})
//   tokenizer.model                          (optional, sentencepiece)
// When both weights layouts are present, model.safetensors wins (as in transformers).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace pldr {

class ModelFiles {
  public:
    // Opens and validates: the directory exists, config.json parses (io/config_json rules),
    // the weights files open (io/safetensors rules), and for a sharded checkpoint every shard in
    // the weight_map exists and holds the tensors mapped to it. Errors are one line naming the
    // directory or the file.
    explicit ModelFiles(const std::string& dir);
    ~ModelFiles();
    ModelFiles(const ModelFiles&) = delete;
    ModelFiles& operator=(const ModelFiles&) = delete;

    const Config& config() const { return config_; }
    const std::string& dir() const { return dir_; }
    // <dir>/tokenizer.model if it exists, else "".
    const std::string& tokenizer_path() const { return tokenizer_path_; }
    // <dir>/model.safetensors or <dir>/model.safetensors.index.json.
    const std::string& weights_path() const { return weights_path_; }
    bool sharded() const { return sharded_; }

    bool has(const std::string& name) const { return index_.count(name) != 0; }
    // Throws "<dir>: missing tensor '<name>' (in <weights file>)" when absent.
    const TensorInfo& info(const std::string& name) const;
    // Path of the safetensors file that holds `name` (throws like info()).
    const std::string& file_of(const std::string& name) const;
    // Reads a tensor converted to T (float, double or int64_t) from any numeric dtype.
    template <typename T>
    Tensor<T> read(const std::string& name) const;
    // Converts the tensor straight into dst (its numel values) and drops its file pages.
    template <typename T>
    void read_into(const std::string& name, T* dst) const;
    // Byte offset of the tensor's data in its file (file_of).
    size_t file_offset(const std::string& name) const;
    // Every tensor name, sorted.
    std::vector<std::string> names() const;

  private:
    struct Loc {
        const SafetensorsFile* file;
        const TensorInfo* info;
    };
    const Loc& loc(const std::string& name) const;

    std::string dir_, tokenizer_path_, weights_path_;
    bool sharded_ = false;
    Config config_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Loc> index_;
};

// Writes a model directory: creates `dir` (and parents) if needed, then writes config.json and
// model.safetensors atomically (the latter with __metadata__ {"format": "pt"}, which transformers
// requires). With `check_params` the tensors must be exactly expected_params(cfg) (names, shapes,
// float dtypes; the past_G buffers included for a fixed G), otherwise nothing is written and the
// first problem is thrown.
void save_model_dir(const std::string& dir, const Config& cfg, const SafetensorsWriter& weights,
                    bool check_params = true);

// Creates a directory and its parents (like mkdir -p); throws if it cannot.
void make_dirs(const std::string& dir);

}  // namespace pldr
