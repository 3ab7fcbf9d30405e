// Benchmark workloads (see workloads.h).
#include "perf/workloads.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "model/init.h"
#include "perf/limits.h"
#include "train/step.h"

namespace pldr::perf {

const std::vector<BenchShape>& bench_shapes() {
    static const std::vector<BenchShape> shapes = {
        {"S", 2, 4, 16, 24, 2, 2, 4096},
        {"M", 5, 8, 32, 48, 4, 2, 8192},
        {"110M", 5, 14, 64, 170, 8, 2, 32000},
    };
    return shapes;
}

Config bench_config(const std::string& name, int64_t context) {
    std::string known;
    for (const BenchShape& s : bench_shapes()) {
        known += known.empty() ? s.name : std::string(", ") + s.name;
        if (name != s.name) continue;
        Config c;
        c.num_layers = s.L;
        c.num_heads = s.H;
        c.head_dim = s.dk;
        c.hidden_size = s.H * s.dk;
        c.intermediate_size = c.hidden_size * 8 / 3;  // floor(d·8/3), the reference's dff
        c.A_dff = s.A_dff;
        c.num_reslayerA = s.R;
        c.num_denseA = s.N;
        c.vocab_size = s.V;
        c.max_position = context;
        c.g_type = GType::LEARNED;  // v510
        return c;
    }
    throw Error(cat("unknown benchmark config '", name, "' (known: ", known, ")"));
}

double forward_flops(const Config& c, int64_t B, int64_t S, int64_t head_rows) {
    const double n = double(B * S), d = double(c.hidden_size), F = double(c.intermediate_size);
    const double H = double(c.num_heads), D = double(c.head_dim), Sd = double(S), Bd = double(B);
    const double proj = 2 * n * (4 * d * d + 3 * d * F);
    const double attn = 2 * Bd * H * (Sd * D * D + 2 * Sd * Sd * D);
    const double ml =
        c.learned_g() ? 2 * Bd * H *
                            (Sd * D * D +
                             double(c.num_reslayerA * c.num_denseA) * 3 * D * D * double(c.A_dff) +
                             2 * D * D * D)
                      : 0.0;
    const double head = 2 * double(head_rows) * d * double(c.vocab_size);
    return double(c.num_layers) * (proj + attn + ml) + head;
}

double train_step_flops(const Config& c, int64_t B, int64_t S) {
    return 3 * forward_flops(c, B, S, B * S);
}

double decode_bytes_per_token(const Model<float>& m) {
    const Config& c = m.cfg;
    double bytes = 4.0 * double(m.num_params() - c.vocab_size * c.hidden_size + c.hidden_size);
    if (m.packed)  // the packed weights in their packed size (model/packed.h)
        bytes += double(m.packed->bytes()) - 4.0 * double(m.packed->numel());
    return bytes;
}

Stats stats_of(std::vector<double> v) {
    Stats s;
    s.n = int(v.size());
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    s.min = v.front();
    s.max = v.back();
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(n);
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = n > 1 ? std::sqrt(ss / double(n - 1)) : 0;
    return s;
}

std::vector<int64_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
    Rng r(seed);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto& x : ids) x = 4 + int64_t(r.below(uint64_t(V - 4)));
    return ids;
}

std::vector<double> timed_reps(int reps, int warmup, double min_seconds, const RepHook& hook,
                               const std::function<double()>& one) {
    std::vector<double> tps;
    const bool open = min_seconds > 0 && reps < kMaxReps;
    const int planned = open ? kOpenReps : reps;
    if (hook && (reps > 0 || open)) hook(0, planned);  // before the warm-up: it warms the caches
    for (int r = 0; r < warmup; ++r) one();
    const double t0 = now_s();
    int n = 0;
    while (n < reps || (open && n < kMaxReps && now_s() - t0 < min_seconds)) {
        if (hook && n > 0) hook(n, planned);
        tps.push_back(one());
        ++n;
    }
    if (hook) hook(n, n);
    return tps;
}

