// The Python module `pldr` over the public C++ API (include/pldr/pldr.hpp). Arrays come back
// as numpy arrays that share the library's buffers (no copy; read-only), the GIL is released
// while the library computes, and pldr::Error arrives as pldr.Error (a RuntimeError) with the
// library's message. docs/python.md shows a session.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "options_py.h"
#include "pldr/pldr.hpp"

namespace py = pybind11;
namespace api = pldr::api;

namespace {

// A numpy view of a library tensor; the array keeps the buffer alive through a capsule.
py::array to_numpy(const api::Tensor& t) {
    if (!t.storage) return py::array_t<double>(std::vector<py::ssize_t>{0});
    auto* owner = new std::shared_ptr<const void>(t.storage);
    py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); });
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    const py::dtype dt = t.dtype == api::DType::F32   ? py::dtype::of<float>()
                         : t.dtype == api::DType::F64 ? py::dtype::of<double>()
                                                      : py::dtype::of<int64_t>();
    py::array a(dt, shape, t.data(), base);
    a.attr("flags").attr("writeable") = false;
    return a;
}

// Token ids from a Python sequence or a 1-D / 2-D integer array: (flat ids, rows).
std::pair<std::vector<int64_t>, int64_t> ids_of(const py::handle& obj, const char* what) {
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> a;
    try {
        a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
    } catch (const py::error_already_set&) {
    }
    if (!a) throw pldr::Error(std::string(what) + ": expected token ids (a list or integer array)");
    if (a.ndim() != 1 && a.ndim() != 2)
        throw pldr::Error(std::string(what) + ": expected a 1-D or 2-D array of token ids");
    std::vector<int64_t> v(a.data(), a.data() + a.size());
    const int64_t rows = a.ndim() == 2 ? int64_t(a.shape(0)) : 1;
    if (v.empty()) throw pldr::Error(std::string(what) + ": no token ids");
    return {std::move(v), rows};
}

py::dict forward_dict(const api::ForwardResult& r) {
    py::dict d;
    d["logits"] = to_numpy(r.logits());
    py::list A, A_LM, A_P, G_LM, E;
    for (int64_t l = 0; l < r.num_layers; ++l) {
        const std::string p = "fwd.layer" + std::to_string(l) + ".";
        A.append(r.has(p + "A") ? py::object(to_numpy(r.get(p + "A"))) : py::none());
        A_LM.append(r.has(p + "A_LM") ? py::object(to_numpy(r.get(p + "A_LM"))) : py::none());
        A_P.append(r.has(p + "Ap") ? py::object(to_numpy(r.get(p + "Ap"))) : py::none());
        G_LM.append(to_numpy(r.get(p + "G_LM")));
        E.append(to_numpy(r.get(p + "E")));
    }
    d["A"] = A;
    d["A_LM"] = A_LM;
    d["A_P"] = A_P;
    d["G_LM"] = G_LM;
    d["E"] = E;
    py::dict all;
    for (const auto& [name, t] : r.tensors) all[py::str(name)] = to_numpy(t);
    d["tensors"] = all;
    return d;
}

py::list top_list(const std::vector<api::TopLogprob>& v) {
    py::list l;
    for (const auto& t : v) l.append(py::make_tuple(t.id, t.logprob));
    return l;
}

py::dict score_dict(const api::ScoreResult& r) {
    py::dict d;
    d["logprob"] = r.logprob;
    d["is_greedy"] = r.is_greedy;
    d["token_logprobs"] = r.token_logprobs;
    d["context_ids"] = r.context_ids;
    d["continuation_ids"] = r.continuation_ids;
    py::list top;
    for (const auto& t : r.top) top.append(top_list(t));
    d["top"] = top;
    return d;
}

py::dict loss_dict(const api::Loss& l) {
    py::dict d;
    d["value"] = l.value;
    d["ce"] = l.ce;
    d["accuracy"] = l.accuracy;
    d["dagA"] = l.dagA;
    d["dagAp"] = l.dagAp;
    d["dagG"] = l.dagG;
    d["scored"] = l.scored;
    return d;
}

// A Python exception raised inside a callback that runs while the GIL is released: kept here
// and re-raised once the library call has returned.
struct PendingError {
    std::optional<py::error_already_set> err;
    void rethrow() {
        if (err) {
            py::error_already_set e = std::move(*err);
            err.reset();
            throw e;
        }
    }
};

