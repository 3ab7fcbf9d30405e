// pldr bench --only product (see bench_product.h).
#include "bench_product.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "common.h"
#include "pldr/bench.hpp"

extern char** environ;

namespace pldr::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

json stats(const std::vector<double>& v) {
    return {{"median", median(v)},
            {"min", *std::min_element(v.begin(), v.end())},
            {"max", *std::max_element(v.begin(), v.end())},
            {"rounds", v}};
}

// The environment of a child: the parent's, with the thread counts set.
std::vector<std::string> child_env(int threads) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        const std::string s(*e);
        if (s.rfind("OMP_NUM_THREADS=", 0) == 0 || s.rfind("OPENBLAS_NUM_THREADS=", 0) == 0)
            continue;
        env.push_back(s);
    }
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    env.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(threads));
    return env;
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
    std::vector<char*> out;
    for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

// This binary with `args`, its output to `log`; the child's pid.
pid_t spawn_self(const std::vector<std::string>& args, int threads, const std::string& log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const std::vector<std::string> env = child_env(threads);
    std::vector<char*> argv = c_strings(args), envp = c_strings(env);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    require(rc == 0, "bench: cannot start a child process: ", std::strerror(rc));
    return pid;
}

struct Finished {
    bool ok = false;
    double peak_mib = 0;
};
Finished wait_child(pid_t pid) {
    int st = 0;
    struct rusage ru {};
    while (::wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
    }
    return {WIFEXITED(st) && WEXITSTATUS(st) == 0, double(ru.ru_maxrss) / 1024.0};
}

// One command, whole: seconds and peak RSS (MiB); a failure is an error quoting its log's end.
struct Measured {
    double seconds = 0, peak_mib = 0;
    std::string log;
};
Measured run_measured(const std::vector<std::string>& args, int threads, const std::string& log) {
    const double t0 = now_s();
    const Finished f = wait_child(spawn_self(args, threads, log));
    Measured m{now_s() - t0, f.peak_mib, ""};
    std::ifstream in(log);
    m.log.assign(std::istreambuf_iterator<char>(in), {});
    if (!f.ok) {
        const std::string tail = m.log.size() > 400 ? m.log.substr(m.log.size() - 400) : m.log;
        fail("bench: `pldr ", args[1], "` failed: ", tail);
    }
    return m;
}

std::string join(const std::vector<std::string>& a) {
    std::string s = "pldr";
    for (size_t i = 1; i < a.size(); ++i) s += " " + a[i];
    return s;
}

std::string random_ids(std::mt19937_64& rng, int64_t vocab, int64_t n) {
    std::uniform_int_distribution<int64_t> tok(4, vocab - 1);
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(tok(rng));
    return s;
}

// ---- pldr serve: a minimal HTTP client ----

int free_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    require(s >= 0, "bench: socket: ", std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n) == 0;
    ::close(s);
    require(ok, "bench: no free port: ", std::strerror(errno));
    return ntohs(a.sin_port);
}

// One request to 127.0.0.1:port; the response (status line, headers and body), "" when the
// connection failed.
std::string http(int port, const std::string& method, const std::string& path,
                 const std::string& body) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return "";
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(s);
        return "";
    }
    const std::string req = method + " " + path +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                            "Content-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    for (size_t off = 0; off < req.size();) {
        const ssize_t w = ::send(s, req.data() + off, req.size() - off, MSG_NOSIGNAL);
        if (w <= 0) {
            ::close(s);
            return "";
        }
        off += size_t(w);
    }
    std::string out;
    char buf[8192];
    for (ssize_t r; (r = ::recv(s, buf, sizeof buf, 0)) != 0;) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        out.append(buf, size_t(r));
    }
    ::close(s);
    return out;
}

