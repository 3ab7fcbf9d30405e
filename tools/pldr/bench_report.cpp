// The report of `pldr bench` (see bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace pldr::cli {

namespace {

using nlohmann::json;

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

std::string recompute_of(const json& x) {
    return x.value("recompute", "selective");
}

// The tokens/s a workload's limit allows at these read bandwidth (GB/s) and GEMM peaks
// (GFLOP/s); *bound names the limit. Decode: the read of its bytes per token (times the batch),
// or the SGEMM at 2 FLOPs per weight where that is lower; prefill and training: the GEMM peak of
// the products they ran over their FLOPs per token.
double limit_of(const json& r, double read_gbs, double sgemm_gflops, double bf16_gflops,
                std::string* bound) {
    if (r["workload"] == "decode") {
        const double bytes = r["bytes_per_token"].get<double>();
        const double B = double(r["batch"].get<int64_t>());
        const double bw_limit = B * read_gbs * 1e9 / bytes;
        const double flops = r["flops_per_token"].get<double>();  // 2 per weight read
        const double flop_limit = sgemm_gflops * 1e9 / (flops > 0 ? flops : bytes / 2);
        *bound = bw_limit <= flop_limit ? "read" : "sgemm";
        return std::min(bw_limit, flop_limit);
    }
    if (r["bf16_products"].get<bool>() && bf16_gflops > 0) {
        *bound = "bf16 gemm";
        return bf16_gflops * 1e9 / r["flops_per_token"].get<double>();
    }
    *bound = "sgemm";
    return sgemm_gflops * 1e9 / r["flops_per_token"].get<double>();
}

// With PLDR_CUDA_PROFILE=1 on a GPU: each workload's device time per phase (docs/gpu.md "Where
// the time goes"), a phase's children indented below it, their shares of the outermost phases'.
void print_device_phases(const json& results) {
    for (const auto& r : results) {
        if (!r.contains("device_phases")) continue;
        double top = 0;
        for (const auto& p : r["device_phases"])
            if (p["depth"].get<int>() == 0) top += p["ms"].get<double>();
        std::string what = r["workload"].get<std::string>();
        if (r.value("precision", "fp32") != "fp32") what += " " + r["precision"].get<std::string>();
        std::printf(
            "\ndevice time per phase, %s %s (warm-up repetitions included; a phase includes "
            "the indented ones below it):\n\n| phase | calls | ms | ms per call | share |\n"
            "|---|---|---|---|---|\n",
            r["model"].get<std::string>().c_str(), what.c_str());
        for (const auto& p : r["device_phases"]) {
            const double ms = p["ms"].get<double>();
            const int64_t calls = p["calls"].get<int64_t>();
            const std::string indent(size_t(2 * p["depth"].get<int>()), '.');
            std::printf("| %s%s | %lld | %s | %s | %s |\n", indent.c_str(),
                        p["phase"].get<std::string>().c_str(), static_cast<long long>(calls),
                        fmt("%.2f", ms).c_str(),
                        fmt("%.3f", calls ? ms / double(calls) : 0).c_str(),
                        fmt("%.1f %%", top > 0 ? 100 * ms / top : 0).c_str());
        }
    }
}

}  // namespace

void add_limit_fractions(json& r, const api::BenchLimits& lim) {
    const double tps = r["tok_s"]["median"].get<double>();
    std::string bound;
    const double start = limit_of(r, lim.read_gbs, lim.sgemm_gflops, lim.bf16_gflops, &bound);
    r["limit_tok_s_run_start"] = start;
    r["fraction_run_start"] = tps / start;
    const auto reps = r["tok_s_reps"].get<std::vector<double>>();
    if (!r.contains("probes") || reps.empty()) {
        r["limit_tok_s"] = start;
        r["fraction"] = tps / start;
        r["limits_measured"] = "run start";
        r["bound"] = bound;
        return;
    }
    // The probes in order; probe j preceded repetition "before" (the last one: after them all).
    const json& p = r["probes"];
    std::vector<double> limits, fractions;
    for (size_t i = 0; i < reps.size(); ++i) {
        size_t j = 0;  // the first probe after repetition i; p[j - 1] is the last one before it
        while (j < p.size() && p[j]["before"].get<size_t>() <= i) ++j;
        auto near = [&](const char* k, double fallback) {
            double v = 0;
            if (j > 0 && p[j - 1].contains(k)) v = p[j - 1][k].get<double>();
            if (j < p.size() && p[j].contains(k)) v = std::max(v, p[j][k].get<double>());
            return v > 0 ? v : fallback;
        };
        limits.push_back(limit_of(r, near("read", lim.read_gbs), near("sgemm", lim.sgemm_gflops),
                                  near("bf16", lim.bf16_gflops), &bound));
        fractions.push_back(reps[i] / limits.back());
    }
    r["limit_tok_s"] = median_of(limits);
    r["fraction"] = median_of(fractions);
    r["limits_measured"] = "adjacent";
    r["bound"] = bound;
}

