// Every row of docs/errors.md: a bad input (file, field, value) given to the `pldr` command and
// the error it must get (exit code, and a text the one-line message contains). The rows of the
// document and the cases here are the same set (checked by ErrorsTable.DocumentMatchesTests).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli_util.h"
#include "train/shard.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

const std::string kSrc = PLDR_SOURCE_DIR;
const std::string kLearned = kSrc + "/tests/golden/models/a_tiny_v510.f32";
const std::string kFixed = kSrc + "/tests/golden/models/c_tiny_v510G_identity.f32";

std::string work() {
    static const std::string w = cli_test::tmp_dir("errors_table");
    return w;
}

std::string q(const std::string& s) {
    return "'" + s + "'";
}

void write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
}

std::string copy_dir(const std::string& from, const std::string& name) {
    const std::string d = work() + "/" + name;
    fs::remove_all(d);
    fs::copy(from, d, fs::copy_options::recursive);
    for (auto& e : fs::directory_iterator(d))
        fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    return d;
}

void set_config(const std::string& dir, const std::string& key, const json& v) {
    json j = json::parse(cli_test::slurp(dir + "/config.json"));
    j[key] = v;
    write(dir + "/config.json", j.dump(2));
}

// safetensors: header JSON and data section.
struct St {
    json header;
    std::string data;
};
St read_st(const std::string& p) {
    const std::string b = cli_test::slurp(p);
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    return {json::parse(b.substr(8, n)), b.substr(8 + n)};
}
std::string st_bytes(const std::string& header, const std::string& data) {
    const uint64_t n = header.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}
void write_st(const std::string& p, const St& s) {
    write(p, st_bytes(s.header.dump(), s.data));
}

// A G-cache written by pldr generate (learned-G model), copied for editing.
std::string gcache(const std::string& name) {
    static const std::string base = [] {
        const std::string p = work() + "/base.gcache.safetensors";
        auto r = cli_test::run("generate " + q(kLearned) +
                               " --ids 5,17,3 -n 1 --greedy --save-g-cache " + q(p));
        EXPECT_EQ(r.code, 0) << r.err;
        return p;
    }();
    const std::string p = work() + "/" + name + ".safetensors";
    fs::copy_file(base, p, fs::copy_options::overwrite_existing);
    return p;
}

// A packed shard of a_tiny's vocabulary (50) and a 2-step training checkpoint on it.
std::string data_dir() {
    static const std::string d = [] {
        const std::string dd = work() + "/data";
        fs::create_directories(dd);
        std::vector<int64_t> t;
        for (int i = 0; i < 9 * 24; ++i) t.push_back((11 * i + i / 7) % 50);
        pldr::write_shard(dd + "/train.pldrtok", t, 50, 9);
        return dd;
    }();
    return d;
}
std::string checkpoint(const std::string& name) {
    static const std::string base = [] {
        const std::string c = work() + "/ckpt-base";
        auto r = cli_test::run("train --config " + q(kLearned + "/config.json") + " --data " +
                               q(data_dir()) + " --out " + q(c) +
                               " --steps 4 --batch 2 --stop-at 2 --eval-batches 1");
        EXPECT_EQ(r.code, 0) << r.err;
        return c;
    }();
    return copy_dir(base, name);
}
void edit_state(const std::string& ck, const std::function<void(json& meta)>& f) {
    St s = read_st(ck + "/train_state.safetensors");
    f(s.header["__metadata__"]);
    write_st(ck + "/train_state.safetensors", s);
}
// A q8_0 conversion of a_tiny (pldr convert), copied for editing; `edit` rewrites its
// model.safetensors tensor by tensor (name → header entry and bytes; offsets are recomputed).
std::string q8_model(const std::string& name) {
    static const std::string base = [] {
        const std::string p = work() + "/q8-base";
        auto r = cli_test::run("convert " + q(kLearned) + " --dtype q8 --out " + q(p));
        EXPECT_EQ(r.code, 0) << r.err;
        return p;
    }();
    return copy_dir(base, name);
}
using Tensors = std::map<std::string, std::pair<json, std::string>>;
std::string q8_edit(const std::string& name, const std::function<void(Tensors&)>& edit) {
    const std::string d = q8_model(name);
    const St s = read_st(d + "/model.safetensors");
    Tensors t;
    for (auto it = s.header.begin(); it != s.header.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
        t[it.key()] = {it.value(), s.data.substr(b, e - b)};
    }
    edit(t);
    St o;
    o.header["__metadata__"] = s.header["__metadata__"];
    for (auto& [n, v] : t) {
        v.first["data_offsets"] = {o.data.size(), o.data.size() + v.second.size()};
        o.header[n] = v.first;
        o.data += v.second;
    }
    write_st(d + "/model.safetensors", o);
    return d;
}
std::string q8_config(const std::string& name, const json& quantization) {
    const std::string d = q8_model(name);
    json j = json::parse(cli_test::slurp(d + "/config.json"));
    if (quantization.is_null())
        j.erase("quantization");
    else
        j["quantization"] = quantization;
    write(d + "/config.json", j.dump(2));
    return d;
}
const std::string kW3 = "decoder.dec_layers.1.ffn.gluw3.weight";