namespace {

int64_t argmax(const std::vector<float>& v) {
    return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// One decode step of every session (each appends its own greedy token), all in one shared
// step (decode_step: each weight read once for the whole batch).
void step_all(std::vector<std::unique_ptr<Session<float>>>& ss, std::vector<int64_t>& next) {
    std::vector<Session<float>*> ptrs;
    for (auto& s : ss) ptrs.push_back(s.get());
    decode_step(ptrs, next, false);
    for (size_t i = 0; i < ss.size(); ++i) next[i] = argmax(ss[i]->logits());
}

// One decode repetition: `batch` fresh sessions prefilled (untimed), then n_new shared steps;
// aggregate tokens/s.
double decode_once(const Model<float>& m, CacheMode mode, int64_t batch, int64_t prompt,
                   int64_t n_new, int64_t context) {
    std::vector<std::unique_ptr<Session<float>>> ss;
    std::vector<int64_t> next(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
        ss.push_back(std::make_unique<Session<float>>(m, mode, context));
        ss.back()->keep_activations(false);
        ss.back()->keep_g_only(true);  // as pldr generate's sessions
        next[size_t(b)] =
            argmax(ss.back()->prefill(random_ids(prompt, m.cfg.vocab_size, 100 + uint64_t(b))));
    }
    const double t0 = now_s();
    for (int64_t t = 0; t < n_new; ++t) step_all(ss, next);
    return double(batch * n_new) / (now_s() - t0);
}

void check_decode(int64_t batch, int64_t prompt, int64_t n_new, int64_t context) {
    PLDR_REQUIRE(batch >= 1 && batch <= 1024, "decode batch ", batch, " is outside [1, 1024]");
    PLDR_REQUIRE(prompt >= 1 && n_new >= 1 && prompt + n_new <= context, "decode of ", prompt,
                 " + ", n_new, " tokens does not fit the context of ", context);
}

}  // namespace

std::vector<double> run_prefill(const Model<float>& m, int64_t prompt, int64_t context, int reps,
                                int warmup, const RepHook& hook, double min_seconds) {
    PLDR_REQUIRE(prompt >= 1 && prompt <= context, "prefill of ", prompt,
                 " tokens does not fit the context of ", context);
    const auto ids = random_ids(prompt, m.cfg.vocab_size, 7);
    return timed_reps(reps, warmup, min_seconds, hook, [&] {
        Session<float> s(m, CacheMode::KVG, context);
        s.keep_activations(false);
        const double t0 = now_s();
        s.prefill(ids);
        return double(prompt) / (now_s() - t0);
    });
}

std::vector<double> run_decode(const Model<float>& m, CacheMode mode, int64_t batch, int64_t prompt,
                               int64_t n_new, int64_t context, int reps, int warmup,
                               const RepHook& hook, double min_seconds) {
    check_decode(batch, prompt, n_new, context);
    return timed_reps(reps, warmup, min_seconds, hook,
                      [&] { return decode_once(m, mode, batch, prompt, n_new, context); });
}

PairedDecode run_decode_paired(const Model<float>& m, CacheMode mode, int64_t batch, int64_t prompt,
                               int64_t n_new, int64_t context, int reps, int warmup,
                               const RepHook& hook, double min_seconds) {
    check_decode(batch, prompt, n_new, context);
    PairedDecode out;
    int calls = 0;  // the first `warmup` are the warm-up
    out.batched = timed_reps(reps, warmup, min_seconds, hook, [&] {
        const double one = decode_once(m, mode, 1, prompt, n_new, context);
        if (calls++ >= warmup) out.batch1.push_back(one);
        return decode_once(m, mode, batch, prompt, n_new, context);
    });
    return out;
}

std::vector<double> run_train(Model<float>& m, int64_t B, int64_t S, int reps, int warmup,
                              double* last_loss, Precision precision, Recompute recompute,
                              const RepHook& hook, std::shared_ptr<StepBackend<float>> backend) {
    PLDR_REQUIRE(B >= 1 && S >= 2 && S <= m.cfg.max_position, "training batch ", B, " x ", S,
                 " does not fit the model (context ", m.cfg.max_position, ")");
    const int64_t S1 = S + 1;
    const auto tokens = random_ids(B * S1, m.cfg.vocab_size, 42);
    TrainConfig tc;  // the reference defaults: clip by value 1.0, AdamW, warm-up schedule
    tc.precision = precision;
    tc.recompute = recompute;
    Trainer<float> trainer(m, tc, {}, std::move(backend));
    const TokenBatch batch{tokens.data(), B, S1};
    return timed_reps(reps, warmup, 0.0, hook, [&] {
        const double t0 = now_s();
        const double loss = trainer.step(batch).loss.value;
        const double dt = now_s() - t0;
        if (last_loss) *last_loss = loss;
        return double(B * S) / dt;
    });
}

}  // namespace pldr::perf
