// The public API's benchmarks, G_LM statistics, audit and training (include/pldr/pldr.hpp).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "api_impl.h"
#include "audit/measure.h"
#include "audit/report.h"
#include "audit/runner.h"
#include "core/fs.h"
#include "dist/dist.h"
#include "infer/tasks.h"
#include "io/tokenizer.h"
#include "train/trainer_loop.h"

namespace pldr::api {

namespace {

// The audit's prompts: the given ones (text encoded as a prompt), else the built-in set (text
// with a tokenizer, else token ids inside the vocabulary).
std::vector<::pldr::audit::AuditPrompt> audit_prompts(const std::vector<AuditPrompt>& given,
                                                      const ::pldr::Tokenizer* tok,
                                                      const std::string& tok_path, int64_t vocab,
                                                      int64_t pad_id) {
    std::vector<::pldr::audit::AuditPrompt> out;
    for (const auto& p : given) {
        if (!p.ids.empty()) {
            out.push_back({p.text, p.ids});
        } else {
            PLDR_REQUIRE(!p.text.empty(), "empty audit prompt");
            PLDR_REQUIRE(tok, "a text prompt needs ", tok_path, " (or give token ids)");
            out.push_back({p.text, tok->encode_prompt(p.text)});
        }
    }
    if (given.empty()) {
        if (tok) {
            for (const auto& t : ::pldr::audit::default_text_prompts())
                out.push_back({t, tok->encode_prompt(t)});
        } else {
            for (const auto& ids : ::pldr::audit::default_id_prompts(vocab, pad_id))
                out.push_back({"", ids});
        }
    }
    return out;
}

// `pldr train --audit-every`: `pldr audit --steps 8 --cont-len 32` on the model as it trains
// (the given prompts or the built-in ones, with the run's tokenizer), reduced to its curve point.
// No held-out loss and no TruthfulQA: the curve point has neither.
class TrainAuditor {
  public:
    explicit TrainAuditor(std::vector<AuditPrompt> given) : given_(std::move(given)) {}
    template <typename T>
    std::string operator()(const ::pldr::Model<T>& m, const std::string& tokenizer_path) {
        if (!ready_) {  // the prompts, once: the model's vocabulary and the run's tokenizer
            if (!tokenizer_path.empty()) tok_ = std::make_unique<::pldr::Tokenizer>(tokenizer_path);
            in_.prompts =
                audit_prompts(given_, tok_.get(), "a tokenizer.model in the data directory",
                              m.cfg.vocab_size, m.cfg.pad_token_id);
            ready_ = true;
        }
        ::pldr::audit::AuditConfig cfg;
        cfg.steps = kSteps;
        cfg.cont_len = kContLen;
        const auto r = ::pldr::audit::run_audit(m, in_, cfg);
        return ::pldr::audit::curve_point(::pldr::audit::report_json(r)).dump();
    }
    static constexpr int64_t kSteps = 8, kContLen = 32;