// The working directory of the next command ("" = the test's): a case that runs pldr from
// inside a model directory sets it through in_dir().
std::string g_cwd;
std::string in_dir(const std::string& dir, const std::string& args) {
    g_cwd = dir;
    return args;
}

std::string resume(const std::string& ck) {
    return "train --resume " + q(ck) + " --data " + q(data_dir()) + " --out " + q(ck);
}

struct Case {
    Case(std::string i, std::function<std::string()> a, std::string n, int c = 1,
         std::string e = "")
        : id(std::move(i)), args(std::move(a)), needle(std::move(n)), code(c), env(std::move(e)) {}
    std::string id;
    std::function<std::string()> args;  // sets up the files, returns the pldr arguments
    std::string needle;
    int code;
    std::string env;  // NAME=VALUE set in the environment of the command
};

std::vector<Case> cases() {
    std::vector<Case> c;
    auto dump = [](const std::string& d, const std::string& out) {
        return "dump " + q(d) + " --tokens 1,2,3 --out " + q(out);
    };
    // --- outputs that would overwrite inputs ---
    c.push_back({"OVR-dump-weights",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr1");
                     return dump(d, d + "/model.safetensors");
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-dump-config",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr2");
                     return dump(d, d + "/config.json");
                 },
                 "config.json would overwrite the input"});
    c.push_back({"OVR-dump-npy-dir",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr3");
                     return dump(d, d);
                 },
                 "is the input directory"});
    c.push_back({"OVR-dump-symlink",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr4");
                     fs::remove(work() + "/ovr4-link.safetensors");
                     fs::create_symlink(d + "/model.safetensors",
                                        work() + "/ovr4-link.safetensors");
                     return dump(d, work() + "/ovr4-link.safetensors");
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-dump-hardlink",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr5");
                     fs::remove(work() + "/ovr5-hard.safetensors");
                     fs::create_hard_link(d + "/model.safetensors",
                                          work() + "/ovr5-hard.safetensors");
                     return dump(d, work() + "/ovr5-hard.safetensors");
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-grad-weights",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr6");
                     return "grad " + q(d) + " --tokens 1,2,3 --out " + q(d + "/model.safetensors");
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-generate-gcache",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr7");
                     return "generate " + q(d) + " --ids 1,2 -n 1 --greedy --save-g-cache " +
                            q(d + "/model.safetensors");
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-collapse-self",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr8");
                     return "collapse " + q(d) + " --out " + q(d);
                 },
                 "is the input directory"});
    c.push_back({"OVR-convert-self",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-convert");
                     return "convert " + q(d) + " --dtype q8 --out " + q(d);
                 },
                 "is the input directory"});
    c.push_back({"OVR-collapse-link",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr9");
                     fs::remove(work() + "/ovr9-link");
                     fs::create_directory_symlink(d, work() + "/ovr9-link");
                     return "collapse " + q(d) + " --out " + q(work() + "/ovr9-link");
                 },
                 "is the input directory"});
    c.push_back({"OVR-train-model-dir",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr10");
                     return "train --config " + q(kLearned + "/config.json") + " --data " +
                            q(data_dir()) + " --out " + q(d) + " --steps 2 --batch 2";
                 },
                 "is a model directory; writing there would replace it"});
    // --- the output rule: an empty path, an existing model directory or checkpoint ---
    // Run from inside the model directory: an empty --out used to write there (collapse and
    // convert replaced the model, exit 0), or nowhere (audit: "wrote /audit.json"), or crash
    // (dump: exit 2).
    c.push_back({"OVR-collapse-empty",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-e1");
                     return in_dir(d, "collapse . --out ''");
                 },
                 "--out: is empty: give an output path"});
    c.push_back({"OVR-convert-empty",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-e2");
                     return in_dir(d, "convert . --dtype q8 --out ''");
                 },
                 "--out: is empty: give an output path"});
    c.push_back({"OVR-audit-empty",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-e3");
                     return in_dir(d, "audit . --steps 1 --cont-len 1 --out ''");
                 },
                 "--out: is empty: give an output path"});
    c.push_back({"OVR-dump-empty",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-e4");
                     return in_dir(d, "dump . --tokens 1,2,3 --out ''");
                 },
                 "--out: is empty: give an output path"});
    c.push_back({"OVR-convert-model-dir",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-m1");
                     return "convert " + q(kLearned) + " --dtype q8 --out " + q(d);
                 },
                 "is a model directory; writing there would replace it"});
    c.push_back({"OVR-collapse-checkpoint",
                 [&] { return "collapse " + q(kLearned) + " --out " + q(checkpoint("ovr-m2")); },
                 "is a pldr training checkpoint; writing there would replace it"});
    c.push_back({"OVR-train-checkpoint",
                 [&] {
                     return "train --config " + q(kLearned + "/config.json") + " --data " +
                            q(data_dir()) + " --out " + q(checkpoint("ovr-m3")) +
                            " --steps 2 --batch 2";
                 },
                 "is a pldr training checkpoint; writing there would replace it"});
    c.push_back({"OVR-generate-gcache-model",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr-m4");
                     return "generate " + q(kLearned) + " --ids 1,2 -n 1 --greedy --save-g-cache " +
                            q(d + "/model.safetensors");
                 },
                 "would replace a file of a model directory"});
    c.push_back({"OVR-train-config",
                 [&] {
                     auto d = copy_dir(kLearned, "ovr11");
                     fs::remove(d + "/model.safetensors");
                     return "train --config " + q(d + "/config.json") + " --data " + q(data_dir()) +
                            " --out " + q(d) + " --steps 2 --batch 2";
                 },
                 "config.json would overwrite the input"});
    c.push_back({"OVR-score-requests",
                 [&] {
                     const std::string r = work() + "/ovr12.jsonl";
                     write(r, "{\"context_ids\":[1,2],\"continuation_ids\":[3]}\n");
                     return "score " + q(kLearned) + " --requests " + q(r) + " --out " + q(r);
                 },
                 "would overwrite the input"});
    c.push_back({"OVR-plot-metrics",
                 [&] {
                     const std::string m = work() + "/ovr13.jsonl";
                     write(m, "{\"type\":\"train\",\"step\":1,\"loss\":2.0}\n");
                     return "plot " + q(m) + " --out " + q(m);
                 },
                 "would overwrite the input"});
    // --- sizes whose products or sums overflow int64 (core/error.h checked_mul, checked_add) ---
    c.push_back({"SIZE-perplexity-batches-overflow",
                 [&] {
                     return "perplexity " + q(kLearned) + " --data " + q(data_dir()) +
                            " --split train --batch 2 --batches 9223372036854775807";
                 },
                 "the batches' chunks (batches x batch) is too large: 9223372036854775807 x 2"});
    c.push_back({"SIZE-train-eval-batches-overflow",
                 [&] {
                     fs::remove_all(work() + "/size-train");
                     return "train --config " + q(kLearned + "/config.json") + " --data " +
                            q(data_dir()) + " --out " + q(work() + "/size-train") +
                            " --steps 2 --batch 4 --eval-batches 2305843009213693952";
                 },
                 "a validation's chunks (--eval-batches x ranks x --batch) is too large"});
    c.push_back({"SIZE-generate-n-overflow",
                 [&] { return "generate " + q(kLearned) + " --ids 1,2 -n 9223372036854775807"; },
                 "the prompt plus -n new tokens is too large: 2 + 9223372036854775807"});
    // --- unbounded sizes ---
    // Beyond the config limits (model/config.h): refused by the validator; within them, the
    // loader compares the tensor count the config implies with the file before building names.
    for (const auto& [key, v] :
         std::vector<std::pair<std::string, int64_t>>{{"num_hidden_layers", 1000},
                                                      {"num_hidden_layers", 100000},
                                                      {"num_hidden_layers", 2147483647},
                                                      {"num_reslayerA", 2147483647},
                                                      {"num_denseA", 2147483647}}) {
        c.push_back({"SIZE-" + key + "-" + std::to_string(v),
                     [key, v] {
                         auto d = copy_dir(kLearned, "size-" + key + std::to_string(v));
                         set_config(d, key, v);
                         return "inspect " + q(d);
                     },
                     v == 1000 ? "tensors (num_hidden_layers"
                               : "key '" + key + "' must be a positive integer of at most"});
    }
    c.push_back({"SIZE-header-limit",
                 [&] {
                     // A sparse file: a 101 MiB header is refused before it is read.
                     const std::string p = work() + "/big.safetensors";
                     write(p, "");
                     fs::resize_file(p, (101u << 20) + 16);
                     std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
                     const uint64_t n = 101u << 20;
                     f.write(reinterpret_cast<const char*>(&n), 8);
                     f.close();
                     auto d = copy_dir(kLearned, "size-header");
                     fs::remove(d + "/model.safetensors");
                     fs::create_symlink(p, d + "/model.safetensors");
                     return "inspect " + q(d);
                 },
                 "exceeds the limit of 104857600 bytes"});
    c.push_back(
        {"SIZE-rank",
         [&] {
             const std::string p = work() + "/rank.safetensors";
             write(p,
                   st_bytes(
                       R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
                       std::string(4, '\0')));
             return "generate " + q(kLearned) + " --ids 1 -n 1 --greedy --g-cache " + q(p);
         },
         "rank 9, more than the limit of 8"});
    c.push_back({"SIZE-numel-vs-file",
                 [&] {
                     auto d = copy_dir(kLearned, "size-numel");
                     St s = read_st(d + "/model.safetensors");
                     s.header["final_layer.bias"]["shape"] = {1000000000};
                     write_st(d + "/model.safetensors", s);
                     return "inspect " + q(d);
                 },
                 "needs 4000000000"});
    c.push_back({"SIZE-json-depth",
                 [&] {
                     auto d = copy_dir(kLearned, "size-depth");
                     write(d + "/config.json", std::string(100, '[') + std::string(100, ']'));
                     return "inspect " + q(d);
                 },
                 "nested deeper than 64 levels"});
    c.push_back({"SIZE-jsonl-line",
                 [&] {
                     const std::string r = work() + "/long.jsonl";
                     write(r, "{\"context\":\"" + std::string(17u << 20, 'a') +
                                  "\",\"continuation\":\"b\"}\n");
                     return "score " + q(kLearned) + " --requests " + q(r);
                 },
                 "exceeds the limit of 16777216 bytes"});
    // --- non-finite results ---
    c.push_back({"NAN-weight-dump",
                 [&] {
                     auto d = copy_dir(kLearned, "nan1");
                     St s = read_st(d + "/model.safetensors");
                     const auto off =
                         s.header["decoder.embedding.weight"]["data_offsets"][0].get<size_t>();
                     const float nan = std::numeric_limits<float>::quiet_NaN();
                     std::memcpy(s.data.data() + off + 4 * 16, &nan, 4);  // token 1, element 0
                     write_st(d + "/model.safetensors", s);
                     return dump(d, work() + "/nan1.safetensors");
                 },
                 "non-finite values; they first appear in fwd.embed_ln"});
    c.push_back({"NAN-weight-score",
                 [&] {
                     auto d = copy_dir(kLearned, "nan2");
                     St s = read_st(d + "/model.safetensors");
                     const auto off = s.header["final_layer.bias"]["data_offsets"][0].get<size_t>();
                     const float inf = std::numeric_limits<float>::infinity();
                     std::memcpy(s.data.data() + off, &inf, 4);
                     write_st(d + "/model.safetensors", s);
                     const std::string r = work() + "/nan2.jsonl";
                     write(r, "{\"context_ids\":[1,2],\"continuation_ids\":[3]}\n");
                     return "score " + q(d) + " --requests " + q(r);
                 },
                 "non-finite logits"});
    c.push_back(
        {"NAN-weight-grad",
         [&] {
             auto d = copy_dir(kLearned, "nan3");
             St s = read_st(d + "/model.safetensors");
             const auto off =
                 s.header["decoder.dec_layers.1.ffn.gluw1.weight"]["data_offsets"][0].get<size_t>();
             const float nan = std::numeric_limits<float>::quiet_NaN();
             std::memcpy(s.data.data() + off, &nan, 4);
             write_st(d + "/model.safetensors", s);
             return "grad " + q(d) + " --tokens 1,2,3 --out " + q(work() + "/nan3.safetensors");
         },
         "non-finite values first appear in fwd.layer1.ffn_out"});
    c.push_back({"NAN-rope-theta-dump",
                 [&] {
                     auto d = copy_dir(kLearned, "nan4");
                     set_config(d, "rope_theta", 1e-100);
                     return dump(d, work() + "/nan4.safetensors");
                 },
                 "non-finite values; they first appear in fwd.layer0.q_rope"});
    // --- metadata read but not checked before ---
    auto gmeta = [&](const std::string& name, const std::function<void(St&)>& f) {
        return [=] {
            const std::string p = gcache(name);
            St s = read_st(p);
            f(s);
            write_st(p, s);
            return "generate " + q(kLearned) + " --ids 1,2 -n 1 --greedy --g-cache " + q(p);
        };
    };
    c.push_back({"META-gcache-format",
                 gmeta("g1", [](St& s) { s.header["__metadata__"]["format"] = "pldr-gcache-9"; }),
                 "G-cache format 'pldr-gcache-9' is not supported"});
    c.push_back({"META-gcache-no-format",
                 gmeta("g2", [](St& s) { s.header["__metadata__"].erase("format"); }),
                 "not a pldr G-cache (no 'format'"});
    // --- q8_0 models (pldr convert --dtype q8) ---
    auto inspect = [](const std::string& d) { return "inspect " + q(d); };
    c.push_back(
        {"QUANT-scale-missing",
         [=] { return inspect(q8_edit("q8a", [](Tensors& t) { t.erase(kW3 + ".q8_scale"); })); },
         "missing tensor '" + kW3 + ".q8_scale' (q8_0 scales of"});
    c.push_back({"QUANT-scale-shape",
                 [=] {
                     return inspect(q8_edit("q8b", [](Tensors& t) {
                         t[kW3 + ".q8_scale"].first["shape"] = {2, 16};
                     }));
                 },
                 "has shape [2,16] but config.json implies [16,2] (one scale per block of 32 "
                 "inputs)"});
    c.push_back({"QUANT-scale-dtype",
                 [=] {
                     return inspect(q8_edit(
                         "q8c", [](Tensors& t) { t[kW3 + ".q8_scale"].first["dtype"] = "I32"; }));
                 },
                 "has dtype I32 but q8_0 scales are F32 or F16"});
    c.push_back({"QUANT-values-dtype",
                 [=] {
                     return inspect(
                         q8_edit("q8d", [](Tensors& t) { t[kW3 + ".q8"].first["dtype"] = "U8"; }));
                 },
                 "has dtype U8 but q8_0 values are I8"});
    c.push_back({"QUANT-both",
                 [=] {
                     return inspect(q8_edit("q8e", [](Tensors& t) {
                         json h = {{"dtype", "F32"}, {"shape", {16, 42}}};
                         t[kW3] = {h, std::string(16 * 42 * 4, '\0')};
                     }));
                 },
                 "is stored both as float and as q8_0"});
    auto bad_scale = [](const std::string& name, float v) {
        return [name, v] {
            const std::string d = q8_edit(name, [v](Tensors& t) {
                std::memcpy(t[kW3 + ".q8_scale"].second.data() + 4 * 3, &v, 4);  // [1,1]
            });
            return "generate " + q(d) + " --ids 1,2 -n 1";
        };
    };
    c.push_back({"QUANT-scale-nan", bad_scale("q8f", NAN),
                 "holds a non-finite scale (nan at row 1, block 1"});
    c.push_back({"QUANT-scale-negative", bad_scale("q8g", -1.0f),
                 "holds a negative scale (-1 at row 1, block 1"});
    c.push_back({"QUANT-method",
                 [=] {
                     return inspect(q8_config("q8h", {{"method", "q4_0"}, {"block", 32}}));
                 },
                 "key 'quantization' has method 'q4_0', which pldr does not read (only q8_0)"});
    c.push_back({"QUANT-block",
                 [=] {
                     return inspect(q8_config("q8i", {{"method", "q8_0"}, {"block", 64}}));
                 },
                 "key 'quantization' has block number 64 but q8_0 blocks hold 32 weights"});
    c.push_back({"QUANT-no-entry", [=] { return inspect(q8_config("q8j", nullptr)); },
                 "holds q8_0 data but config.json has no \"quantization\" entry"});
    c.push_back({"QUANT-grad",
                 [=] {
                     return "grad " + q(q8_model("q8k")) + " --tokens 1,2,3 --out " +
                            q(work() + "/q8k.safetensors");
                 },
                 "gradients and training need float weights"});
    c.push_back({"META-gcache-heads",
                 gmeta("g3", [](St& s) { s.header["__metadata__"]["num_heads"] = "3"; }),
                 "G-cache shape: num_heads '3' does not match the model's 2"});
    c.push_back({"META-gcache-layers",
                 gmeta("g4", [](St& s) { s.header["__metadata__"]["num_layers"] = "7"; }),
                 "G-cache shape: num_layers '7' does not match the model's 2"});
    c.push_back({"META-gcache-extra-tensor",
                 gmeta("g5",
                       [](St& s) {
                           auto e = s.header["gcache.layer0.A_P"];
                           s.header.erase("gcache.layer0.A_P");
                           s.header["gcache.layer9.A_P"] = e;
                       }),
                 "unexpected tensor 'gcache.layer9.A_P'"});
    c.push_back({"META-gcache-nan",
                 gmeta("g6",
                       [](St& s) {
                           const auto off =
                               s.header["gcache.layer1.G_LM"]["data_offsets"][0].get<size_t>();
                           const float nan = std::numeric_limits<float>::quiet_NaN();
                           std::memcpy(s.data.data() + off, &nan, 4);
                       }),
                 "'gcache.layer1.G_LM' holds a non-finite value"});
    auto state = [&](const std::string& name, const std::function<void(json&)>& f) {
        return [=] {
            auto ck = checkpoint(name);
            edit_state(ck, f);
            return resume(ck);
        };
    };
    auto opt = [](const std::string& k, const json& v) {
        return [=](json& m) {
            json o = json::parse(m["options"].get<std::string>());
            o[k] = v;
            m["options"] = o.dump();
        };
    };
    c.push_back({"META-state-clip", state("s1", opt("clip", "bogus")),
                 "option 'clip' 'bogus' is not a clip mode"});
    c.push_back({"META-state-position", state("s2", [](json& m) { m["data_position"] = "999999"; }),
                 "data_position 999999 disagrees with step 2"});
    c.push_back({"META-state-position-negative",
                 state("s3", [](json& m) { m["data_position"] = "-4"; }),
                 "negative data_position -4"});
    // A resume takes the state's dtype (no --dtype given): the model file then disagrees.
    c.push_back({"META-state-dtype", state("s4", [](json& m) { m["dtype"] = "f64"; }),
                 "as F32 but the training state's dtype is f64"});
    c.push_back({"META-state-dtype-unknown", state("s5", [](json& m) { m["dtype"] = "f16"; }),
                 "training state dtype 'f16' is not f32 or f64"});
    c.push_back({"META-state-options-dtype", state("s6", opt("dtype", "f64")),
                 "options say dtype f64 but its metadata says f32"});
    c.push_back(
        {"META-state-rng-zero",
         state("s7",
               [](json& m) {
                   m["data_epoch_rng"] =
                       "0000000000000000,0000000000000000,0000000000000000,0000000000000000";
               }),
         "data_epoch_rng is all zero"});
    c.push_back({"META-state-batch-type", state("s8", opt("batch", 2.5)),
                 "option 'batch' is not an integer"});
    c.push_back({"META-state-lr-type", state("s9", opt("lr", "fast")),
                 "option 'lr' is not a finite number"});
    // --- other file formats ---
    c.push_back({"FMT-piqa-label",
                 [&] {
                     const std::string j = work() + "/piqa.jsonl", l = work() + "/piqa.lst";
                     write(j, "{\"goal\":\"g\",\"sol1\":\"a\",\"sol2\":\"b\"}\n");
                     write(l, "2\n");
                     return "eval " + q(kSrc + "/tests/golden/eval/models/eval_v510_s2024") +
                            " piqa --data " + q(j) + " --labels " + q(l);
                 },
                 "label must be 0 or 1 (got '2')"});
    c.push_back({"FMT-truthfulqa-label",
                 [&] {
                     const std::string j = work() + "/tqa.json";
                     write(j, R"([{"question":"q","mc1_targets":{"a":5},"mc2_targets":{"a":1}}])");
                     return "eval " + q(kSrc + "/tests/golden/eval/models/eval_v510_s2024") +
                            " truthfulqa --data " + q(j);
                 },
                 "has a label that is not 0 or 1"});
    c.push_back({"FMT-request-negative-id",
                 [&] {
                     const std::string r = work() + "/neg.jsonl";
                     write(r, "{\"context_ids\":[1,-2],\"continuation_ids\":[3]}\n");
                     return "score " + q(kLearned) + " --requests " + q(r);
                 },
                 "context_ids must be non-negative token ids"});
    c.push_back({"FMT-request-duplicate-key",
                 [&] {
                     const std::string r = work() + "/dup.jsonl";
                     write(r,
                           "{\"context_ids\":[1],\"context_ids\":[2],\"continuation_ids\":[3]}\n");
                     return "score " + q(kLearned) + " --requests " + q(r);
                 },
                 "duplicate key 'context_ids'"});
    // --- exit codes of internal errors (simulated) ---
    c.push_back({"EXIT-internal-check", [] { return std::string("inspect x"); },
                 "internal error: internal check failed", 2, "PLDR_TEST_FAULT=internal"});
    c.push_back({"EXIT-std-exception", [] { return std::string("inspect x"); },
                 "internal error: simulated logic error", 2, "PLDR_TEST_FAULT=exception"});
    c.push_back({"EXIT-signal", [] { return std::string("inspect x"); }, "internal error: SIGSEGV",
                 2, "PLDR_TEST_FAULT=segv"});
    c.push_back({"EXIT-usage", [] { return std::string("dump --no-such-option"); }, "error:", 1});
    c.push_back({"SERVE-ctx", [] { return "serve " + q(kLearned) + " --ctx 100000"; },
                 "--ctx must be in [0, 64]", 1});
    c.push_back({"SERVE-parallel", [] { return "serve " + q(kLearned) + " --parallel 0 --port 0"; },
                 "--parallel: must be in [1, 256] (got 0)", 1});
    c.push_back({"SERVE-queue", [] { return "serve " + q(kLearned) + " --queue 0"; },
                 "--queue: must be in [1, 100000] (got 0)", 1});
    return c;
}

