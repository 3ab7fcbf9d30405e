// Token sampler (see sampler.h for the order of transforms and the exact rules).
#include "infer/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <type_traits>

#include "core/error.h"
#include "core/vmath.h"

namespace pldr {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// sort_to() radix-sorts the whole remainder when at least this many values are left and a
// quarter of them is needed.
constexpr size_t kRadixMin = 2048;

// Sorts n finite doubles descending: LSD radix sort (8-bit digits, constant digits skipped)
// on order-preserving 64-bit keys. Equal values stay equal, so the result is the same
// multiset order as std::sort with std::greater (−0 and +0 may swap; they are equal).
void radix_sort_desc(double* v, size_t n, std::vector<uint64_t>& a, std::vector<uint64_t>& b) {
    constexpr uint64_t kSign = uint64_t{1} << 63;
    a.resize(n);
    b.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const auto u = std::bit_cast<uint64_t>(v[i]);
        a[i] = ~((u & kSign) ? ~u : (u | kSign));  // ascending key, inverted: descending
    }
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {};
        for (size_t i = 0; i < n; ++i) ++count[((a[i] >> shift) & 0xff) + 1];
        if (count[((a[0] >> shift) & 0xff) + 1] == n) continue;  // one digit value: skip
        for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
        for (size_t i = 0; i < n; ++i) b[count[(a[i] >> shift) & 0xff]++] = a[i];
        a.swap(b);
    }
    for (size_t i = 0; i < n; ++i) {
        const uint64_t key = ~a[i];
        v[i] = std::bit_cast<double>((key & kSign) ? (key & ~kSign) : ~key);
    }
}

// Up to this n, top_n keeps the best n in one pass over the values; above it, partial_sort.
constexpr size_t kTopNScan = 64;

// Up to this k, top-k keeps a min-heap of the k largest values; above it, nth_element.
constexpr size_t kHeapTopK = 4096;

template <typename T>
double checked(const T* logits, int64_t i) {
    const double x = static_cast<double>(logits[i]);
    if (std::isnan(x) || x == kInf) fail("non-finite logits (", x, " at id ", i, ")");
    return x;
}

void require_vocab(const void* logits, int64_t V) {
    PLDR_REQUIRE(V > 0 && V <= std::numeric_limits<int32_t>::max(),
                 "sampler: vocabulary size must be in [1, 2^31) (got ", V, ")");
    PLDR_REQUIRE(logits != nullptr, "sampler: null logits");
}

}  // namespace

Sampler::Sampler(const SamplerConfig& config) : cfg_(config), rng_(config.seed) {
    cfg_.validate();
}

template <typename T>
int64_t Sampler::sample(const T* logits, int64_t V, const std::vector<int64_t>& history) {
    require_vocab(logits, V);
    w_.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) w_[static_cast<size_t>(i)] = checked(logits, i);
    filter(V, history);
    const int64_t id = cfg_.is_greedy() ? kept_[0] : draw();
    if (drawn_.size() != static_cast<size_t>(V)) drawn_.assign(static_cast<size_t>(V), 0);
    ++drawn_[static_cast<size_t>(id)];
    return id;
}

template <typename T>
std::vector<double> Sampler::distribution(const T* logits, int64_t V,
                                          const std::vector<int64_t>& history) {
    require_vocab(logits, V);
    w_.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) w_[static_cast<size_t>(i)] = checked(logits, i);
    filter(V, history);
    std::vector<double> out(static_cast<size_t>(V), 0.0);
    for (size_t j = 0; j < kept_.size(); ++j)
        out[static_cast<size_t>(kept_[j])] = kept_e_[j] / total_;
    return out;
}

