// The public API's tools over the internals: model directories (inspect), tokenizer training,
// data preparation, evaluation on token shards, the collapse to a fixed-G_LM model.
#include <map>

#include "api_impl.h"
#include "core/alloc.h"
#include "infer/collapse.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "io/model_dir.h"
#include "io/model_load.h"
#include "io/param_names.h"
#include "model/forward.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/metrics.h"
#include "train/prepare.h"
#include "train/shard.h"
#include "train/step.h"

namespace pldr::api {

void tune_allocator() {
    ::pldr::tune_allocator();
}

bool is_internal_error(const std::exception& e) {
    return dynamic_cast<const ::pldr::InternalError*>(&e) != nullptr;
}
void internal_check(bool cond, const std::string& what) {
    if (!cond) throw ::pldr::InternalError("internal check failed: " + what);
}

// ---- Tokenizer (standalone) ------------------------------------------------------------------

int64_t Tokenizer::pad_id() const {
    return impl_->tok.pad_id();
}
std::vector<int64_t> Tokenizer::encode_document(const std::string& text) const {
    return impl_->tok.encode_document(text);
}
Tokenizer Tokenizer::load(const std::string& path) {
    return Tokenizer(std::make_shared<const Impl>(path));
}

void train_tokenizer(const TokenizerTrainOptions& opt) {
    ::pldr::TokenizerTrainOptions o;
    o.input_files = opt.input_files;
    o.output_prefix = opt.output_prefix;
    o.vocab_size = opt.vocab_size;
    o.model_type = opt.model_type;
    o.character_coverage = opt.character_coverage;
    o.input_sentence_size = opt.input_sentence_size;
    o.num_threads = opt.num_threads;
    o.seed = opt.seed;
    o.verbose = opt.verbose;
    {
        ::pldr::InputSet in;
        for (const auto& f : opt.input_files) in.add_file(f);
        require_output_path(opt.output_prefix, "output_prefix");
        for (const char* ext : {".model", ".vocab"})
            require_output_file(opt.output_prefix + ext, in, "output_prefix", opt.force);
    }
    ::pldr::train_tokenizer(o);
}

// ---- Model directories -----------------------------------------------------------------------

ModelDirInfo inspect_model_dir(const std::string& dir) {
    ModelFiles mf(dir);
    check_params_against_file(mf);
    const Config& c = mf.config();
    ModelDirInfo r;
    r.dir = mf.dir();
    r.weights_path = mf.weights_path();
    r.tokenizer_path = mf.tokenizer_path();
    r.sharded = mf.sharded();
    r.learned_g = c.learned_g();
    if (!r.learned_g) r.g_type = g_type_name(c.g_type);
    r.config_json = config_to_json(c);
    std::map<std::string, int64_t> groups;
    for (const auto& p : expected_params(c)) {
        if (p.buffer) continue;
        groups[param_group(p.name)] += shape_numel(p.shape);
        r.num_params += shape_numel(p.shape);
    }
    r.param_groups.assign(groups.begin(), groups.end());
    for (const auto& name : mf.names()) {
        const TensorInfo& t = mf.info(name);
        r.tensors.push_back({name, dtype_name(t.dtype), t.shape});
    }
    return r;
}

void Model::save(const std::string& dir, DType stored, bool force) const {
    PLDR_REQUIRE(stored == DType::F32 || stored == DType::F64, "a model is stored as f32 or f64");
    require_output_dir(dir, inputs_of(*this), "the output directory",
                       {"config.json", "model.safetensors"}, force);
    impl_of(*this).visit_host([&](const auto& m) {
        save_model(m, dir, stored == DType::F64 ? ::pldr::DType::F64 : ::pldr::DType::F32);
    });
}

// ---- Low-precision weights -------------------------------------------------------------------

ConvertResult convert_model(const std::string& dir, const std::string& out_dir,
                            const std::string& dtype, bool force) {
    WeightFormat f;
    if (dtype == "f32" || dtype == "float32")
        f = WeightFormat::DENSE;
    else if (dtype == "bf16" || dtype == "bfloat16")
        f = WeightFormat::BF16;
    else if (dtype == "q8" || dtype == "q8_0")
        f = WeightFormat::Q8_0;
    else
        fail("convert: dtype must be f32, bf16 or q8 (got '", dtype, "')");
    const ConvertStats st = convert_model_dir(dir, out_dir, f, force);
    ConvertResult r;
    r.dtype = weight_format_name(f);
    r.packed_tensors = st.packed_tensors;
    r.packed_params = st.packed_numel;
    r.packed_bytes = st.packed_bytes;
    r.bytes_in = st.in_bytes;
    r.bytes_out = st.out_bytes;
    return r;
}

// ---- Data preparation, evaluation on shards --------------------------------------------------

PrepareStats prepare_corpus(const PrepareOptions& opt) {
    ::pldr::PrepareOptions o;
    o.tokenizer_path = opt.tokenizer_path;
    o.input_files = opt.input_files;
    o.one_doc_per_line = opt.one_doc_per_line;
    o.ctx = opt.ctx;
    o.block_docs = opt.block_docs;
    o.valid_fraction = opt.valid_fraction;
    o.valid_files = opt.valid_files;
    o.output_dir = opt.output_dir;
    o.num_threads = opt.num_threads;
    {
        ::pldr::InputSet in;
        in.add_file(opt.tokenizer_path);
        for (const auto& f : opt.input_files) in.add_file(f);
        for (const auto& f : opt.valid_files) in.add_file(f);
        require_output_dir(opt.output_dir, in, "output_dir",
                           {"train.pldrtok", "valid.pldrtok", "meta.json"}, opt.force);
    }
    const ::pldr::PrepareStats st = ::pldr::prepare_corpus(o);
    const int64_t pad = ::pldr::Tokenizer(opt.tokenizer_path).pad_id();
    auto split = [&](const ::pldr::SplitStats& s, const char* file) {
        SplitStats r{s.documents, s.tokens, s.chunks, s.dropped_tokens, 0};
        r.unigram_entropy = unigram_entropy(ShardReader(opt.output_dir + "/" + file), pad);
        return r;
    };
    PrepareStats r;
    r.train = split(st.train, "train.pldrtok");
    r.has_valid = st.has_valid;
    if (st.has_valid) r.valid = split(st.valid, "valid.pldrtok");
    r.empty_documents = st.empty_documents;
    r.vocab_size = st.vocab_size;
    r.ctx = st.ctx;
    return r;
}

namespace {
// The losses of a model's copy on a GPU (gpu::loss_and_grads, under the copy's lock) as a
// Trainer's step backend for validation only: evaluate_shard on the device.
template <typename T>
class CopyLoss final : public StepBackend<T> {
  public:
    CopyLoss(const gpu::Copy& c, std::string name) : c_(c), name_(std::move(name)) {}
    LossResult loss_and_grads(const TokenBatch& b, const DagCoeffs& dag, T* grads, double,
                              double) override {
        PLDR_CHECK(!grads);  // (validation: the loss alone)
        return gpu::loss_and_grads(c_, b.tokens, b.B, b.S1, dag, grads);
    }
    void parameters_changed() override { fail("internal: a model's GPU copy takes no steps"); }
    std::string name() const override { return name_; }