// pldr.Model(path, **options): the keywords of PLDR_LOAD_OPTIONS; path a str or os.PathLike.
api::Model load(const py::object& path, const py::kwargs& kw) {
    if (!py::isinstance<py::str>(path) && !py::hasattr(path, "__fspath__"))
        throw py::type_error("path must be a str or os.PathLike (got " +
                             std::string(py::str(py::type::handle_of(path).attr("__name__"))) +
                             ")");
    const std::string p = py::str(py::module_::import("os").attr("fspath")(path));
    const auto o = pldr_py::options_from<api::LoadOptions>(kw, "Model");
    py::gil_scoped_release nogil;
    return api::Model::load(p, o);
}

}  // namespace

// size-limit: table (the module definition: one .def per binding)
PYBIND11_MODULE(pldr, mod) {
    // The docstrings of the calls whose keyword arguments are the rows of an option table.
    static const std::string generate_doc = pldr_py::options_doc<api::GenerateOptions>(
        "Generates from a text prompt (or token ids) with the KV-cache and the G-cache; returns "
        "the generated text, or a dict with details=True. callback(id, text, logprob, "
        "text_so_far) runs per token; returning False stops.");
    static const std::string load_doc = pldr_py::options_doc<api::LoadOptions>(
        "Loads a model directory (config.json, the weights, tokenizer.model when present).");
    static const std::string train_doc = pldr_py::options_doc<api::TrainOptions>(
        "Trains (or resumes) on a prepared shard directory (data_dir) with checkpoints in "
        "out_dir; callback(step_dict) runs after every step, returning False stops (with a "
        "checkpoint).");
    static const std::string score_doc = pldr_py::options_doc<api::ScoreOptions>(
        "Log-likelihood of a continuation (text, or token ids) given a context.");
    mod.doc() = "pldr: PLDR-LLM models (Power Law Graph Attention) with their deductive outputs";
    mod.attr("__version__") = api::version();
    static py::exception<pldr::Error> error(mod, "Error", PyExc_RuntimeError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const pldr::Error& e) {
            error(e.what());
        }
    });

    py::class_<api::Tokenizer>(mod, "Tokenizer", "The model's SentencePiece tokenizer")
        .def("encode", &api::Tokenizer::encode, py::arg("text"), "token ids (no BOS/EOS)")
        .def("encode_prompt", &api::Tokenizer::encode_prompt, py::arg("text"),
             "the reference's prompt encoding (\"\" gives [EOS])")
        .def(
            "decode",
            [](const api::Tokenizer& t, const py::object& ids) {
                return t.decode(ids_of(ids, "decode").first);
            },
            py::arg("ids"))
        .def("token_text", &api::Tokenizer::token_text, py::arg("id"))
        .def("piece", &api::Tokenizer::piece, py::arg("id"))
        .def_property_readonly("vocab_size", &api::Tokenizer::vocab_size)
        .def_property_readonly("eos_id", &api::Tokenizer::eos_id);

    py::class_<api::Model>(mod, "Model", "A PLDR-LLM model directory, loaded")
        .def(py::init(&load), py::arg("path"), load_doc.c_str())
        .def_property_readonly("info",
                               [](const api::Model& m) {
                                   const auto& i = m.info();
                                   py::dict d;
                                   d["dir"] = i.dir;
                                   d["dtype"] = api::name_of(i.dtype);
                                   d["vocab_size"] = i.vocab_size;
                                   d["num_layers"] = i.num_layers;
                                   d["num_heads"] = i.num_heads;
                                   d["head_dim"] = i.head_dim;
                                   d["hidden_size"] = i.hidden_size;
                                   d["max_position"] = i.max_position;
                                   d["eos_id"] = i.eos_id;
                                   d["pad_id"] = i.pad_id;
                                   d["learned_g"] = i.learned_g;
                                   d["num_params"] = i.num_params;
                                   d["mapped"] = i.mapped;
                                   return d;
                               })
        .def_property_readonly("tokenizer", &api::Model::tokenizer,
                               py::return_value_policy::reference_internal)
        .def(
            "forward",
            [](const api::Model& m, const py::object& ids) {
                auto [v, rows] = ids_of(ids, "forward");
                api::ForwardResult r;
                {
                    py::gil_scoped_release nogil;
                    r = m.forward(v, rows);
                }
                return forward_dict(r);
            },
            py::arg("ids"),
            "One forward pass over token ids ([S] or [B,S]): a dict with logits [B,S,V], per "
            "layer lists A, A_LM, A_P, G_LM ([B,H,dk,dk]) and E ([B,H,S,S]), and 'tensors' "
            "(every intermediate under the golden naming)")
        .def(
            "generate",
            [](const api::Model& m, const py::object& prompt, const py::object& callback,
               bool details, const py::kwargs& kw) -> py::object {
                const auto o = pldr_py::options_from<api::GenerateOptions>(kw, "generate");
                PendingError pending;
                api::TokenCallback cb;
                if (!callback.is_none())
                    cb = [&](const api::TokenInfo& t, const std::string& text) {
                        py::gil_scoped_acquire gil;
                        try {
                            py::object r = callback(t.id, t.text, t.logprob, text);
                            return r.is_none() || r.cast<bool>();
                        } catch (py::error_already_set& e) {
                            pending.err = std::move(e);
                            return false;
                        }
                    };
                api::Generation g;
                if (py::isinstance<py::str>(prompt)) {
                    const std::string p = prompt.cast<std::string>();
                    py::gil_scoped_release nogil;
                    g = m.generate(p, o, cb);
                } else {
                    auto ids = ids_of(prompt, "generate").first;
                    py::gil_scoped_release nogil;
                    g = m.generate_ids(ids, o, cb);
                }
                pending.rethrow();
                if (!details) return py::str(g.text);
                py::dict d;
                d["text"] = g.text;
                d["prompt_ids"] = g.prompt_ids;
                d["ids"] = g.ids;
                d["finish_reason"] = g.finish_reason;
                py::list toks;
                for (const auto& t : g.tokens) {
                    py::dict td;
                    td["id"] = t.id;
                    td["text"] = t.text;
                    td["logprob"] = t.logprob;
                    td["top"] = top_list(t.top);
                    toks.append(td);
                }
                d["tokens"] = toks;
                return d;
            },
            py::arg("prompt"), py::kw_only(), py::arg("callback") = py::none(),
            py::arg("details") = false, generate_doc.c_str())
        .def(
            "score",
            [](const api::Model& m, const py::object& context, const py::object& continuation,
               const py::kwargs& kw) {
                const auto o = pldr_py::options_from<api::ScoreOptions>(kw, "score");
                api::ScoreResult r;
                if (py::isinstance<py::str>(context) && py::isinstance<py::str>(continuation)) {
                    const auto c = context.cast<std::string>();
                    const auto x = continuation.cast<std::string>();
                    py::gil_scoped_release nogil;
                    r = m.score(c, x, o);
                } else {
                    const auto c = ids_of(context, "score context").first;
                    const auto x = ids_of(continuation, "score continuation").first;
                    py::gil_scoped_release nogil;
                    r = m.score_ids(c, x, o);
                }
                return score_dict(r);
            },
            py::arg("context"), py::arg("continuation"), score_doc.c_str())
        .def(
            "loss_and_grads",
            [](const api::Model& m, const py::object& batch, std::vector<double> dag) {
                auto [v, rows] = ids_of(batch, "loss_and_grads");
                if (dag.size() != 3)
                    throw pldr::Error("dag takes three coefficients (c_A, c_Ap, c_G)");
                api::Gradients g;
                {
                    py::gil_scoped_release nogil;
                    g = m.loss_and_grads(v, rows, {dag[0], dag[1], dag[2]});
                }
                py::dict grads;
                for (const auto& [name, t] : g.grads) grads[py::str(name)] = to_numpy(t);
                py::dict d = loss_dict(g.loss);
                d["grads"] = grads;
                return d;
            },
            py::arg("batch"), py::arg("dag") = std::vector<double>{0, 0, 0},
            "Loss of training sequences [B,S1] (inputs tokens[:, :-1], targets tokens[:, 1:]) and "
            "the gradient of every parameter under the spec's names ('grads')")
        .def("parameter_names", &api::Model::parameter_names)
        .def(
            "parameter",
            [](const api::Model& m, const std::string& n) { return to_numpy(m.parameter(n)); },
            py::arg("name"));

    py::class_<api::Session>(mod, "Session", "A decoding session with the KV-cache and G-cache")
        .def(py::init([](const api::Model& m, const std::string& cache, int64_t max_len) {
                 return api::Session(m, api::cache_mode_from_name(cache), max_len);
             }),
             py::arg("model"), py::arg("cache") = "kvg", py::arg("max_len") = 0)
        .def(
            "prefill",
            [](api::Session& s, const py::object& ids) {
                auto v = ids_of(ids, "prefill").first;
                api::Tensor t;
                {
                    py::gil_scoped_release nogil;
                    t = s.prefill(v);
                }
                return to_numpy(t);
            },
            py::arg("ids"))
        .def(
            "decode",
            [](api::Session& s, int64_t id) {
                api::Tensor t;
                {
                    py::gil_scoped_release nogil;
                    t = s.decode(id);
                }
                return to_numpy(t);
            },
            py::arg("id"))
        .def("logprobs", &api::Session::logprobs)
        .def("reset", &api::Session::reset)
        .def_property_readonly("tokens", &api::Session::tokens)
        .def("__len__", &api::Session::length)
        .def("save_g_cache", &api::Session::save_g_cache, py::arg("path"), py::arg("force") = false)
        .def("load_g_cache", &api::Session::load_g_cache, py::arg("path"))
        .def("g_cache",
             [](const api::Session& s) {
                 py::list out;
                 for (const auto& l : s.g_cache()) {
                     py::dict d;
                     d["A"] = to_numpy(l.A);
                     d["A_LM"] = to_numpy(l.A_LM);
                     d["A_P"] = to_numpy(l.A_P);
                     d["G_LM"] = to_numpy(l.G_LM);
                     out.append(d);
                 }
                 return out;
             })
        .def("last_outputs", [](const api::Session& s) { return forward_dict(s.last_outputs()); });

    mod.def(
        "g_lm_stats",
        [](const api::Model& m, const py::object& ids) {
            auto [v, rows] = ids_of(ids, "g_lm_stats");
            std::vector<api::GStats> st;
            {
                py::gil_scoped_release nogil;
                st = api::g_lm_stats(m.forward(v, rows));
            }
            py::list out;
            for (const auto& s : st) {
                py::dict d;
                d["layer"] = s.layer;
                d["shape"] = s.shape;
                d["mean"] = s.mean;
                d["min"] = s.min;
                d["max"] = s.max;
                out.append(d);
            }
            return out;
        },
        py::arg("model"), py::arg("ids"), "mean, min and max of G_LM per layer for token ids");
    mod.def(
        "perplexity",
        [](const api::Model& m, const std::string& text) {
            api::Perplexity p;
            {
                py::gil_scoped_release nogil;
                p = api::perplexity(m, text);
            }
            py::dict d;
            d["loglikelihood"] = p.loglikelihood;
            d["tokens"] = p.tokens;
            d["token_perplexity"] = p.token_perplexity;
            d["word_perplexity"] = p.word_perplexity;
            d["bits_per_byte"] = p.bits_per_byte;
            return d;
        },
        py::arg("model"), py::arg("text"));
    mod.def(
        "audit",
        [](const api::Model& m, std::vector<std::string> prompts, int64_t steps,
           const std::string& out_dir, bool force) {
            api::AuditOptions o;
            for (auto& p : prompts) o.prompts.push_back({std::move(p), {}});
            o.steps = steps;
            o.out_dir = out_dir;
            o.force = force;
            std::string json;
            {
                py::gil_scoped_release nogil;
                json = api::audit(m, o).json;
            }
            return py::module_::import("json").attr("loads")(json);
        },
        py::arg("model"), py::arg("prompts") = std::vector<std::string>{}, py::arg("steps") = 16,
        py::arg("out_dir") = "", py::arg("force") = false,
        "The collapse audit (docs/audit.md): audit.json as a dict");
    mod.def(
        "train",
        [](const py::object& callback, const py::kwargs& kw) {
            const auto o = pldr_py::options_from<api::TrainOptions>(kw, "train");
            PendingError pending;
            std::function<bool(const api::TrainStep&)> cb;
            if (!callback.is_none())
                cb = [&](const api::TrainStep& s) {
                    py::gil_scoped_acquire gil;
                    try {
                        py::dict d = loss_dict(s.loss);
                        d["step"] = s.step;
                        d["total"] = s.total;
                        d["lr"] = s.lr;
                        d["grad_norm"] = s.grad_norm;
                        py::object r = callback(d);
                        return r.is_none() || r.cast<bool>();
                    } catch (py::error_already_set& e) {
                        pending.err = std::move(e);
                        return false;
                    }
                };
            api::TrainSummary s;
            {
                py::gil_scoped_release nogil;
                s = api::train(o, cb);
            }
            pending.rethrow();
            py::dict d;
            d["steps_done"] = s.steps_done;
            d["start_step"] = s.start_step;
            d["num_params"] = s.num_params;
            d["stop_reason"] = s.stop_reason;
            if (s.has_eval) d["last_eval"] = loss_dict(s.last_eval);
            return d;
        },
        py::kw_only(), py::arg("callback") = py::none(), train_doc.c_str());
}