void Sampler::apply_repeat_penalty(int64_t V, const std::vector<int64_t>& history) {
    const double r = cfg_.repetition_penalty;
    if (r == 1.0 || cfg_.repeat_last_n == 0 || history.empty()) return;
    const int64_t H = static_cast<int64_t>(history.size());
    const int64_t start = cfg_.repeat_last_n < 0 ? 0 : std::max<int64_t>(0, H - cfg_.repeat_last_n);
    seen_.assign(history.begin() + start, history.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
    for (const int64_t id : seen_) {
        PLDR_REQUIRE(id >= 0 && id < V, "sampler: history id ", id, " out of range [0, ", V, ")");
        double& x = w_[static_cast<size_t>(id)];
        x = x > 0 ? x / r : x * r;
    }
}

void Sampler::apply_presence_frequency(int64_t V) {
    const double p = cfg_.presence_penalty, f = cfg_.frequency_penalty;
    if ((p == 0 && f == 0) || drawn_.size() != static_cast<size_t>(V)) return;
    for (size_t i = 0; i < drawn_.size(); ++i)
        if (drawn_[i] > 0) w_[i] -= double(drawn_[i]) * f + p;
}

void Sampler::filter(int64_t V, const std::vector<int64_t>& history) {
    apply_repeat_penalty(V, history);
    apply_presence_frequency(V);
    const size_t n = static_cast<size_t>(V);

    // Max and argmax (lowest index on ties).
    size_t arg = 0;
    for (size_t i = 1; i < n; ++i)
        if (w_[i] > w_[arg]) arg = i;
    if (w_[arg] == -kInf) fail("non-finite logits: all logits are -inf");
    kept_.clear();
    kept_e_.clear();
    if (cfg_.is_greedy()) {
        kept_.push_back(static_cast<int32_t>(arg));
        kept_e_.push_back(1.0);
        total_ = 1.0;
        return;
    }

    // Temperature (see header: the reference only divides for T < 1); count finite logits.
    const double T = cfg_.temperature;
    size_t F = 0;
    if (T != 1.0) {
        for (double& x : w_) {
            x /= T;
            F += x != -kInf;
        }
        if (!std::isfinite(w_[arg]))
            fail("--temp ", T, " is too small: the scaled logits overflow");
    } else {
        for (const double x : w_) F += x != -kInf;
    }
    const double m = w_[arg];

    const bool use_k = cfg_.top_k > 0 && static_cast<size_t>(cfg_.top_k) < F;
    const bool use_p = cfg_.top_p < 1.0 && F > 1;
    const size_t k = use_k ? static_cast<size_t>(cfg_.top_k) : F;
    double thr = -kInf;

    // Candidate values in descending order, sorted lazily: vals_[0, sorted) is sorted and
    // every value after it is ≤ vals_[sorted − 1]. Thresholds are values and tied tokens share
    // their exp, so the order among equal values never matters (no indices needed).
    size_t sorted = 0;
    const auto sort_to = [&](size_t L) {
        if (L <= sorted) return;
        const size_t rest = vals_.size() - sorted;
        if (rest >= kRadixMin && 4 * (L - sorted) >= rest) {
            // Most of what is left is needed (flat distributions under top-p): sort it all.
            radix_sort_desc(vals_.data() + sorted, rest, keys_, keys_tmp_);
            sorted = vals_.size();
            return;
        }
        const auto b = vals_.begin();
        if (L < vals_.size())
            std::nth_element(b + static_cast<ptrdiff_t>(sorted), b + static_cast<ptrdiff_t>(L),
                             vals_.end(), std::greater<double>());
        std::sort(b + static_cast<ptrdiff_t>(sorted), b + static_cast<ptrdiff_t>(L),
                  std::greater<double>());
        sorted = L;
    };
    if (use_k && k <= kHeapTopK) {
        // The k largest values with multiplicity, via a min-heap: one compare per logit.
        vals_.clear();
        const auto gt = std::greater<double>();
        for (const double x : w_) {
            if (x == -kInf) continue;
            if (vals_.size() < k) {
                vals_.push_back(x);
                std::push_heap(vals_.begin(), vals_.end(), gt);
            } else if (x > vals_.front()) {
                std::pop_heap(vals_.begin(), vals_.end(), gt);
                vals_.back() = x;
                std::push_heap(vals_.begin(), vals_.end(), gt);
            }
        }
        thr = vals_.front();  // the k-th largest
        if (use_p) {
            std::sort_heap(vals_.begin(), vals_.end(), gt);  // descending
            sorted = k;
        }
    } else if (use_p || use_k) {
        vals_.clear();
        for (const double x : w_)
            if (x != -kInf) vals_.push_back(x);
        if (use_k) {
            sort_to(k);
            thr = vals_[k - 1];
        }
    }

    if (use_p) {
        e_.resize(n);
        double Z = 0;
        for (size_t i = 0; i < n; ++i) {
            e_[i] = std::exp(w_[i] - m);
            Z += e_[i];
        }
        // Scan the sorted prefix, growing it geometrically, never past k: when all of the top
        // k satisfy the rule, the top-p threshold lies at or below the k-th largest and top-k
        // (thr, already set) decides.
        const double p = cfg_.top_p;
        const bool ref = cfg_.top_p_mode() == TopPMode::REFERENCE;
        size_t done = 0, L = std::min<size_t>(k, 64), cnt = 0;
        double c = 0;
        bool crossed = false;
        for (;;) {
            sort_to(L);
            for (size_t j = done; j < L; ++j) {
                c += std::exp(vals_[j] - m) / Z;  // cumsum(softmax(sorted))
                if (ref ? !(c <= p) : !(c < p)) {
                    crossed = true;
                    break;
                }
                ++cnt;
            }
            if (crossed || L == k) break;
            // Every later token has probability ≤ q (the last one scanned), so at least
            // (p − c) / q more are needed: jump there (or grow 4×) to avoid many small rounds.
            const double q = std::exp(vals_[L - 1] - m) / Z;
            const double need = q > 0 ? (p - c) / q : kInf;
            done = L;
            L = need >= static_cast<double>(k - L)
                    ? k
                    : std::min(k, std::max(4 * L, L + static_cast<size_t>(std::ceil(need))));
        }
        // REFERENCE: n = max(cnt − 1, 0); HF: n = cnt (the crossing token, < F). Then
        // n ≤ k − 1, so top-k removes nothing more. If nothing crossed, every finite token
        // satisfies the rule (keep all) or top-k decides.
        if (crossed) thr = vals_[ref ? (cnt > 0 ? cnt - 1 : 0) : cnt];
    }

    // Survivors in index order, with min-p.
    const double min_p = cfg_.min_p;
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
        const double x = w_[i];
        if (x == -kInf || x < thr) continue;
        const double e = use_p ? e_[i] : std::exp(x - m);
        if (e < min_p) continue;
        kept_.push_back(static_cast<int32_t>(i));
        kept_e_.push_back(e);
        total += e;
    }
    PLDR_CHECK(!kept_.empty() && total > 0);
    total_ = total;
}