  private:
    std::vector<AuditPrompt> given_;
    std::unique_ptr<::pldr::Tokenizer> tok_;
    ::pldr::audit::AuditInputs in_;
    bool ready_ = false;
};

const ::pldr::Tokenizer& tok_of(const Model& m) {
    return m.tokenizer().impl()->tok;
}
void limit_items(std::vector<McItem>& v, int64_t limit) {
    PLDR_REQUIRE(limit >= 0, "limit must be >= 0 (got ", limit, ")");
    if (limit > 0 && size_t(limit) < v.size()) v.resize(size_t(limit));
}
}  // namespace

McAccuracy eval_truthfulqa(const Model& m, const std::string& path, ScoreMode mode, int64_t limit) {
    const ::pldr::Tokenizer& tok = tok_of(m);
    std::vector<McItem> mc1, mc2;
    load_truthfulqa(path, &mc1, &mc2);
    limit_items(mc1, limit);
    limit_items(mc2, limit);
    const auto r = with_scoring(impl_of(m), [&](const auto& mm, const auto* device) {
        return ::pldr::eval_truthfulqa(mm, tok, mc1, mc2, internal(mode), device);
    });
    McAccuracy a;
    a.items = int64_t(mc1.size());
    a.mc1 = r.mc1_mean;
    a.mc2 = r.mc2_mean;
    a.item_mc1 = r.mc1;
    a.item_mc2 = r.mc2;
    a.lls = r.mc1_scores.lls;
    a.lls_mc2 = r.mc2_scores.lls;
    return a;
}

McAccuracy eval_piqa(const Model& m, const std::string& jsonl, const std::string& labels,
                     ScoreMode mode, int64_t limit) {
    const ::pldr::Tokenizer& tok = tok_of(m);
    PLDR_REQUIRE(!labels.empty(), "piqa needs a labels file (valid-labels.lst)");
    auto items = load_piqa(jsonl, labels);
    limit_items(items, limit);
    const auto r = with_scoring(impl_of(m), [&](const auto& mm, const auto* device) {
        return ::pldr::eval_piqa(mm, tok, items, internal(mode), device);
    });
    McAccuracy a;
    a.items = int64_t(items.size());
    a.acc = r.acc_mean;
    a.acc_norm = r.acc_norm_mean;
    a.item_acc = r.acc;
    a.item_acc_norm = r.acc_norm;
    a.lls = r.scores.lls;
    return a;
}

Perplexity perplexity(const Model& m, const std::string& text) {
    const ::pldr::Tokenizer& tok = tok_of(m);
    const auto r = with_scoring(impl_of(m), [&](const auto& mm, const auto* device) {
        return ::pldr::perplexity(mm, tok, text, 0, device);  // (each window's forward there)
    });
    Perplexity p;
    p.loglikelihood = r.loglikelihood;
    p.tokens = r.tokens;
    p.bytes = r.bytes;
    p.words = r.words;
    p.token_perplexity = r.token_perplexity();
    p.word_perplexity = r.word_perplexity();
    p.bits_per_byte = r.bits_per_byte();
    return p;
}

std::vector<GStats> g_lm_stats(const ForwardResult& r) {
    std::vector<GStats> out;
    for (int64_t l = 0; l < r.num_layers; ++l) {
        const Tensor& G = r.layer(l, "G_LM");
        GStats s;
        s.layer = l;
        s.shape = G.shape;
        const int64_t n = G.numel();
        PLDR_REQUIRE(n > 0, "G_LM of layer ", l, " is empty");
        double lo = INFINITY, hi = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double v = G.dtype == DType::F32 ? double(G.f32()[i]) : G.f64()[i];
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            sum += v;
        }
        s.mean = sum / double(n);
        s.min = lo;
        s.max = hi;
        out.push_back(s);
    }
    return out;
}

std::vector<std::vector<double>> eps_g(const Model& m, const std::vector<int64_t>& ids,
                                       int64_t prefix_len) {
    return impl_of(m).visit(
        [&](const auto& model) { return ::pldr::audit::eps_g_after(model, ids, prefix_len); });
}

bool is_id_line(const std::string& s) {
    bool digit = false;
    for (char c : s) {
        if (c >= '0' && c <= '9')
            digit = true;
        else if (c != ',' && c != ' ' && c != '\t' && c != '\r')
            return false;
    }
    return digit;
}

std::vector<int64_t> parse_ids(const std::string& s, const std::string& what) {
    std::vector<int64_t> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        std::string tok = s.substr(i, j - i);
        while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
        while (!tok.empty() && tok.back() == ' ') tok.pop_back();
        PLDR_REQUIRE(!tok.empty(), what, ": empty token id in '", s, "'");
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(tok.c_str(), &end, 10);
        PLDR_REQUIRE(end && *end == '\0' && errno == 0, what, ": '", tok,
                     "' is not an integer token id");
        PLDR_REQUIRE(v >= 0, what, ": token id ", v, " is negative");
        out.push_back(int64_t(v));
        i = j + 1;
    }
    return out;
}

std::vector<AuditPrompt> read_audit_prompts(const std::string& path, bool has_tokenizer,
                                            const std::string& tokenizer_path) {
    auto trim = [](std::string s) {
        while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
            s.pop_back();
        size_t i = 0;
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        return s.substr(i);
    };
    std::istringstream ss(::pldr::read_file(path));
    std::vector<AuditPrompt> out;
    std::string line;
    int64_t lineno = 0;
    while (std::getline(ss, line)) {
        ++lineno;
        line = trim(line);
        if (line.empty()) continue;
        AuditPrompt p;
        if (is_id_line(line)) {
            p.ids = parse_ids(line, path + ":" + std::to_string(lineno));
        } else {
            PLDR_REQUIRE(has_tokenizer, path, ":", lineno, ": a text prompt needs ", tokenizer_path,
                         " (or give comma-separated token ids)");
            p.text = line;
        }
        out.push_back(std::move(p));
    }
    PLDR_REQUIRE(!out.empty(), path, ": empty prompt set (no prompts in the file)");
    return out;
}