  private:
    const gpu::Copy& c_;
    std::string name_;
};
}  // namespace

ShardEval evaluate_shard(const Model& model, const std::string& path, int64_t batch,
                         int64_t batches, int64_t ctx_opt) {
    ShardReader shard(path);
    const ModelInfo& mi = model.info();
    PLDR_REQUIRE(shard.vocab_size() == mi.vocab_size, path, ": vocabulary size ",
                 shard.vocab_size(), " differs from the model's ", mi.vocab_size);
    PLDR_REQUIRE(shard.ctx() > 0, path, ": the shard is not packed into chunks");
    const int64_t ctx = ctx_opt > 0 ? ctx_opt : shard.ctx();
    PLDR_REQUIRE(ctx >= 2 && ctx <= shard.ctx(), "--ctx must be in [2, ", shard.ctx(), "]");
    PLDR_REQUIRE(ctx - 1 <= mi.max_position, "the context (", ctx - 1,
                 " tokens) is longer than max_position_embeddings = ", mi.max_position);
    PLDR_REQUIRE(batch > 0 && batches >= 0, "--batch must be > 0 and --batches >= 0");
    const Model::Impl& im = impl_of(model);
    return im.visit_host([&](const auto& m) {
        using T = scalar_t<decltype(m)>;
        // Evaluation reads the parameters only (Trainer::evaluate runs no optimizer step), so
        // the shared immutable model serves; on a GPU its copy there computes the losses.
        auto& mm = const_cast<::pldr::Model<T>&>(m);
        TrainConfig tc;
        std::shared_ptr<StepBackend<T>> on_device;
        if (im.dev) on_device = std::make_shared<CopyLoss<T>>(*im.dev, im.device.name());
        Trainer<T> tr(mm, tc, {}, on_device);
        const int64_t nb =
            batches > 0
                ? batches
                : checked_add(shard.num_chunks(), batch - 1, "the chunks plus --batch") / batch;
        const EvalResult e = ::pldr::evaluate_shard(tr, shard, ctx, batch, nb);
        ShardEval r;
        r.ctx = ctx;
        r.chunks = e.chunks;
        r.tokens = e.tokens;
        r.loss = e.loss;
        r.ce = e.ce;
        r.accuracy = e.accuracy;
        r.perplexity = e.perplexity;
        r.dagA = e.dagA;
        r.dagAp = e.dagAp;
        r.dagG = e.dagG;
        r.unigram_entropy = unigram_entropy(shard, mi.pad_id);
        return r;
    });
}

// ---- Collapse --------------------------------------------------------------------------------

Model collapse(const Model& model, const std::vector<int64_t>& g_prompt) {
    return impl_of(model).visit([&](const auto& m) {
        using T = scalar_t<decltype(m)>;
        GCache<T> g;
        if (m.cfg.learned_g()) {
            if (!g_prompt.empty()) {
                check_inputs(m, g_prompt.data(), 1, int64_t(g_prompt.size()));
                g = prompt_g_cache(m, g_prompt);
            } else {
                g = reference_g_cache(m);
            }
        }
        auto impl = std::make_shared<Model::Impl>();
        auto c = std::make_unique<::pldr::Model<T>>(collapse_model(m, g));
        impl->info = info_of(*c, model.info().dir);
        if constexpr (std::is_same_v<T, double>) {
            impl->m64 = std::move(c);
        } else {
            keep_panel_weights(*c);  // as Model::load
            impl->m32 = std::move(c);
        }
        return Model(std::move(impl));
    });
}

ModelComparison compare_models(const Model& a, const Model& b, const std::vector<int64_t>& ids,
                               int64_t window) {
    PLDR_REQUIRE(a.info().dtype == b.info().dtype,
                 "compare_models: the models have different precisions");
    PLDR_REQUIRE(a.info().vocab_size == b.info().vocab_size,
                 "compare_models: the models have different vocabularies");
    PLDR_REQUIRE(!ids.empty(), "compare_models: no tokens");
    return impl_of(a).visit([&](const auto& ma) {
        using T = scalar_t<decltype(ma)>;
        const auto& im = impl_of(b);
        im.require_host();
        const ::pldr::Model<T>& mb = [&]() -> const ::pldr::Model<T>& {
            if constexpr (std::is_same_v<T, double>)
                return *im.m64;
            else
                return *im.m32;
        }();
        check_inputs(ma, ids.data(), 1, 1);
        for (int64_t id : ids)
            PLDR_REQUIRE(id >= 0 && id < ma.cfg.vocab_size, "token id ", id,
                         " outside the vocabulary");
        const CompareReport r = ::pldr::compare_models(ma, mb, ids, window);
        return ModelComparison{r.tokens, r.kl_mean, r.kl_max, r.top1_agree, r.nll_a, r.nll_b};
    });
}

// ---- Training metrics ------------------------------------------------------------------------

namespace {
std::vector<LossCurve> curves_of(std::vector<::pldr::Curve> in) {
    std::vector<LossCurve> r;
    for (auto& c : in) r.push_back({std::move(c.label), std::move(c.x), std::move(c.y)});
    return r;
}
}  // namespace

std::vector<LossCurve> read_loss_curves(const std::string& path) {
    return curves_of(::pldr::read_loss_curves(path));
}

std::vector<LossCurve> read_audit_curves(const std::string& path) {
    return curves_of(::pldr::read_audit_curves(path));
}

CheckpointProgress checkpoint_progress(const std::string& dir) {
    CheckpointProgress p;
    if (!::pldr::file_exists(dir + "/" + kTrainStateFile)) return p;
    const CheckpointInfo info = read_checkpoint_info(dir);
    const auto o = parse_json_strict(info.options_json, dir + ": the training state's options");
    auto field = [&](const char* k) {
        PLDR_REQUIRE(
            o.is_object() && o.contains(k) && o[k].is_number_integer() && o[k].get<int64_t>() >= 1,
            dir, ": the training state's options lack a positive '", k, "'");
        return double(o[k].get<int64_t>());
    };
    p.step = info.step;
    p.tokens = double(info.step) * double(info.world_size) * field("batch") * field("accum") *
               (field("ctx") - 1);
    return p;
}

}  // namespace pldr::api