// Inverse CDF over the survivors, in index order, on one uniform draw.
int64_t Sampler::draw() {
    const double u = rng_.uniform() * total_;
    double acc = 0;
    size_t last = 0;
    for (size_t j = 0; j < kept_.size(); ++j) {
        if (kept_e_[j] <= 0) continue;
        acc += kept_e_[j];
        last = j;
        if (acc > u) return kept_[j];
    }
    return kept_[last];  // u rounded up to the total: the last token with mass
}

template <typename T>
void Sampler::log_softmax(const T* logits, int64_t V, std::vector<double>& out) {
    require_vocab(logits, V);
    out.resize(static_cast<size_t>(V));
    double* o = out.data();
    // The maximum, and whether any logit is NaN or +inf (then the first one is named).
    double m = -kInf;
    bool bad = false;
    for (int64_t i = 0; i < V; ++i) {
        const double x = static_cast<double>(logits[i]);
        o[i] = x;
        bad |= !(x < kInf);
        m = x > m ? x : m;
    }
    if (bad)
        for (int64_t i = 0; i < V; ++i) checked(logits, i);
    if (m == -kInf) fail("non-finite logits: all logits are -inf");
    double Z = 0;
    if constexpr (std::is_same_v<T, float>) {
        // The float32 path: the exponentials on vector lanes (vmath::exp_f64, ≤ 1 ulp), a
        // chunk at a time, summed in 8 lanes (by std::exp and one running sum, a token's
        // 32,000 took 0.2 ms).
        constexpr int64_t kChunk = 512, kLanes = 8;
        double e[kChunk], z[kLanes] = {};
        for (int64_t i0 = 0; i0 < V; i0 += kChunk) {
            const int64_t n = std::min(kChunk, V - i0);
            for (int64_t j = 0; j < n; ++j) e[j] = o[i0 + j] - m;
            vmath::exp_f64(e, e, n);
            int64_t j = 0;
            for (; j + kLanes <= n; j += kLanes)
                for (int64_t k = 0; k < kLanes; ++k) z[k] += e[j + k];
            for (; j < n; ++j) z[j % kLanes] += e[j];
        }
        for (const double x : z) Z += x;
    } else {  // the float64 path: std::exp and one running sum (the audit instrument's parity)
        for (int64_t i = 0; i < V; ++i) Z += std::exp(o[i] - m);
    }
    const double lz = std::log(Z);
    for (int64_t i = 0; i < V; ++i) o[i] = (o[i] - m) - lz;
}

