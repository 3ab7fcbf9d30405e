// Training checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "io/model_dir.h"
#include "io/model_load.h"
#include "io/safetensors.h"
#include "train/shard.h"

namespace pldr {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNewDir = ".ckpt-new";
constexpr const char* kCommit = "COMMIT";
const char* const kFiles[] = {"model.safetensors", "config.json", kTrainStateFile};

std::string hex64(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%016" PRIx64, v);
    return b;
}

uint64_t parse_hex64(const std::string& s, const std::string& what) {
    PLDR_REQUIRE(!s.empty() && s.size() <= 16 &&
                     s.find_first_not_of("0123456789abcdef") == std::string::npos,
                 what, ": not a 64-bit hex value ('", s, "')");
    return std::stoull(s, nullptr, 16);
}

int64_t parse_i64(const std::string& s, const std::string& what) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    PLDR_REQUIRE(!s.empty() && end && *end == '\0' && errno == 0 &&
                     s.find_first_of(" \t\n+") == std::string::npos,
                 what, ": not an integer ('", s.substr(0, 40), "')");
    return int64_t(v);
}

// FNV-1a of a file, read in pieces (a 110M model is 439 MB).
uint64_t file_fnv(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    PLDR_REQUIRE(f, "cannot open ", path, ": ", std::strerror(errno));
    std::vector<char> buf(size_t(1) << 20);
    uint64_t h = fnv1a64(nullptr, 0);
    while (f) {
        f.read(buf.data(), std::streamsize(buf.size()));
        h = fnv1a64(buf.data(), size_t(f.gcount()), h);
    }
    PLDR_REQUIRE(!f.bad(), "cannot read ", path);
    return h;
}

template <typename T>
constexpr DType dtype_of() {
    return std::is_same_v<T, double> ? DType::F64 : DType::F32;
}

template <typename T>
const char* dtype_flag() {
    return std::is_same_v<T, double> ? "f64" : "f32";
}

}  // namespace

template <typename T>
void save_checkpoint(const std::string& dir, const Model<T>& m, const AdamWState<T>& opt,
                     const CheckpointInfo& info) {
    PLDR_REQUIRE(opt.size() == m.layout.total, "checkpoint: optimizer state has ", opt.size(),
                 " elements, the model ", m.layout.total);
    make_dirs(dir);
    recover_checkpoint(dir);  // never start over a half-done swap
    const fs::path nd = fs::path(dir) / kNewDir;
    std::error_code ec;
    fs::remove_all(nd, ec);
    make_dirs(nd.string());
    save_model(m, nd.string(), dtype_of<T>());
    crash_point("ckpt.model");

    SafetensorsWriter w;
    for (const ParamEntry& e : m.layout.entries) {
        w.add_view_as("optimizer.m." + e.name, dtype_of<T>(), e.shape, opt.m.data() + e.offset);
        w.add_view_as("optimizer.v." + e.name, dtype_of<T>(), e.shape, opt.v.data() + e.offset);
    }
    w.set_metadata("format", kTrainStateFormat);
    w.set_metadata("version", std::to_string(kTrainStateVersion));
    w.set_metadata("step", std::to_string(opt.step));
    w.set_metadata("dtype", dtype_flag<T>());
    w.set_metadata("data_position", std::to_string(info.data.position));
    std::string rng;
    for (size_t i = 0; i < 4; ++i) {
        if (i) rng += ',';
        rng += hex64(info.data.epoch_rng[i]);
    }
    w.set_metadata("data_epoch_rng", rng);
    w.set_metadata("train_shard_fnv1a64", hex64(info.train_shard_fnv));
    w.set_metadata("model_fnv1a64", hex64(file_fnv((nd / "model.safetensors").string())));
    w.set_metadata("options", info.options_json);
    w.set_metadata("world_size", std::to_string(info.world_size));
    w.set_metadata("config", read_file((nd / "config.json").string()));
    w.write((nd / kTrainStateFile).string());
    crash_point("ckpt.state");
    write_file_atomic((nd / kCommit).string(), std::to_string(opt.step) + "\n");
    crash_point("ckpt.commit");
    recover_checkpoint(dir);  // performs the swap
    crash_point("ckpt.done");
}

