// pldr: the command-line tool. Each subcommand is a thin layer over libpldr; every error is one
// line on stderr and exit code 1.
#include <cstdio>
#include <exception>

#include "common.h"
#include "core/alloc.h"

int main(int argc, char** argv) {
    pldr::tune_allocator();
    CLI::App app{"pldr: PLDR-LLM (Power Law Graph Attention) engine"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "pldr 0.1.0");
    pldr::cli::add_inspect(app);
    pldr::cli::add_dump(app);
    pldr::cli::add_grad(app);
    pldr::cli::add_generate(app);
    pldr::cli::add_collapse(app);
    pldr::cli::add_score(app);
    pldr::cli::add_eval(app);
    pldr::cli::add_tokenizer(app);
    pldr::cli::add_prepare(app);
    pldr::cli::add_train(app);
    pldr::cli::add_plot(app);
    pldr::cli::add_perplexity(app);
    pldr::cli::add_audit(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e);
    } catch (const CLI::Error& e) {
        std::fprintf(stderr, "pldr: error: %s\n", e.what());
        return 1;
    } catch (const pldr::Error& e) {
        std::fprintf(stderr, "pldr: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "pldr: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pldr: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