std::vector<std::pair<int64_t, double>> Sampler::top_n(const std::vector<double>& logprobs,
                                                       int64_t n) {
    PLDR_REQUIRE(n >= 0, "top_n: n must be >= 0 (got ", n, ")");
    const size_t N = logprobs.size();
    const size_t take = std::min(N, static_cast<size_t>(n));
    std::vector<std::pair<int64_t, double>> out;
    out.reserve(take);
    if (take == 0) return out;
    if (take <= kTopNScan) {
        // One pass, the best so far kept in order: a value enters when it beats the last kept
        // one (an equal one comes later, with a higher id, so it sorts after: ties by lower id),
        // after the kept values that are not smaller.
        auto insert = [&](size_t i) {
            const double v = logprobs[i];
            auto at = out.end();
            while (at != out.begin() && std::prev(at)->second < v) --at;
            out.insert(at, {static_cast<int64_t>(i), v});
        };
        size_t i = 0;
        for (; out.size() < take; ++i) insert(i);
        double last = out.back().second;
        for (; i < N; ++i) {
            if (!(logprobs[i] > last)) continue;
            out.pop_back();
            insert(i);
            last = out.back().second;
        }
        return out;
    }
    std::vector<int64_t> ids(N);
    std::iota(ids.begin(), ids.end(), int64_t{0});
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(take), ids.end(),
                      [&](int64_t a, int64_t b) {
                          const double la = logprobs[static_cast<size_t>(a)];
                          const double lb = logprobs[static_cast<size_t>(b)];
                          return la > lb || (la == lb && a < b);
                      });
    for (size_t j = 0; j < take; ++j)
        out.emplace_back(ids[j], logprobs[static_cast<size_t>(ids[j])]);
    return out;
}

template int64_t Sampler::sample<float>(const float*, int64_t, const std::vector<int64_t>&);
template int64_t Sampler::sample<double>(const double*, int64_t, const std::vector<int64_t>&);
template std::vector<double> Sampler::distribution<float>(const float*, int64_t,
                                                          const std::vector<int64_t>&);
template std::vector<double> Sampler::distribution<double>(const double*, int64_t,
                                                           const std::vector<int64_t>&);
template void Sampler::log_softmax<float>(const float*, int64_t, std::vector<double>&);
template void Sampler::log_softmax<double>(const double*, int64_t, std::vector<double>&);

}  // namespace pldr
