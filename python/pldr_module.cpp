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

// Token ids from a Python sequence or an integer array of at most `max_ndim` dimensions:
// (flat ids, rows). `what` names the argument ("score(context)"). Anything but integers is a
// TypeError (floats would be truncated, bools and complex numbers are no ids), and an array of
// more dimensions than the call takes is refused rather than flattened.
std::pair<std::vector<int64_t>, int64_t> ids_of(const py::handle& obj, const char* what,
                                                int max_ndim = 1) {
    const std::string w(what);
    if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj))
        throw py::type_error(w + ": expected token ids (a list or integer array), got a string");
    py::array a;
    try {
        a = py::array::ensure(obj);
    } catch (const py::error_already_set&) {
    }
    if (!a) throw py::type_error(w + ": expected token ids (a list or integer array)");
    if (a.size() == 0) throw pldr_py::ArgumentError(w + ": no token ids");
    // numpy makes [True, 3] an integer array: a bool in a list is refused as in an array.
    if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj))
        for (py::handle e : obj)
            if (PyBool_Check(e.ptr()))
                throw py::type_error(w + ": token ids must be integers (got a bool)");
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
        throw py::type_error(w + ": token ids must be integers (got " +
                             std::string(py::str(a.dtype())) + " values)");
    if (a.ndim() < 1 || a.ndim() > max_ndim)
        throw pldr_py::ArgumentError(w + ": expected a " + (max_ndim == 1 ? "1-D" : "1-D or 2-D") +
                                     " sequence of token ids (got " + std::to_string(a.ndim()) +
                                     " dimensions)");
    const auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    std::vector<int64_t> v(c.data(), c.data() + c.size());
    return {std::move(v), a.ndim() == 2 ? int64_t(a.shape(0)) : 1};
}

