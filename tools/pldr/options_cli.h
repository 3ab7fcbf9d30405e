// The CLI flags of an option set, derived from its table (pldr/options.h): each member with a
// cli spelling and the PLDR_OPT_CLI surface becomes a flag with the table's help, its default
// shown, and its range checked by CLI11 (the error names the flag).
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "pldr/pldr.hpp"

namespace pldr::cli {

class OptionFlags {
  public:
    // added (optional): the member name → its flag, for the rows this adds.
    explicit OptionFlags(CLI::App* app, std::map<std::string, CLI::Option*>* added = nullptr)
        : app_(app), added_(added) {}

    template <typename T>
    void operator()(const api::OptionSpec& s, T& v) const {
        if constexpr (api::is_option_set<T>::value) {
            for_each_option(v, *this);
            return;
        } else {
            if (!s.on(PLDR_OPT_CLI) || !*s.cli) return;
            CLI::Option* f = add(s, v);
            if (added_) (*added_)[s.name] = f;
        }
    }

  private:
    template <typename T>
    CLI::Option* add(const api::OptionSpec& s, T& v) const {
        if constexpr (std::is_same_v<T, bool>) {
            // A flag; a member that defaults to true is turned off by its --no-... flag.
            if (v)
                return app_->add_flag_callback(
                    s.cli, [&v]() { v = false; }, s.help);
            return app_->add_flag(s.cli, v, s.help);
        } else if constexpr (std::is_same_v<T, api::DagCoefficients>) {
            return app_->add_option_function<std::string>(
                s.cli, [&v](const std::string& x) { v = parse_dag(x); }, s.help);
        } else if constexpr (std::is_arithmetic_v<T>) {
            const api::OptionSpec spec = s;
            // CLI11 reports "<flag>: must be in <range> (got <value>)".
            CLI::Validator in_range(
                [spec](std::string& in) {
                    T x{};
                    if (!CLI::detail::lexical_cast(in, x)) return std::string();  // CLI11 says
                    return api::option_range_error(spec, x);
                },
                *s.range ? std::string(s.range) : std::string());
            return app_->add_option(s.cli, v, s.help)->check(in_range)->capture_default_str();
        } else if constexpr (std::is_enum_v<T>) {
            std::map<std::string, T> names;
            for (const T m : all_of(T{})) names[api::name_of(m)] = m;
            return app_->add_option(s.cli, v, s.help)
                ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
                ->default_str(api::name_of(v));
        } else {
            auto* o = app_->add_option(s.cli, v, s.help);
            if constexpr (std::is_same_v<T, std::string>) {
                if (!v.empty()) o->capture_default_str();
                if (*s.range) {
                    const api::OptionSpec spec = s;
                    o->check(CLI::Validator(
                        [spec](std::string& in) { return api::option_choice_error(spec, in); },
                        s.range));
                }
            }
            return o;
        }
    }
    static std::vector<api::CacheMode> all_of(api::CacheMode) {
        return {api::CacheMode::KVG, api::CacheMode::KV, api::CacheMode::NONE};
    }
    static std::vector<api::ScoreMode> all_of(api::ScoreMode) {
        return {api::ScoreMode::BLOCK, api::ScoreMode::SEQUENTIAL, api::ScoreMode::CACHED};
    }
    static std::vector<api::DType> all_of(api::DType) { return {api::DType::F32, api::DType::F64}; }
    static std::vector<api::ClipMode> all_of(api::ClipMode) {
        return {api::ClipMode::VALUE, api::ClipMode::NORM, api::ClipMode::NONE};
    }

    CLI::App* app_;
    std::map<std::string, CLI::Option*>* added_;
};

// Adds the flags of every member of `o` (and of its nested sets) to a subcommand; o must
// outlive the parse.
template <typename O>
void add_option_flags(CLI::App* app, O& o, std::map<std::string, CLI::Option*>* added = nullptr) {
    for_each_option(o, OptionFlags(app, added));
}

}  // namespace pldr::cli