AuditResult audit(const Model& m, const AuditOptions& opt) {
    const Model::Impl& im = impl_of(m);
    const ::pldr::Tokenizer* tok = im.internal_tok();
    PLDR_REQUIRE(opt.steps >= 1, "--steps must be >= 1");
    PLDR_REQUIRE(opt.cont_len >= 1, "--cont-len must be >= 1");
    PLDR_REQUIRE(opt.pad >= 0, "--pad must be >= 0");
    if (!opt.out_dir.empty()) {  // checked before the audit runs
        ::pldr::InputSet inputs = inputs_of(m);
        inputs.add_file(opt.truthfulqa);
        require_output_dir(opt.out_dir, inputs, "out_dir", {"audit.json", "report.html"},
                           opt.force);
    }
    ::pldr::audit::AuditInputs in;
    in.prompts = audit_prompts(opt.prompts, tok, im.info.dir + "/tokenizer.model",
                               im.info.vocab_size, im.info.pad_id);
    if (!opt.heldout_ids.empty()) {
        in.heldout = opt.heldout_ids;
        in.heldout_source = opt.heldout_source.empty() ? "given ids" : opt.heldout_source;
    } else if (!opt.heldout_text.empty()) {
        PLDR_REQUIRE(tok, "a held-out text needs ", im.info.dir, "/tokenizer.model");
        in.heldout = tok->encode(opt.heldout_text);
        in.heldout_source = opt.heldout_source.empty() ? "given text" : opt.heldout_source;
    } else if (tok) {
        in.heldout = tok->encode(::pldr::audit::default_heldout_text());
        in.heldout_source = "built-in paragraph";
    } else {
        for (const auto& p : in.prompts)
            in.heldout.insert(in.heldout.end(), p.ids.begin(), p.ids.end());
        in.heldout_source = "the prompts, concatenated";
    }
    if (int64_t(in.heldout.size()) > 4 * im.info.max_position)
        in.heldout.resize(size_t(4 * im.info.max_position));
    std::vector<McItem> mc1;
    if (!opt.truthfulqa.empty() && opt.items > 0) {
        PLDR_REQUIRE(tok, "--truthfulqa needs ", im.info.dir, "/tokenizer.model");
        load_truthfulqa(opt.truthfulqa, &mc1, &in.mc2);
        in.tok = tok;
        in.mc2_items = opt.items;
    }
    ::pldr::audit::AuditConfig cfg;
    cfg.steps = opt.steps;
    cfg.cont_len = opt.cont_len;
    cfg.pad = opt.pad;
    auto r = im.visit([&](const auto& mm) { return ::pldr::audit::run_audit(mm, in, cfg); });
    r.model_dir = im.info.dir;
    AuditResult out;
    out.json = ::pldr::audit::report_json(r).dump(1) + "\n";
    out.html = ::pldr::audit::report_html(r);
    out.summary = ::pldr::audit::report_summary(r);
    if (!opt.out_dir.empty()) {
        std::filesystem::create_directories(opt.out_dir);
        write_file_atomic(opt.out_dir + "/audit.json", out.json);
        write_file_atomic(opt.out_dir + "/report.html", out.html);
    }
    return out;
}

TrainSummary train(const TrainOptions& o, const std::function<bool(const TrainStep&)>& on_step) {
    TrainCallbacks cb;
    cb.on_step = on_step;
    return train(o, cb);
}

