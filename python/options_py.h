// The Python keywords of an option set, derived from its table (pldr/options.h): each member
// with the PLDR_OPT_PY surface is a keyword argument of the same name, checked for its type and
// declared range (the error names the keyword); the docstrings list them with their defaults.
#pragma once
#include <pybind11/pybind11.h>

#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "pldr/pldr.hpp"

namespace pldr_py {

namespace py = pybind11;
namespace api = pldr::api;

// Fills the members of a set from keyword arguments; names every keyword it takes in `taken`.
class OptionKeywords {
  public:
    OptionKeywords(const py::kwargs& kw, std::set<std::string>* taken) : kw_(kw), taken_(taken) {}

    template <typename T>
    void operator()(const api::OptionSpec& s, T& v) const {
        if constexpr (api::is_option_set<T>::value) {
            for_each_option(v, *this);
        } else {
            if (!s.on(PLDR_OPT_PY) || !kw_.contains(s.name)) return;
            taken_->insert(s.name);
            read(s, py::handle(kw_[s.name]), v);
        }
    }

  private:
    static void read(const api::OptionSpec& s, py::handle x, bool& v) {
        if (!PyBool_Check(x.ptr()) && !is_numpy_bool(x)) type_error(s, "a bool", x);
        v = x.cast<bool>();
    }
    template <typename T>
    static std::enable_if_t<std::is_arithmetic_v<T>> read(const api::OptionSpec& s, py::handle x,
                                                          T& v) {
        if constexpr (std::is_integral_v<T>) {
            // An integer (int or a numpy integer), never a float or a bool.
            if (PyBool_Check(x.ptr()) || !PyIndex_Check(x.ptr())) type_error(s, "an integer", x);
            try {
                v = x.cast<T>();
            } catch (const py::cast_error&) {
                throw py::value_error(std::string(s.name) + " is out of range for " +
                                      (std::is_signed_v<T> ? "int64" : "uint64"));
            }
        } else {
            if (PyBool_Check(x.ptr()) || !(PyFloat_Check(x.ptr()) || PyIndex_Check(x.ptr()) ||
                                           py::isinstance(x, numpy_floating())))
                type_error(s, "a number", x);
            v = x.cast<T>();
        }
        api::check_option_value(s, v, s.name);
    }
    static void read(const api::OptionSpec& s, py::handle x, std::string& v) {
        v = text(s, x);
        api::check_option_value(s, v, s.name);
    }
    static void read(const api::OptionSpec& s, py::handle x, std::vector<std::string>& v) {
        v.clear();
        if (py::isinstance<py::str>(x)) {
            v.push_back(x.cast<std::string>());
            return;
        }
        if (!py::isinstance<py::list>(x) && !py::isinstance<py::tuple>(x))
            type_error(s, "a string or a list of strings", x);
        for (py::handle e : x) {
            if (!py::isinstance<py::str>(e)) type_error(s, "a string or a list of strings", e);
            v.push_back(e.cast<std::string>());
        }
    }
    static void read(const api::OptionSpec& s, py::handle x, api::CacheMode& v) {
        v = api::cache_mode_from_name(text(s, x));
    }
    static void read(const api::OptionSpec& s, py::handle x, api::ScoreMode& v) {
        v = api::score_mode_from_name(text(s, x));
    }
    static void read(const api::OptionSpec& s, py::handle x, api::DType& v) {
        v = api::dtype_from_name(x.is_none() ? "" : dtype_text(s, x));
    }
    static void read(const api::OptionSpec& s, py::handle x, api::ClipMode& v) {
        v = api::clip_mode_from_name(text(s, x));
    }
    // Three numbers (c_A, c_Ap, c_G), each finite and >= 0.
    static void read(const api::OptionSpec& s, py::handle x, api::DagCoefficients& v) {
        if (py::isinstance<py::str>(x) || !py::isinstance<py::sequence>(x) || py::len(x) != 3)
            type_error(s, "a sequence of three numbers (c_A, c_Ap, c_G)", x);
        double c[3];
        for (size_t i = 0; i < 3; ++i) {
            py::handle e = py::sequence(py::reinterpret_borrow<py::object>(x))[i];
            if (PyBool_Check(e.ptr()) || !(PyFloat_Check(e.ptr()) || PyIndex_Check(e.ptr())))
                type_error(s, "a sequence of three numbers (c_A, c_Ap, c_G)", e);
            c[i] = e.cast<double>();
            if (!std::isfinite(c[i]) || c[i] < 0)
                throw py::value_error(std::string(s.name) +
                                      " coefficients must be finite and >= 0");
        }
        v = {c[0], c[1], c[2]};
    }
    // A dtype name, or a numpy dtype / type (numpy.float32 → "f32").
    static std::string dtype_text(const api::OptionSpec& s, py::handle x) {
        if (py::isinstance<py::str>(x)) return x.cast<std::string>();
        if (py::hasattr(x, "itemsize") || py::isinstance<py::type>(x)) {
            const py::object dt = py::module_::import("numpy").attr("dtype")(x);
            const std::string kind = py::str(dt.attr("kind"));
            const int64_t size = dt.attr("itemsize").cast<int64_t>();
            if (kind == "f" && size == 4) return "f32";
            if (kind == "f" && size == 8) return "f64";
            return py::str(dt.attr("name"));
        }
        type_error(s, "a dtype name or a numpy dtype", x);
    }
    // A str, or a path (os.PathLike).
    static std::string text(const api::OptionSpec& s, py::handle x) {
        if (py::isinstance<py::str>(x)) return x.cast<std::string>();
        if (py::hasattr(x, "__fspath__"))
            return py::str(x.attr("__fspath__")()).cast<std::string>();
        type_error(s, "a string", x);
    }
    static bool is_numpy_bool(py::handle x) {
        return std::string(py::str(py::type::handle_of(x).attr("__name__"))) == "bool_";
    }
    static py::object numpy_floating() { return py::module_::import("numpy").attr("floating"); }
    [[noreturn]] static void type_error(const api::OptionSpec& s, const char* want, py::handle x) {
        throw py::type_error(std::string(s.name) + " must be " + want + " (got " +
                             std::string(py::str(py::type::handle_of(x).attr("__name__"))) + ")");
    }

