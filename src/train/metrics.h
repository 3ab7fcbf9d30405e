// Training metrics as JSON lines: one object per training step and one per validation, e.g.
//   {"type":"train","step":12,"loss":5.1,"ce":5.1,"accuracy":0.08,"lr":0.0006,...}
//   {"type":"eval","step":100,"loss":4.7,"ce":4.7,"accuracy":0.2,"perplexity":110,...}
// Every line is flushed as it is written, so another process can follow the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pldr {

class MetricsLog {
  public:
    MetricsLog() = default;
    // Opens `path` for writing. keep_through_step < 0: the file is truncated (a new run);
    // otherwise the lines of an earlier run with "step" ≤ keep_through_step are kept and the
    // rest dropped (a resumed run continues its metrics without duplicates). The file is
    // created with its parent folder.
    MetricsLog(const std::string& path, int64_t keep_through_step);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;

    void write(const nlohmann::ordered_json& obj);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    std::FILE* f_ = nullptr;
};

struct Curve {
    std::string label;
    std::vector<double> x, y;
};

// Reads a metrics file into two curves: "train" (loss of each training step) and "valid"
// (loss of each validation). Lines that are not JSON objects with a numeric step and loss are
// errors naming the line; a file with no training line is an error.
std::vector<Curve> read_loss_curves(const std::string& path);
// The collapse curves of its "audit" lines against tokens seen (api::read_audit_curves).
std::vector<Curve> read_audit_curves(const std::string& path);

}  // namespace pldr
