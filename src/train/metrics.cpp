// Metrics JSONL (see metrics.h).
#include "train/metrics.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"

namespace pldr {

MetricsLog::MetricsLog(const std::string& path, int64_t keep_through_step) : path_(path) {
    const std::filesystem::path p(path);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    std::string kept;
    if (keep_through_step >= 0 && file_exists(path)) {
        std::istringstream in(read_file(path));
        std::string line;
        while (std::getline(in, line)) {
            if (line.empty()) continue;
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_object() || !j.contains("step") ||
                !j["step"].is_number_integer())
                continue;  // a torn last line of an interrupted run
            if (j["step"].get<int64_t>() <= keep_through_step) kept += line + "\n";
        }
    }
    // The kept lines replace the file atomically (a crash never loses them), then new lines are
    // appended.
    write_file_atomic(path, kept);
    f_ = std::fopen(path.c_str(), "ab");
    PLDR_REQUIRE(f_, "cannot write the metrics file ", path);
}

MetricsLog::~MetricsLog() {
    if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::ordered_json& obj) {
    if (!f_) return;
    const std::string s = obj.dump() + "\n";
    PLDR_REQUIRE(std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0,
                 "cannot write the metrics file ", path_);
}

std::vector<Curve> read_loss_curves(const std::string& path) {
    std::istringstream in(read_file(path));
    Curve train{"train", {}, {}}, valid{"valid", {}, {}};
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        PLDR_REQUIRE(!j.is_discarded() && j.is_object(), path, ":", n, ": not a JSON object");
        PLDR_REQUIRE(j.contains("type") && j["type"].is_string(), path, ":", n,
                     ": no \"type\" field");
        const std::string type = j["type"];
        if (type != "train" && type != "eval") continue;
        PLDR_REQUIRE(j.contains("step") && j["step"].is_number() && j.contains("loss") &&
                         j["loss"].is_number(),
                     path, ":", n, ": a ", type, " line needs numeric \"step\" and \"loss\"");
        Curve& c = type == "train" ? train : valid;
        c.x.push_back(j["step"].get<double>());
        c.y.push_back(j["loss"].get<double>());
    }
    PLDR_REQUIRE(!train.x.empty(), path, ": no training steps in the metrics file");
    std::vector<Curve> out{train};
    if (!valid.x.empty()) out.push_back(valid);
    return out;
}

std::vector<Curve> read_audit_curves(const std::string& path) {
    // (label, the keys down to the value) of each curve.
    const std::vector<std::pair<std::string, std::vector<std::string>>> spec = {
        {"eps_G", {"max_eps_G"}},
        {"G_LM order (prompts)", {"order_prompts", "G_LM", "rms"}},
        {"G_LM order (continuations)", {"order_continuations", "G_LM", "rms"}},
        {"A_P order (prompts)", {"order_prompts", "A_P", "rms"}},
        {"A order (prompts)", {"order_prompts", "A", "rms"}},
        {"block-seq gap", {"max_token_gap"}}};
    std::vector<Curve> curves;
    for (const auto& s : spec) curves.push_back({s.first, {}, {}});
    std::istringstream in(read_file(path));
    std::string line;
    int64_t n = 0;
    bool any = false;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        PLDR_REQUIRE(!j.is_discarded() && j.is_object(), path, ":", n, ": not a JSON object");
        if (!j.contains("type") || j["type"] != "audit") continue;
        PLDR_REQUIRE(j.contains("tokens") && j["tokens"].is_number() && j.contains("audit") &&
                         j["audit"].is_object(),
                     path, ":", n,
                     ": an audit line needs numeric \"tokens\" and an \"audit\" object");
        any = true;
        for (size_t c = 0; c < spec.size(); ++c) {
            const nlohmann::json* v = &j["audit"];
            for (const std::string& k : spec[c].second) {
                if (!v->is_object() || !v->contains(k)) {
                    v = nullptr;
                    break;
                }
                v = &(*v)[k];
            }
            if (!v || !v->is_number()) continue;  // absent (a fixed-G model has no A, A_P)
            curves[c].x.push_back(j["tokens"].get<double>());
            curves[c].y.push_back(v->get<double>());
        }
    }
    std::vector<Curve> out;
    if (!any) return out;
    for (auto& c : curves)
        if (!c.x.empty()) out.push_back(std::move(c));
    return out;
}

}  // namespace pldr