// The body of a response whose headers end at `at` (chunked transfer decoded: the server sends
// whitespace chunks while a completion runs, then the JSON).
std::string body_of(const std::string& res, size_t at) {
    std::string head = res.substr(0, at);
    for (char& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (head.find("transfer-encoding: chunked") == std::string::npos) return res.substr(at + 4);
    std::string body;
    size_t i = at + 4;
    while (i < res.size()) {
        const size_t eol = res.find("\r\n", i);
        if (eol == std::string::npos) break;
        const size_t n = std::strtoul(res.substr(i, eol - i).c_str(), nullptr, 16);
        if (n == 0 || eol + 2 + n > res.size()) break;
        body.append(res, eol + 2, n);
        i = eol + 2 + n + 2;
    }
    return body;
}

bool status_ok(const std::string& response) {
    return response.rfind("HTTP/1.1 200", 0) == 0 || response.rfind("HTTP/1.0 200", 0) == 0;
}

double peak_rss_mib_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
    return 0;
}

// ---- the workloads ----

json bench_train(const ProductBench& p, const std::string& model, const std::string& tmp,
                 int64_t vocab) {
    const std::string shards = tmp + "/shards";
    api::write_bench_shards(shards, vocab, p.train_seq + 1, p.train_batch * p.train_steps,
                            p.train_batch * 8);
    std::vector<double> sec, mb;
    std::vector<std::string> args;
    for (int r = 0; r < p.rounds; ++r) {
        const std::string out = tmp + "/train-" + std::to_string(r);
        args = {"pldr",           "train",
                "--config",       model + "/config.json",
                "--data",         shards,
                "--out",          out,
                "--steps",        std::to_string(p.train_steps),
                "--batch",        std::to_string(p.train_batch),
                "--warmup",       "0",
                "--eval-every",   std::to_string(p.train_steps),
                "--eval-batches", "8",
                "--save-every",   "0"};
        const Measured m = run_measured(args, p.threads, tmp + "/train.log");
        require(fs::exists(out + "/train_state.safetensors"),
                "bench: pldr train wrote no checkpoint");
        sec.push_back(m.seconds);
        mb.push_back(m.peak_mib);
        fs::remove_all(out);
    }
    const double tokens = double(p.train_steps * p.train_batch * p.train_seq);
    return {{"workload", "pldr train"},
            {"command", join(args)},
            {"what", std::to_string(p.train_steps) + " steps of " + std::to_string(p.train_batch) +
                         "x" + std::to_string(p.train_seq) +
                         " tokens, validation (8 batches), final checkpoint"},
            {"seconds", stats(sec)},
            {"peak_rss_mib", stats(mb)},
            {"tokens", tokens}};
}

json bench_generate(const ProductBench& p, const std::string& model, const std::string& tmp,
                    int64_t vocab) {
    std::mt19937_64 rng(7);
    std::vector<std::string> one = {"pldr", "generate", model}, many = one;
    for (int64_t i = 0; i < p.batch; ++i) {
        const std::string ids = random_ids(rng, vocab, p.prompt);
        if (i == 0) one.insert(one.end(), {"--ids", ids});
        many.insert(many.end(), {"--ids", ids});
    }
    for (auto* a : {&one, &many})
        a->insert(a->end(), {"-n", std::to_string(p.n_new), "--greedy", "--no-eos-stop"});
    std::vector<double> s1, sb, m1, mb, ratio;
    for (int r = 0; r < p.rounds; ++r) {  // alternated: a drift of the machine hits both
        const Measured a = run_measured(one, p.threads, tmp + "/generate.log");
        const Measured b = run_measured(many, p.threads, tmp + "/generate.log");
        s1.push_back(a.seconds);
        m1.push_back(a.peak_mib);
        sb.push_back(b.seconds);
        mb.push_back(b.peak_mib);
        ratio.push_back(double(p.batch) * a.seconds / b.seconds);
    }
    const std::string what = std::to_string(p.prompt) + "-id prompt(s), " +
                             std::to_string(p.n_new) + " greedy tokens each, with the load";
    json b = {{"workload", "pldr generate " + std::to_string(p.batch)},
              {"command", join(many)},
              {"what", std::to_string(p.batch) + " x " + what},
              {"seconds", stats(sb)},
              {"peak_rss_mib", stats(mb)},
              {"x_single", stats(ratio)}};
    return json::array({{{"workload", "pldr generate 1"},
                         {"command", join(one)},
                         {"what", "1 x " + what},
                         {"seconds", stats(s1)},
                         {"peak_rss_mib", stats(m1)}},
                        b});
}