void add_ratios(json& results) {
    auto same_shape = [](const json& x, const json& y) {
        return x["workload"] == y["workload"] && x.value("cache", "") == y.value("cache", "") &&
               x.value("batch", int64_t(0)) == y.value("batch", int64_t(0));
    };
    for (auto& r : results) {
        const double t = r["tok_s"]["median"].get<double>();
        for (const auto& q : results) {
            const double u = q["tok_s"]["median"].get<double>();
            if (u <= 0) continue;
            if (r["workload"] == "decode" && r["batch"].get<int64_t>() > 1 &&
                q["workload"] == "decode" && q["cache"] == "kvg" && q["batch"] == 1 &&
                q["weights"] == r["weights"])
                r["x_batch1_separate"] = t / u;
            const bool low = r["weights"] != "f32" || r["precision"] != "fp32";
            if (low && same_shape(r, q) && q["weights"] == "f32" && q["precision"] == "fp32" &&
                recompute_of(q) == recompute_of(r))
                r["x_fp32"] = t / u;
            // No or full recomputation against the selective plan of the same precision.
            if (recompute_of(r) != "selective" && same_shape(r, q) &&
                recompute_of(q) == "selective" && q["precision"] == r["precision"])
                r["x_selective"] = t / u;
        }
        // Batched decode against batch 1 (same weights): the median ratio of the pairs that ran
        // together (each batch-B repetition right after a batch-1 one), else the ratio to the
        // batch-1 row of this run.
        if (r.contains("x_batch1_pairs"))
            r["x_batch1"] = r["x_batch1_pairs"]["median"];
        else if (r.contains("x_batch1_separate"))
            r["x_batch1"] = r["x_batch1_separate"];
    }
}

void print_report(const json& out, bool adjacent) {
    const json& lim = out["limits"];
    const std::string device = lim.value("device", "cpu");
    if (device == "cpu")
        std::printf("limits at the start (%d threads): read %.1f GB/s", lim["threads"].get<int>(),
                    lim["read_gbs"].get<double>());
    else
        std::printf("limits at the start (%s): device memory read %.1f GB/s", device.c_str(),
                    lim["read_gbs"].get<double>());
    if (lim.contains("likwid_load_avx_gbs")) {
        const double likwid = lim["likwid_load_avx_gbs"].get<double>();
        std::printf(" (likwid-bench load_avx %.1f GB/s, ratio %.2f)", likwid,
                    lim["read_gbs"].get<double>() / likwid);
    }
    std::printf(", SGEMM %.0f GFLOP/s (%s)", lim["sgemm_gflops"].get<double>(),
                lim["sgemm_kernels"].get<std::string>().c_str());
    if (lim["bf16_gflops"].get<double>() > 0)
        std::printf(", bf16 GEMM %.0f GFLOP/s (%s)", lim["bf16_gflops"].get<double>(),
                    lim["bf16_backend"].get<std::string>().c_str());
    else
        std::printf(", bf16 GEMM: none (%s)", lim["bf16_backend"].get<std::string>().c_str());
    if (lim.contains("tf32_gflops"))
        std::printf(", TF32 GEMM %.0f GFLOP/s", lim["tf32_gflops"].get<double>());
    std::printf("\n");
    if (adjacent)
        std::printf(
            "each row's limit: measured around its repetitions (before the warm-up, between "
            "repetitions a second apart, after the last); each repetition against the larger of "
            "the two around it, the median over the repetitions\n");
    std::printf("\n");
    std::printf(
        "| model | workload | tok/s median (min–max) | limit tok/s | fraction | peak RSS |\n"
        "|---|---|---|---|---|---|\n");
    for (const auto& r : out["results"]) {
        std::string w = r["workload"].get<std::string>();
        if (w == "decode")
            w += " " + r["cache"].get<std::string>() + " batch " +
                 std::to_string(r["batch"].get<int64_t>());
        else if (w == "prefill")
            w += " " + std::to_string(r["prompt"].get<int64_t>());
        else
            w += " " + std::to_string(r["batch"].get<int64_t>()) + "×" +
                 std::to_string(r["seq"].get<int64_t>());
        std::string frac =
            fmt("%.2f", r["fraction"].get<double>()) + " of " + r["bound"].get<std::string>();
        if (r.contains("x_batch1")) frac += fmt(" (%.2f× batch 1)", r["x_batch1"].get<double>());
        if (r.contains("x_fp32")) frac += fmt(" (%.2f× f32)", r["x_fp32"].get<double>());
        if (r.contains("x_selective"))
            frac += fmt(" (%.2f× selective)", r["x_selective"].get<double>());
        std::string model = r["model"].get<std::string>();
        if (r.value("weights", "f32") != "f32")
            model += " (" + r["weights"].get<std::string>() + ")";
        if (r.value("precision", "fp32") != "fp32")
            model += " (" + r["precision"].get<std::string>() + " mixed)";
        if (recompute_of(r) != "selective") model += " (recompute " + recompute_of(r) + ")";
        std::string peak = fmt("%.0f MB", r["peak_rss_bytes"].get<double>() / 1e6);
        if (r.contains("device_peak_bytes"))  // on a GPU: its memory too
            peak += fmt(" (device %.0f MB)", r["device_peak_bytes"].get<double>() / 1e6);
        std::printf("| %s | %s | %s (%s–%s) | %s | %s | %s |\n", model.c_str(), w.c_str(),
                    fmt("%.1f", r["tok_s"]["median"].get<double>()).c_str(),
                    fmt("%.1f", r["tok_s"]["min"].get<double>()).c_str(),
                    fmt("%.1f", r["tok_s"]["max"].get<double>()).c_str(),
                    fmt("%.1f", r["limit_tok_s"].get<double>()).c_str(), frac.c_str(),
                    peak.c_str());
    }
    print_device_phases(out["results"]);
    if (device != "cpu")
        std::printf(
            "\nprefill on CUDA: the forward over the prompt with the head over its last "
            "position (no cache kept yet); train: the whole step on the device (float32, TF32 "
            "off), the parameters back to the host after each. The anchor (issue 37): the PyTorch "
            "reference on one "
            "H200 (torch 2.11, CUDA 13, 2026-12-04) prefills 128 tokens at 8,400 tok/s and "
            "1,024 at 61,000; decodes at 228 tok/s (kvg, batch 1); trains the 110M shape "
            "(32 × 1024) at 118,000 tok/s in bf16 and 60,000 in fp32\n");
}

}  // namespace pldr::cli
