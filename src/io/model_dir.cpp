// Model directories (see model_dir.h).
#include "io/model_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "io/param_names.h"

namespace pldr {

namespace {

std::string join(const std::string& dir, const std::string& name) {
    if (dir.empty()) return name;
    return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// JSON files of a model directory are small; a huge one is refused before it is read.
constexpr uintmax_t kMaxJsonFileBytes = uintmax_t(64) << 20;

void check_json_size(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && uintmax_t(st.st_size) > kMaxJsonFileBytes)
        fail(path, ": ", uintmax_t(st.st_size), " bytes, more than the limit of ",
             kMaxJsonFileBytes, " bytes for a JSON file of a model directory");
}

bool is_dir(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A shard file name from an index: relative, without "..".
bool safe_relative(const std::string& f) {
    if (f.empty() || f[0] == '/') return false;
    size_t start = 0;
    while (start <= f.size()) {
        size_t end = f.find('/', start);
        if (end == std::string::npos) end = f.size();
        std::string part = f.substr(start, end - start);
        if (part == "..") return false;
        start = end + 1;
    }
    return true;
}

}  // namespace

void make_dirs(const std::string& dir) {
    if (dir.empty() || is_dir(dir)) return;
    size_t slash = dir.find_last_of('/', dir.size() > 1 ? dir.size() - 2 : 0);
    if (slash != std::string::npos && slash > 0) make_dirs(dir.substr(0, slash));
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        fail("cannot create directory ", dir, ": ", std::strerror(errno));
    if (!is_dir(dir)) fail("cannot create directory ", dir, ": a file is in the way");
}

ModelFiles::ModelFiles(const std::string& dir) : dir_(dir) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0)
        fail("model directory ", dir, " does not exist (", std::strerror(errno), ")");
    if (!S_ISDIR(st.st_mode)) fail("model directory ", dir, " is not a directory");
    const std::string cfg_path = join(dir, "config.json");
    if (!file_exists(cfg_path)) fail(dir, ": no config.json in the model directory");
    check_json_size(cfg_path);
    config_ = load_config(cfg_path);

    const std::string single = join(dir, "model.safetensors");
    const std::string index = join(dir, "model.safetensors.index.json");
    if (file_exists(single)) {
        weights_path_ = single;
        files_.push_back(std::make_unique<SafetensorsFile>(single));
        for (const auto& t : files_[0]->tensors()) index_[t.name] = Loc{files_[0].get(), &t};
    } else if (file_exists(index)) {
        weights_path_ = index;
        sharded_ = true;
        check_json_size(index);
        nlohmann::json j = parse_json_strict_map(read_file(index), index);
        if (!j.is_object()) fail(index, ": not a JSON object");
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
            fail(index, ": no 'weight_map' object");
        const auto& wm = j["weight_map"];
        if (wm.empty()) fail(index, ": 'weight_map' is empty");
        std::map<std::string, const SafetensorsFile*> shards;
        for (auto it = wm.begin(); it != wm.end(); ++it) {
            const std::string& name = it.key();
            if (!it.value().is_string())
                fail(index, ": weight_map entry for tensor '", name, "' is not a file name");
            const std::string shard = it.value().get<std::string>();
            if (!safe_relative(shard))
                fail(index, ": weight_map entry for tensor '", name, "' names '", shard,
                     "', which is not a relative path inside the directory");
            auto s = shards.find(shard);
            if (s == shards.end()) {
                const std::string sp = join(dir, shard);
                if (!file_exists(sp))
                    fail(index, ": shard '", shard, "' (holding tensor '", name,
                         "') is missing from ", dir);
                files_.push_back(std::make_unique<SafetensorsFile>(sp));
                s = shards.emplace(shard, files_.back().get()).first;
            }
            const TensorInfo* t = s->second->find(name);
            if (!t)
                fail(index, ": tensor '", name, "' is mapped to shard '", shard,
                     "', which does not contain it");
            index_[name] = Loc{s->second, t};
        }
    } else {
        fail(dir, ": no model.safetensors or model.safetensors.index.json in the model directory");
    }

    const std::string tok = join(dir, "tokenizer.model");
    if (file_exists(tok)) tokenizer_path_ = tok;
}

ModelFiles::~ModelFiles() = default;

const ModelFiles::Loc& ModelFiles::loc(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end())
        fail(dir_, ": missing tensor '", name, "' (not in ", weights_path_, ")");
    return it->second;
}

const TensorInfo& ModelFiles::info(const std::string& name) const {
    return *loc(name).info;
}

const std::string& ModelFiles::file_of(const std::string& name) const {
    return loc(name).file->path();
}

template <typename T>
Tensor<T> ModelFiles::read(const std::string& name) const {
    const Loc& l = loc(name);
    Tensor<T> out(l.info->shape);
    convert_to<T>(l.info->dtype, l.file->raw(*l.info), out.numel(), out.ptr());
    return out;
}
template <typename T>
void ModelFiles::read_into(const std::string& name, T* dst) const {
    const Loc& l = loc(name);
    l.file->read_into<T>(*l.info, dst);
}
template void ModelFiles::read_into<float>(const std::string&, float*) const;
template void ModelFiles::read_into<double>(const std::string&, double*) const;

template Tensor<float> ModelFiles::read<float>(const std::string&) const;
template Tensor<double> ModelFiles::read<double>(const std::string&) const;
template Tensor<int64_t> ModelFiles::read<int64_t>(const std::string&) const;

size_t ModelFiles::file_offset(const std::string& name) const {
    const Loc& l = loc(name);
    return l.file->data_offset() + l.info->begin;
}

std::vector<std::string> ModelFiles::names() const {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& [n, l] : index_) out.push_back(n);
    return out;
}

void save_model_dir(const std::string& dir, const Config& cfg, const SafetensorsWriter& weights,
                    bool check_params) {
    const std::string cfg_path = join(dir, "config.json");
    const std::string st_path = join(dir, "model.safetensors");
    validate_config(cfg, cfg_path);
    if (check_params) {
        std::vector<std::string> p = param_problems(cfg, weights.infos(), st_path);
        if (!p.empty()) {
            if (p.size() == 1) throw Error(p[0]);
            fail(p[0], " (and ", p.size() - 1, " more problem", p.size() > 2 ? "s" : "", ")");
        }
    }
    make_dirs(dir);
    // Each file is replaced atomically; the weights go first so that a config.json never
    // appears in a new directory before its model.safetensors.
    weights.write(st_path, {{"format", "pt"}});
    write_file_atomic(cfg_path, config_to_json(cfg));
}

}  // namespace pldr