// Library text as a Python str: a token's text can end inside a UTF-8 character (byte-fallback
// pieces <0xNN>), so invalid bytes become U+FFFD instead of a UnicodeDecodeError; the exact
// bytes stay available where a token is reported (its "bytes").
py::str text_of(const std::string& s) {
    PyObject* o = PyUnicode_DecodeUTF8(s.data(), py::ssize_t(s.size()), "replace");
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
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

// A path argument: a str or an os.PathLike (pathlib.Path); `what` names it.
std::string path_of(const py::handle& path, const char* what) {
    if (!py::isinstance<py::str>(path) && !py::hasattr(path, "__fspath__"))
        throw py::type_error(std::string(what) + " must be a str or os.PathLike (got " +
                             std::string(py::str(py::type::handle_of(path).attr("__name__"))) +
                             ")");
    const py::object p = py::module_::import("os").attr("fspath")(path);
    if (!py::isinstance<py::str>(p))
        throw py::type_error(std::string(what) + " must be a str path (got bytes)");
    return p.cast<std::string>();
}

// pldr.Model(path, **options): the keywords of PLDR_LOAD_OPTIONS; path a str or os.PathLike.
api::Model load(const py::object& path, const py::kwargs& kw) {
    const std::string p = path_of(path, "path");
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
        "Trains (a new model from preset or config_path, a fine-tuning from init_dir, or a resume "
        "from resume_dir) on a prepared shard directory (data_dir) with checkpoints in "
        "out_dir; callback(step_dict) runs after every step, returning False stops (with a "
        "checkpoint).");
    static const std::string score_doc = pldr_py::options_doc<api::ScoreOptions>(
        "Log-likelihood of a continuation (text, or token ids) given a context.");
    mod.doc() = "pldr: PLDR-LLM models (Power Law Graph Attention) with their deductive outputs";
    mod.attr("__version__") = api::version();
    static py::exception<pldr::Error> error(mod, "Error", PyExc_RuntimeError);
    error.doc() = "An error of the pldr library (a RuntimeError) with its one-line message";
    // pldr.ArgumentError(pldr.Error, ValueError): a bad argument value.
    static py::object argument_error = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
        "pldr.ArgumentError",
        "A bad argument value (out of range, an unknown name, a wrong shape): a pldr.Error and a "
        "ValueError",
        py::make_tuple(error, py::handle(PyExc_ValueError)).ptr(), nullptr));
    mod.attr("ArgumentError") = argument_error;
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const pldr_py::ArgumentError& e) {
            PyErr_SetString(argument_error.ptr(), e.what());
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
                return text_of(t.decode(ids_of(ids, "decode(ids)").first));
            },
            py::arg("ids"), "the text of token ids (invalid UTF-8 reads as U+FFFD)")
        .def(
            "token_text",
            [](const api::Tokenizer& t, int64_t id) { return text_of(t.token_text(id)); },
            py::arg("id"),
            "the text one id adds (a byte piece that is not UTF-8 by itself reads as U+FFFD; "
            "token_bytes has its bytes)")
        .def(
            "token_bytes",
            [](const api::Tokenizer& t, int64_t id) { return py::bytes(t.token_text(id)); },
            py::arg("id"), "the bytes one id adds to the decoded text")
        .def(
            "piece", [](const api::Tokenizer& t, int64_t id) { return text_of(t.piece(id)); },
            py::arg("id"), "the raw SentencePiece piece ('▁the', '<0x0A>')")
        .def_property_readonly("vocab_size", &api::Tokenizer::vocab_size, "the number of pieces")
        .def_property_readonly("eos_id", &api::Tokenizer::eos_id, "the end-of-sequence id");

    py::class_<api::Model>(mod, "Model", "A PLDR-LLM model directory, loaded")
        .def(py::init(&load), py::arg("path"), load_doc.c_str())
        .def_property_readonly(
            "info",
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
            },
            "the model's shape and storage: dir, dtype, vocab_size, "
            "num_layers, num_heads, head_dim, hidden_size, max_position, "
            "eos_id, pad_id, learned_g, num_params, mapped")
        .def_property_readonly("tokenizer", &api::Model::tokenizer,
                               py::return_value_policy::reference_internal,
                               "the model's tokenizer (pldr.Error without tokenizer.model)")
        .def(
            "forward",
            [](const api::Model& m, const py::object& ids) {
                auto [v, rows] = ids_of(ids, "forward(ids)", 2);
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
                            py::object r =
                                callback(t.id, text_of(t.text), t.logprob, text_of(text));
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
                    auto ids = ids_of(prompt, "generate(prompt)").first;
                    py::gil_scoped_release nogil;
                    g = m.generate_ids(ids, o, cb);
                }
                pending.rethrow();
                if (!details) return text_of(g.text);
                py::dict d;
                d["text"] = text_of(g.text);
                d["prompt_ids"] = g.prompt_ids;
                d["ids"] = g.ids;
                d["finish_reason"] = g.finish_reason;
                py::list toks;
                for (const auto& t : g.tokens) {
                    py::dict td;
                    td["id"] = t.id;
                    td["text"] = text_of(t.text);
                    td["bytes"] = py::bytes(t.text);
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
                    const auto c = ids_of(context, "score(context)").first;
                    const auto x = ids_of(continuation, "score(continuation)").first;
                    py::gil_scoped_release nogil;
                    r = m.score_ids(c, x, o);
                }
                return score_dict(r);
            },
            py::arg("context"), py::arg("continuation"), score_doc.c_str())
        .def(
            "loss_and_grads",
            [](const api::Model& m, const py::object& batch, std::vector<double> dag) {
                auto [v, rows] = ids_of(batch, "loss_and_grads(batch)", 2);
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
        .def("parameter_names", &api::Model::parameter_names,
             "the names of the parameters (the spec's naming, as loss_and_grads' 'grads')")
        .def(
            "parameter",
            [](const api::Model& m, const std::string& n) { return to_numpy(m.parameter(n)); },
            py::arg("name"), "one parameter as a read-only numpy array (no copy)");

    py::class_<api::Session>(mod, "Session", "A decoding session with the KV-cache and G-cache")
        .def(py::init([](const api::Model& m, const std::string& cache, int64_t max_len) {
                 return api::Session(m, api::cache_mode_from_name(cache), max_len);
             }),
             py::arg("model"), py::arg("cache") = "kvg", py::arg("max_len") = 0,
             "A session over model: cache 'kvg' (KV + G cache), 'kv' or 'none'; max_len the "
             "KV-cache capacity (0 = the model's context length)")
        .def(
            "prefill",
            [](api::Session& s, const py::object& ids) {
                auto v = ids_of(ids, "prefill(ids)").first;
                api::Tensor t;
                {
                    py::gil_scoped_release nogil;
                    t = s.prefill(v);
                }
                return to_numpy(t);
            },
            py::arg("ids"),
            "Starts the sequence with token ids (1-D, at least one); returns the logits [V] of "
            "its last position")
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
            py::arg("id"), "Appends one token; returns the logits [V] of the new last position")
        .def("logprobs", &api::Session::logprobs,
             "log-softmax of the last call's logits, in float64")
        .def("reset", &api::Session::reset,
             "Forgets the sequence and the caches (a loaded G-cache stays)")
        .def_property_readonly("tokens", &api::Session::tokens, "the token ids so far")
        .def("__len__", &api::Session::length, "the number of tokens so far")
        .def(
            "save_g_cache",
            [](const api::Session& s, const py::object& path, bool force) {
                s.save_g_cache(path_of(path, "save_g_cache(path)"), force);
            },
            py::arg("path"), py::arg("force") = false,
            "Writes the G-cache (safetensors) to path (str or os.PathLike); the output rule of "
            "docs/errors.md: never a file of the model's own directory, one of another model "
            "directory or checkpoint only with force=True")
        .def(
            "load_g_cache",
            [](api::Session& s, const py::object& path) {
                s.load_g_cache(path_of(path, "load_g_cache(path)"));
            },
            py::arg("path"),
            "Runs every later call with a saved G-cache's fixed operator (before prefill)")
        .def(
            "g_cache",
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
            },
            "the G-cache after the prefill: per layer a dict of A, A_LM, A_P and G_LM "
            "[H,dk,dk]")
        .def(
            "last_outputs", [](const api::Session& s) { return forward_dict(s.last_outputs()); },
            "The deductive outputs of the last prefill (the whole prompt) or decode (one query) "
            "as forward's dict; its logits are the last position's, [1,1,V]");

    mod.def(
        "g_lm_stats",
        [](const api::Model& m, const py::object& ids) {
            auto [v, rows] = ids_of(ids, "g_lm_stats(ids)", 2);
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
        py::arg("model"), py::arg("text"),
        "Perplexity of a text under the model: loglikelihood, tokens, token_perplexity, "
        "word_perplexity and bits_per_byte");
    mod.def(
        "audit",
        [](const api::Model& m, std::vector<std::string> prompts, int64_t steps,
           const py::object& out_dir, bool force) {
            api::AuditOptions o;
            for (auto& p : prompts) o.prompts.push_back({std::move(p), {}});
            o.steps = steps;
            o.out_dir = out_dir.is_none() ? "" : path_of(out_dir, "audit(out_dir)");
            o.force = force;
            std::string json;
            {
                py::gil_scoped_release nogil;
                json = api::audit(m, o).json;
            }
            return py::module_::import("json").attr("loads")(json);
        },
        py::arg("model"), py::arg("prompts") = std::vector<std::string>{}, py::arg("steps") = 16,
        py::arg("out_dir") = py::none(), py::arg("force") = false,
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