    const py::kwargs& kw_;
    std::set<std::string>* taken_;
};

// The set `O` from keyword arguments; a keyword that is neither one of its members nor in
// `also` is a TypeError, as Python's own for an unexpected keyword.
template <typename O>
O options_from(const py::kwargs& kw, const char* fn, const std::set<std::string>& also = {}) {
    O o;
    std::set<std::string> taken;
    for_each_option(o, OptionKeywords(kw, &taken));
    for (const auto& item : kw) {
        const std::string k = py::str(item.first);
        if (!taken.count(k) && !also.count(k))
            throw py::type_error(std::string(fn) + "() got an unexpected keyword argument '" + k +
                                 "'");
    }
    return o;
}

// "name=default: help" for each keyword of the set, one per line (for docstrings).
class OptionDoc {
  public:
    explicit OptionDoc(std::string* out) : out_(out) {}
    template <typename T>
    void operator()(const api::OptionSpec& s, const T& v) const {
        if constexpr (api::is_option_set<T>::value) {
            for_each_option(v, *this);
        } else {
            if (!s.on(PLDR_OPT_PY)) return;
            std::ostringstream os;
            os << "    " << s.name << "=";
            if constexpr (std::is_same_v<T, bool>)
                os << (v ? "True" : "False");
            else if constexpr (std::is_arithmetic_v<T>)
                os << v;
            else if constexpr (std::is_same_v<T, std::string>)
                os << "'" << v << "'";
            else if constexpr (std::is_same_v<T, std::vector<std::string>>)
                os << "[]";
            else if constexpr (std::is_same_v<T, api::DagCoefficients>)
                os << "(" << v.A << ", " << v.Ap << ", " << v.G << ")";
            else
                os << "'" << api::name_of(v) << "'";
            os << ": " << s.help;
            if (*s.range) os << " " << s.range;
            *out_ += os.str() + "\n";
        }
    }

  private:
    std::string* out_;
};
// A docstring: `intro`, then the keyword arguments of the set O.
template <typename O>
std::string options_doc(const std::string& intro) {
    std::string out = intro + "\n\nKeyword arguments (pldr/options.h):\n";
    for_each_option(O{}, OptionDoc(&out));
    return out;
}

}  // namespace pldr_py