bool recover_checkpoint(const std::string& dir) {
    const fs::path d(dir), nd = d / kNewDir;
    std::error_code ec;
    if (fs::exists(nd / kCommit)) {
        for (const char* f : kFiles)
            if (fs::exists(nd / f)) {
                fs::rename(nd / f, d / f, ec);
                PLDR_REQUIRE(!ec, dir, ": cannot move the new checkpoint's ", f,
                             " into place: ", ec.message());
                crash_point("ckpt.rename");
            }
        fsync_dir(dir);  // the renames are durable before the marker goes
        fs::remove(nd / kCommit, ec);
        crash_point("ckpt.uncommit");
    }
    if (fs::exists(nd)) {
        fs::remove_all(nd, ec);
        fsync_dir(dir);
    }
    return fs::exists(d / kTrainStateFile);
}

namespace {

// A metadata field of the training state; a missing one is bad input (pldr::Error), never a
// std::out_of_range.
const std::string& state_field(const SafetensorsFile& f, const char* k, const std::string& dir) {
    const auto& md = f.metadata();
    auto it = md.find(k);
    PLDR_REQUIRE(it != md.end(), dir, ": training state lacks '", k, "'");
    return it->second;
}

CheckpointInfo info_from(const SafetensorsFile& f, const std::string& dir) {
    const auto& md = f.metadata();
    auto get = [&](const char* k) -> const std::string& { return state_field(f, k, dir); };
    PLDR_REQUIRE(md.count("format") && md.at("format") == kTrainStateFormat, dir,
                 ": train_state.safetensors is not a pldr training state");
    const int64_t version = parse_i64(get("version"), dir + ": version");
    PLDR_REQUIRE(version == kTrainStateVersion, dir, ": training state version ", version,
                 " is not supported (this pldr reads version ", kTrainStateVersion, ")");
    CheckpointInfo info;
    info.step = parse_i64(get("step"), dir + ": step");
    PLDR_REQUIRE(info.step >= 0, dir, ": negative step");
    info.dtype = get("dtype");
    PLDR_REQUIRE(info.dtype == "f32" || info.dtype == "f64", dir, ": training state dtype '",
                 info.dtype, "' is not f32 or f64");
    info.data.position = parse_i64(get("data_position"), dir + ": data_position");
    PLDR_REQUIRE(info.data.position >= 0, dir, ": negative data_position ", info.data.position);
    const std::string& rng = get("data_epoch_rng");
    size_t i = 0, k = 0;
    for (; k < 4 && i <= rng.size(); ++k) {
        size_t j = rng.find(',', i);
        if (j == std::string::npos) j = rng.size();
        info.data.epoch_rng[k] = parse_hex64(rng.substr(i, j - i), dir + ": data_epoch_rng");
        i = j + 1;
    }
    PLDR_REQUIRE(k == 4 && i == rng.size() + 1, dir, ": data_epoch_rng must hold 4 words");
    PLDR_REQUIRE(info.data.epoch_rng[0] | info.data.epoch_rng[1] | info.data.epoch_rng[2] |
                     info.data.epoch_rng[3],
                 dir, ": data_epoch_rng is all zero (not a state the generator can reach)");
    info.train_shard_fnv = parse_hex64(get("train_shard_fnv1a64"), dir + ": train_shard_fnv1a64");
    info.options_json = get("options");
    if (md.count("world_size")) {
        info.world_size = parse_i64(md.at("world_size"), dir + ": world_size");
        PLDR_REQUIRE(info.world_size >= 1, dir, ": world_size must be >= 1");
    }
    return info;
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& dir) {
    const std::string p = (fs::path(dir) / kTrainStateFile).string();
    PLDR_REQUIRE(fs::exists(p), dir, ": not a training checkpoint (no ", kTrainStateFile, ")");
    SafetensorsFile f(p);
    return info_from(f, dir);
}

template <typename T>
CheckpointInfo load_checkpoint(const std::string& dir, Model<T>* m, AdamWState<T>* opt) {
    PLDR_REQUIRE(fs::is_directory(dir), dir, ": checkpoint directory does not exist");
    recover_checkpoint(dir);
    const std::string p = (fs::path(dir) / kTrainStateFile).string();
    PLDR_REQUIRE(fs::exists(p), dir, ": not a training checkpoint (no ", kTrainStateFile, ")");
    SafetensorsFile f(p);
    CheckpointInfo info = info_from(f, dir);
    PLDR_REQUIRE(info.dtype == dtype_flag<T>(), dir, ": the checkpoint was trained with --dtype ",
                 info.dtype, ", not ", dtype_flag<T>());
    const std::string mp = (fs::path(dir) / "model.safetensors").string();
    PLDR_REQUIRE(fs::exists(mp), dir, ": checkpoint has no model.safetensors");
    PLDR_REQUIRE(hex64(file_fnv(mp)) == state_field(f, "model_fnv1a64", dir), dir,
                 ": model.safetensors does not belong to the training state (it was changed or "
                 "replaced after the checkpoint was written)");
    {
        // A resume continues from the exact bits: the weights must be stored in the compute
        // dtype the state says, not converted from another one.
        SafetensorsFile mf(mp);
        for (const TensorInfo& t : mf.tensors())
            PLDR_REQUIRE(!dtype_is_float(t.dtype) || t.dtype == dtype_of<T>(), dir,
                         ": model.safetensors stores '", t.name, "' as ", dtype_name(t.dtype),
                         " but the training state's dtype is ", info.dtype);
    }
    *m = load_model<T>(dir);
    const std::string cfg_text = read_file((fs::path(dir) / "config.json").string());
    PLDR_REQUIRE(state_field(f, "config", dir) == cfg_text, dir,
                 ": config.json does not match the training state's config");
    AdamWState<T> o(m->layout.total);
    for (const ParamEntry& e : m->layout.entries)
        for (int which = 0; which < 2; ++which) {
            const std::string name = (which ? "optimizer.v." : "optimizer.m.") + e.name;
            const TensorInfo* ti = f.find(name);
            PLDR_REQUIRE(ti, dir, ": training state lacks '", name, "'");
            PLDR_REQUIRE(ti->shape == e.shape && ti->dtype == dtype_of<T>(), dir, ": '", name,
                         "' is ", dtype_name(ti->dtype), " ", shape_str(ti->shape),
                         ", the model needs ", dtype_name(dtype_of<T>()), " ", shape_str(e.shape));
            Tensor<T> t = f.read<T>(name);
            std::copy(t.data.begin(), t.data.end(), (which ? o.v.begin() : o.m.begin()) + e.offset);
        }
    PLDR_REQUIRE(int64_t(f.tensors().size()) == 2 * int64_t(m->layout.entries.size()), dir,
                 ": training state has ", f.tensors().size(), " tensors, the model needs ",
                 2 * m->layout.entries.size());
    o.step = info.step;
    *opt = std::move(o);
    return info;
}

template void save_checkpoint<float>(const std::string&, const Model<float>&,
                                     const AdamWState<float>&, const CheckpointInfo&);
template void save_checkpoint<double>(const std::string&, const Model<double>&,
                                      const AdamWState<double>&, const CheckpointInfo&);
template CheckpointInfo load_checkpoint<float>(const std::string&, Model<float>*,
                                               AdamWState<float>*);
template CheckpointInfo load_checkpoint<double>(const std::string&, Model<double>*,
                                                AdamWState<double>*);

}  // namespace pldr