// The ids of the table rows of docs/errors.md (first column, `ID`).
std::set<std::string> doc_ids() {
    std::ifstream f(kSrc + "/docs/errors.md");
    std::set<std::string> ids;
    std::string line;
    const std::regex row(R"(^\| `([A-Z]+-[A-Za-z0-9_-]+)` \|)");
    std::smatch m;
    while (std::getline(f, line))
        if (std::regex_search(line, m, row)) ids.insert(m[1]);
    return ids;
}

}  // namespace

TEST(ErrorsTable, DocumentMatchesTests) {
    std::set<std::string> tested;
    for (const Case& c : cases()) EXPECT_TRUE(tested.insert(c.id).second) << "duplicate " << c.id;
    const std::set<std::string> doc = doc_ids();
    for (const auto& id : doc)
        EXPECT_TRUE(tested.count(id)) << id << " is in docs/errors.md but not tested";
    for (const auto& id : tested)
        EXPECT_TRUE(doc.count(id)) << id << " is tested but not in docs/errors.md";
}

TEST(ErrorsTable, EveryRowGetsItsError) {
    for (const Case& c : cases()) {
        SCOPED_TRACE(c.id);
#if defined(__SANITIZE_ADDRESS__)
        if (c.id == "EXIT-signal") continue;  // ASan reports the signal itself (with a stack)
#endif
        g_cwd.clear();
        const std::string args = c.args();
        cli_test::Result r;
        if (!g_cwd.empty()) {
            r = cli_test::run_in(g_cwd, args);
        } else if (c.env.empty()) {
            r = cli_test::run(args);
        } else {
            // The simulated faults are switched on through the environment of this process.
            ::setenv(c.env.substr(0, c.env.find('=')).c_str(),
                     c.env.substr(c.env.find('=') + 1).c_str(), 1);
            r = cli_test::run(args);
            ::unsetenv(c.env.substr(0, c.env.find('=')).c_str());
        }
        if (std::getenv("PLDR_PRINT_ERRORS")) std::printf("%s: %s", c.id.c_str(), r.err.c_str());
        EXPECT_FALSE(r.signaled) << args;
        EXPECT_EQ(r.code, c.code) << args << "\n" << r.err;
        EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find(c.needle), std::string::npos)
            << "expected '" << c.needle << "' in: " << r.err;
    }
}

// The overwrite checks leave the inputs intact: the model still loads after every refusal.
TEST(ErrorsTable, RefusedOutputsLeaveTheModelIntact) {
    auto d = copy_dir(kLearned, "intact");
    const std::string before = cli_test::slurp(d + "/model.safetensors");
    for (const std::string& a :
         {"dump " + q(d) + " --tokens 1,2 --out " + q(d + "/model.safetensors"),
          "collapse " + q(d) + " --out " + q(d)}) {
        auto r = cli_test::run(a);
        EXPECT_EQ(r.code, 1) << a;
    }
    EXPECT_EQ(cli_test::slurp(d + "/model.safetensors"), before);
    EXPECT_EQ(cli_test::run("inspect " + q(d)).code, 0);
}
