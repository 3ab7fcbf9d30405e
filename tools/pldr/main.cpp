// pldr: the command-line tool. Each subcommand is a thin layer over libpldr. Exit codes
// (docs/errors.md): 0 success, 1 bad input or usage (one line on stderr), 2 internal error (a
// bug: a failed invariant, an unexpected exception or a fatal signal; one line, no stack dump).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "common.h"

namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define PLDR_UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PLDR_UNDER_SANITIZER 1
#endif

extern "C" void on_fatal_signal(int sig) {
    // Async-signal-safe: write(2) and _exit(2) only.
    const char* name = sig == SIGSEGV   ? "SIGSEGV"
                       : sig == SIGBUS  ? "SIGBUS"
                       : sig == SIGFPE  ? "SIGFPE"
                       : sig == SIGILL  ? "SIGILL"
                       : sig == SIGABRT ? "SIGABRT"
                                        : "a fatal signal";
    const char* a = "pldr: internal error: ";
    const char* b = " (a bug in pldr; please report it with the command line)\n";
    ssize_t r = ::write(STDERR_FILENO, a, std::strlen(a));
    r = ::write(STDERR_FILENO, name, std::strlen(name));
    r = ::write(STDERR_FILENO, b, std::strlen(b));
    (void)r;
    _exit(2);
}

void on_terminate() {
    std::fprintf(stderr, "pldr: internal error: uncaught exception (a bug in pldr)\n");
    std::fflush(stderr);
    _exit(2);
}

void install_crash_handlers() {
    std::set_terminate(on_terminate);
#ifndef PLDR_UNDER_SANITIZER  // the sanitizers report these themselves, with the stack
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(s, &sa, nullptr);
#endif
}

}  // namespace

int main(int argc, char** argv) {
    install_crash_handlers();
    pldr::api::tune_allocator();
    CLI::App app{"pldr: PLDR-LLM (Power Law Graph Attention) engine"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "pldr 0.1.0");
    app.footer("Exit codes: 0 success, 1 bad input or usage, 2 internal error (docs/errors.md).");
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
    pldr::cli::add_serve(app);
    pldr::cli::add_bench(app);
    pldr::cli::add_convert(app);
    try {
        // Test hook for the exit-code tests (tests/test_errors_table.cpp): simulates a bug.
        if (const char* f = std::getenv("PLDR_TEST_FAULT")) {
            const std::string fault = f;
            if (fault == "internal")
                pldr::api::internal_check(fault != "internal", "simulated (PLDR_TEST_FAULT)");
            if (fault == "exception") throw std::logic_error("simulated logic error");
            if (fault == "segv") std::raise(SIGSEGV);
            if (fault == "abort") std::abort();
        }
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e);
    } catch (const CLI::Error& e) {
        std::fprintf(stderr, "pldr: error: %s\n", e.what());
        return 1;
    } catch (const pldr::Error& e) {
        if (pldr::api::is_internal_error(e)) {
            std::fprintf(stderr, "pldr: internal error: %s\n", e.what());
            return 2;
        }
        std::fprintf(stderr, "pldr: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr,
                     "pldr: error: out of memory (the model or the request does not fit in the "
                     "memory available to this process)\n");
        return 1;
    } catch (const std::length_error&) {
        std::fprintf(stderr,
                     "pldr: error: out of memory (the model or the request does not fit in the "
                     "memory available to this process)\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pldr: internal error: %s\n", e.what());
        return 2;
    }
    return 0;
}