TrainSummary train(const TrainOptions& o, const TrainCallbacks& cb) {
    check_options(o);
    const DeviceSpec dev = ::pldr::parse_device(o.device);  // cuda: the steps run there
    ::pldr::TrainOptions t;
    t.preset = o.preset;
    t.config_path = o.config_path;
    t.init_dir = o.init_dir;
    t.fixed_g_identity = o.fixed_g_identity;
    t.data_dir = o.data_dir;
    t.out_dir = o.out_dir;
    t.force = o.force;
    t.resume_dir = o.resume_dir;
    t.metrics_path = o.metrics_path;
    t.dtype = name_of(o.dtype);
    t.numerics = o.reference_numerics ? "reference" : "exact";
    t.steps = o.steps;
    t.batch = o.batch;
    t.accum = o.accum;
    t.ctx = o.ctx;
    t.seed = o.seed;
    t.shuffle = o.shuffle;
    t.lr = o.lr;
    t.warmup = o.warmup;
    t.lr_alpha = o.lr_alpha;
    t.weight_decay = o.weight_decay;
    t.dag = {o.dag.A, o.dag.Ap, o.dag.G};
    t.clip = o.clip == ClipMode::NONE   ? ::pldr::ClipMode::NONE
             : o.clip == ClipMode::NORM ? ::pldr::ClipMode::NORM
                                        : ::pldr::ClipMode::VALUE;
    t.clip_value = o.clip_value;
    t.clip_norm = o.clip_norm;
    t.precision = o.precision;
    t.given = o.given;
    t.eval_every = o.eval_every;
    t.eval_batches = o.eval_batches;
    t.save_every = o.save_every;
    t.audit_every = o.audit_every;
    t.stop_at = o.stop_at;
    t.zero1 = o.zero1;
    t.recompute = o.recompute;
    t.dist_timeout = o.dist_timeout;
    std::atomic<bool> own_stop{false};
    std::atomic<bool>& stop = cb.stop_flag ? *cb.stop_flag : own_stop;
    bool by_callback = false;
    ::pldr::TrainHooks hooks;
    hooks.message = [&](const std::string& m) {
        if (cb.on_message) cb.on_message(m);
    };
    hooks.on_step = [&](const ::pldr::StepReport& s) {
        if (!cb.on_step) return;
        TrainStep ts;
        ts.step = s.step;
        ts.total = s.total;
        const auto& l = s.r.loss;
        ts.loss = {l.value, l.ce, l.accuracy, l.dagA, l.dagAp, l.dagG, l.scored};
        ts.lr = s.r.lr;
        ts.grad_norm = s.r.grad_norm;
        ts.tokens_per_s = s.tokens_per_s;
        ts.elapsed_s = s.elapsed_s;
        ts.eta_s = s.eta_s;
        if (!cb.on_step(ts)) {
            by_callback = true;
            stop = true;
        }
    };
    hooks.on_eval = [&](const ::pldr::EvalReport& e) {
        if (!cb.on_eval) return;
        TrainEval te;
        te.step = e.step;
        ShardEval& r = te.result;
        r.chunks = e.r.chunks;
        r.tokens = e.r.tokens;
        r.loss = e.r.loss;
        r.ce = e.r.ce;
        r.accuracy = e.r.accuracy;
        r.perplexity = e.r.perplexity;
        r.dagA = e.r.dagA;
        r.dagAp = e.r.dagAp;
        r.dagG = e.r.dagG;
        cb.on_eval(te);
    };
    hooks.stop_flag = &stop;
    // The prompt file is read before training (a bad one fails at once); its text lines are
    // encoded at the first audit, with the run's tokenizer.
    TrainAuditor auditor(o.audit_every > 0 && !o.audit_prompts.empty()
                             ? read_audit_prompts(o.audit_prompts, true, "")
                             : std::vector<AuditPrompt>{});
    if (o.audit_every > 0) {
        hooks.audit_f32 = [&](const ::pldr::Model<float>& m, const std::string& tp) {
            return auditor(m, tp);
        };
        hooks.audit_f64 = [&](const ::pldr::Model<double>& m, const std::string& tp) {
            return auditor(m, tp);
        };
    }
    if (dev.kind == DeviceKind::CUDA) {
        hooks.backend_f32 = [dev](::pldr::Model<float>& m) { return gpu::step_backend(m, dev); };
        hooks.backend_f64 = [dev](::pldr::Model<double>& m) { return gpu::step_backend(m, dev); };
    }
    const ::pldr::TrainOutcome out = run_training(t, hooks);
    TrainSummary s;
    s.steps_done = out.step;
    s.start_step = out.start_step;
    s.num_params = out.num_params;
    s.stop_reason = out.reason == ::pldr::StopReason::COMPLETED ? "completed"
                    : by_callback                               ? "callback"
                    : out.reason == ::pldr::StopReason::STOP_AT ? "stop_at"
                                                                : "interrupted";
    s.has_eval = out.has_eval;
    const auto& e = out.last_eval;
    s.last_eval = {e.loss, e.ce, e.accuracy, e.dagA, e.dagAp, e.dagG, e.tokens};
    s.tokens_per_s = out.tokens_per_s;
    s.valid_unigram_entropy = out.valid_unigram_entropy;
    s.ranks = out.ranks;
    s.root = ::pldr::dist::is_root();
    s.comm_s_per_step = out.comm_s_per_step;
    return s;
}

}  // namespace pldr::api