json bench_serve(const ProductBench& p, const std::string& model, const std::string& tmp,
                 int64_t vocab) {
    const int port = free_port();
    std::vector<std::string> args = {"pldr",
                                     "serve",
                                     model,
                                     "--port",
                                     std::to_string(port),
                                     "--parallel",
                                     std::to_string(p.batch)};
    if (!p.tokenizer.empty()) args.insert(args.end(), {"--tokenizer", p.tokenizer});
    const double t0 = now_s();
    const pid_t pid = spawn_self(args, p.threads, tmp + "/serve.log");
    struct Stop {
        pid_t pid;
        ~Stop() {
            if (pid > 0) ::kill(pid, SIGKILL), wait_child(pid);
        }
    } stop{pid};
    bool up = false;
    while (!up && now_s() - t0 < 120) {
        up = status_ok(http(port, "GET", "/health", ""));
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        int st = 0;
        require(::waitpid(pid, &st, WNOHANG) == 0, "bench: pldr serve exited at startup (see ", tmp,
                "/serve.log)");
    }
    require(up, "bench: pldr serve did not answer /health within 120 s");
    const double ready = now_s() - t0;
    std::mt19937_64 rng(11);
    std::vector<std::string> bodies;
    for (int64_t c = 0; c < p.batch; ++c)
        bodies.push_back(json{
            {"prompt", json::parse("[" + random_ids(rng, vocab, p.prompt) + "]")},
            {"max_tokens", p.n_new},
            {"temperature",
             0}}.dump());
    std::vector<double> rps, tps;
    for (int r = 0; r < p.rounds; ++r) {
        std::atomic<int64_t> tokens{0}, failed{0};
        const double l0 = now_s();
        std::vector<std::thread> clients;
        for (int64_t c = 0; c < p.batch; ++c)
            clients.emplace_back([&, c] {
                for (int64_t q = 0; q < p.requests; ++q) {
                    const std::string res =
                        http(port, "POST", "/v1/completions", bodies[size_t(c)]);
                    const size_t at = res.find("\r\n\r\n");
                    if (!status_ok(res) || at == std::string::npos) {
                        ++failed;
                        continue;
                    }
                    const json j = json::parse(body_of(res, at), nullptr, false);
                    if (j.is_discarded() || !j.contains("usage")) {
                        ++failed;
                        continue;
                    }
                    tokens += j["usage"].value("completion_tokens", int64_t(0));
                }
            });
        for (auto& t : clients) t.join();
        const double dt = now_s() - l0;
        require(failed == 0, "bench: ", failed.load(), " request(s) to pldr serve failed (see ",
                tmp, "/serve.log)");
        rps.push_back(double(p.batch * p.requests) / dt);
        tps.push_back(double(tokens) / dt);
    }
    const double peak = peak_rss_mib_of(pid);
    return {{"workload", "pldr serve"},
            {"command", join(args)},
            {"what", std::to_string(p.batch) + " clients x " + std::to_string(p.requests) +
                         " completions of " + std::to_string(p.n_new) + " tokens (" +
                         std::to_string(p.prompt) + "-id prompts), per round"},
            {"startup_seconds", ready},
            {"requests_per_s", stats(rps)},
            {"tokens_per_s", stats(tps)},
            {"peak_rss_mib", {{"median", peak}, {"min", peak}, {"max", peak}, {"rounds", {peak}}}}};
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t j = std::min(s.find(',', i), s.size());
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

}  // namespace

json run_product_bench(const ProductBench& p) {
    require(p.rounds >= 1 && p.rounds <= 1000, "bench: rounds ", p.rounds, " outside [1, 1000]");
    const std::vector<std::string> only = split_list(p.only);
    for (const auto& w : only)
        require(w == "train" || w == "generate" || w == "serve", "bench: product workload '", w,
                "' is not train, generate or serve");
    std::string tmpl = (fs::temp_directory_path() / "pldr-bench-XXXXXX").string();
    require(::mkdtemp(tmpl.data()) != nullptr,
            "bench: cannot make a temporary directory: ", std::strerror(errno));
    const std::string tmp = tmpl;
    struct Clean {
        std::string dir;
        ~Clean() {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    } clean{tmp};
    std::string model = p.model_dir;
    if (model.empty()) {
        model = tmp + "/model";
        api::save_bench_model(p.config, model, p.context);
    }
    const json cfg = json::parse(api::read_file(model + "/config.json"));
    require(cfg.contains("vocab_size") && cfg["vocab_size"].is_number_integer(), model,
            "/config.json has no vocab_size");
    const int64_t vocab = cfg["vocab_size"].get<int64_t>();
    json rows = json::array();
    std::vector<std::string> notes;
    for (const auto& w : only) {
        if (w == "train") rows.push_back(bench_train(p, model, tmp, vocab));
        if (w == "generate")
            for (auto& r : bench_generate(p, model, tmp, vocab)) rows.push_back(r);
        if (w == "serve" && p.tokenizer.empty() && !fs::exists(model + "/tokenizer.model"))
            notes.push_back("pldr serve skipped: it needs a tokenizer (--tokenizer FILE, of " +
                            std::to_string(vocab) + " pieces)");
        else if (w == "serve")
            rows.push_back(bench_serve(p, model, tmp, vocab));
    }
    return {{"product", rows}, {"notes", notes}, {"threads", p.threads}, {"rounds", p.rounds}};
}

void print_product_report(const json& out) {
    std::printf("product commands, %d threads, %d rounds each (median (min-max)):\n\n",
                out["threads"].get<int>(), out["rounds"].get<int>());
    std::printf("| command | what | seconds | peak RSS MiB | figure |\n|---|---|---|---|---|\n");
    auto mmm = [](const json& s, const char* fmt) {
        char b[128];
        std::snprintf(b, sizeof b, fmt, s["median"].get<double>(), s["min"].get<double>(),
                      s["max"].get<double>());
        return std::string(b);
    };
    for (const json& r : out["product"]) {
        std::string sec = r.contains("seconds") ? mmm(r["seconds"], "%.3f (%.3f-%.3f)") : "-";
        std::string fig;
        if (r.contains("x_single"))
            fig = mmm(r["x_single"], "%.2f (%.2f-%.2f)x the 1-prompt command, per prompt");
        if (r.contains("tokens") && r.contains("seconds"))
            fig = std::to_string(int64_t(r["tokens"].get<double>())) + " training tokens";
        if (r.contains("tokens_per_s")) {
            sec = "ready in " + std::to_string(r["startup_seconds"].get<double>()).substr(0, 5);
            fig = mmm(r["requests_per_s"], "%.2f (%.2f-%.2f) requests/s, ") +
                  mmm(r["tokens_per_s"], "%.1f (%.1f-%.1f) tokens/s");
        }
        std::printf("| `%s` | %s | %s | %s | %s |\n", r["workload"].get<std::string>().c_str(),
                    r["what"].get<std::string>().c_str(), sec.c_str(),
                    mmm(r["peak_rss_mib"], "%.0f (%.0f-%.0f)").c_str(), fig.c_str());
    }
    for (const json& n : out["notes"]) std::printf("\nnote: %s\n", n.get<std::string>().c_str());
}

}  // namespace pldr::cli
