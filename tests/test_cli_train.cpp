// `pldr tokenizer`, `pldr prepare`, `pldr train` and `pldr plot` through the binary: reference
// tokenizer ids, the shard round trip, exact resume after --stop-at and after a real SIGTERM,
// bad input (one error line, exit code 1), and the plot files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "io/tokenizer.h"
#include "train/shard.h"

namespace fs = std::filesystem;

namespace {

const std::string kSrc = PLDR_SOURCE_DIR;
const std::string kRefTok =
    kSrc + "/data/tokenizer/refinedweb-tokenizer-model-pldrllm-kvg-cache-paper.model";
const std::string kShakespeareValid = kSrc + "/data/corpus/tinyshakespeare/valid.txt";

void write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
}

// A small tokenizer and shard directory (ctx 16), built once through the CLI.
struct Data {
    std::string root, tok, shards;
};
const Data& data() {
    static Data d = [] {
        Data x;
        x.root = cli_test::tmp_dir("cli_train_data");
        x.tok = x.root + "/tok";
        auto r = cli_test::run("tokenizer train --input " + kShakespeareValid + " --out " + x.tok +
                               " --vocab-size 400 --model-type bpe --threads 1");
        EXPECT_EQ(r.code, 0) << r.err;
        x.shards = x.root + "/shards";
        r = cli_test::run("prepare --tokenizer " + x.tok + ".model --out " + x.shards +
                          " --ctx 16 --valid-fraction 0.1 " + kShakespeareValid);
        EXPECT_EQ(r.code, 0) << r.err;
        return x;
    }();
    return d;
}

std::string train_args(const std::string& out) {
    return "train --preset tiny --data " + data().shards + " --out " + out +
           " --batch 4 --lr 0.003 --warmup 3 --eval-every 5 --eval-batches 2 --save-every 0";
}

void expect_same_checkpoint(const std::string& a, const std::string& b) {
    for (const char* f : {"model.safetensors", "train_state.safetensors", "config.json"}) {
        const std::string x = cli_test::slurp(a + "/" + f);
        ASSERT_FALSE(x.empty()) << a << "/" << f;
        EXPECT_TRUE(x == cli_test::slurp(b + "/" + f)) << f << " differs";
    }
}

}  // namespace

TEST(CliTrainTokenizer, ReferenceIdsEncodeAndDecode) {
    const std::string text = "Hello world! The quick brown fox jumps over 12345 lazy dogs.";
    const std::string ids =
        "4780 485 316 290 1653 2911 17560 3332 266 381 265 273 274 288 294 289 10773 3088 262";
    auto r = cli_test::run("tokenizer encode " + kRefTok + " '" + text + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, ids + "\n");
    r = cli_test::run("tokenizer encode --eos " + kRefTok + " '" + text + "'");
    EXPECT_EQ(r.out, ids + " 3\n");
    r = cli_test::run("tokenizer decode " + kRefTok + " " + ids);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, text + "\n");
    cli_test::expect_error("tokenizer decode " + kRefTok + " 5 32000", "32000");
    cli_test::expect_error("tokenizer encode /nonexistent/tok.model hello", "file not found");
}

TEST(CliTrainTokenizer, TrainedTokenizerHasReferenceSpecials) {
    const pldr::Tokenizer t(data().tok + ".model");
    EXPECT_EQ(t.vocab_size(), 400);
    EXPECT_EQ(t.piece(0), "[PAD]");
    EXPECT_EQ(t.piece(2), "[START]");
    EXPECT_EQ(t.piece(3), "[END]");
    auto r = cli_test::run("tokenizer encode " + data().tok + ".model 'First Citizen'");
    EXPECT_EQ(r.code, 0);
    std::string ids = r.out;
    while (!ids.empty() && ids.back() == '\n') ids.pop_back();
    EXPECT_FALSE(ids.empty());
    auto d = cli_test::run("tokenizer decode " + data().tok + ".model " + ids);
    EXPECT_EQ(d.out, "First Citizen\n");
}

TEST(CliTrainPrepare, ShardRoundTripIsExact) {
    // The shards hold exactly the reference packing of the encoded documents.
    const pldr::Tokenizer t(data().tok + ".model");
    std::ifstream in(kShakespeareValid);
    std::string line;
    std::vector<std::vector<int64_t>> train, valid;
    int64_t i = 0;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        (i % 10 == 5 ? valid : train).push_back(t.encode_document(line));
        ++i;
    }
    const auto want_train = pldr::pack_documents(train, 16, 1600);
    const auto want_valid = pldr::pack_documents(valid, 16, 1600);
    EXPECT_EQ(pldr::ShardReader(data().shards + "/train.pldrtok").read_all(), want_train);
    EXPECT_EQ(pldr::ShardReader(data().shards + "/valid.pldrtok").read_all(), want_valid);
    auto r = cli_test::run("prepare --tokenizer " + data().tok + ".model --out " + data().root +
                           "/again --ctx 16 --valid-fraction 0.1 " + kShakespeareValid);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("unigram entropy"), std::string::npos) << r.out;
    EXPECT_EQ(cli_test::slurp(data().shards + "/train.pldrtok"),
              cli_test::slurp(data().root + "/again/train.pldrtok"));
}

TEST(CliTrain, StopAtThenResumeIsBitIdentical) {
    const std::string root = cli_test::tmp_dir("cli_stopat");
    auto r = cli_test::run(train_args(root + "/full") + " --steps 14");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("validation at step 14"), std::string::npos) << r.out;
    r = cli_test::run(train_args(root + "/part") + " --steps 14 --stop-at 6");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("stopped (--stop-at) at step 6"), std::string::npos) << r.out;
    r = cli_test::run("train --resume " + root + "/part --data " + data().shards + " --out " +
                      root + "/part");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("finished at step 14"), std::string::npos) << r.out;
    expect_same_checkpoint(root + "/full", root + "/part");
    // `pldr perplexity` on the same chunks gives the run's last validation loss.
    const std::string m = cli_test::slurp(root + "/full/metrics.jsonl");
    const size_t ev = m.rfind("{\"type\":\"eval\"");
    ASSERT_NE(ev, std::string::npos);
    const double ce = std::stod(m.substr(m.find("\"ce\":", ev) + 5));
    r = cli_test::run("perplexity " + root + "/full --data " + data().shards +
                      " --batch 4 --batches 2");
    ASSERT_EQ(r.code, 0) << r.err;
    char want[32];
    std::snprintf(want, sizeof want, "loss %.4f ", ce);
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in " << r.out;
    EXPECT_NE(r.out.find("unigram entropy of valid.pldrtok"), std::string::npos) << r.out;
    // The checkpoint is a loadable model directory, with the data's tokenizer.
    r = cli_test::run("inspect " + root + "/part");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("tokenizer.model"), std::string::npos) << r.out;
    EXPECT_EQ(cli_test::slurp(root + "/part/tokenizer.model"),
              cli_test::slurp(data().tok + ".model"));
}

// Starts `pldr train` in the background, sends `sig` once a step is in the metrics file, and
// checks the checkpoint: exit code 0, and resuming it gives the uninterrupted run's bits.
static void interrupt_and_resume(int sig, const std::string& name) {
    const std::string root = cli_test::tmp_dir(name);
    const std::string out = root + "/run", metrics = root + "/run.jsonl";
    const std::string cmd = std::string(PLDR_BINARY_DIR) + "/pldr " + train_args(out) +
                            " --steps 5000 --metrics " + metrics;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const int fd = ::open((root + "/log.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
        _exit(127);
    }
    // Wait until at least one step is in the metrics file, then interrupt.
    const auto t0 = std::chrono::steady_clock::now();
    while (cli_test::slurp(metrics).find("\"type\":\"train\"") == std::string::npos) {
        ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(kill(pid, sig), 0);
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    const std::string log = cli_test::slurp(root + "/log.txt");
    ASSERT_TRUE(WIFEXITED(st)) << log;
    EXPECT_EQ(WEXITSTATUS(st), 0) << log;
    EXPECT_NE(log.find("interrupted at step"), std::string::npos) << log;
    auto r = cli_test::run("inspect " + out);
    EXPECT_EQ(r.code, 0) << r.err;
    // The step of the checkpoint, from the log.
    const size_t at = log.find("interrupted at step ");
    const int64_t k = std::stoll(log.substr(at + 20));
    ASSERT_GE(k, 1);
    ASSERT_LT(k, 4990) << "the run ended before the signal";
    // Resume to k + 5 and compare with an uninterrupted run of the same schedule.
    const std::string until = " --stop-at " + std::to_string(k + 5);
    r = cli_test::run("train --resume " + out + " --data " + data().shards + " --out " + out +
                      " --metrics " + metrics + until);
    ASSERT_EQ(r.code, 0) << r.err;
    r = cli_test::run(train_args(root + "/ref") + " --steps 5000" + until);
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_checkpoint(out, root + "/ref");
}

TEST(CliTrain, SigtermWritesCheckpointAndResumesExactly) {
    interrupt_and_resume(SIGTERM, "cli_sigterm");
}

TEST(CliTrain, SigintWritesCheckpointAndResumesExactly) {
    interrupt_and_resume(SIGINT, "cli_sigint");
}

TEST(CliTrain, BadCorpusAndTokenizer) {
    const std::string d = cli_test::tmp_dir("cli_badcorpus");
    write(d + "/empty.txt", "");
    cli_test::expect_error(
        "prepare --tokenizer " + kRefTok + " --out " + d + "/o " + d + "/empty.txt",
        "empty corpus");
    write(d + "/bad.txt", "good line\nbad \xff\xfe line\n");
    cli_test::expect_error(
        "prepare --tokenizer " + kRefTok + " --out " + d + "/o " + d + "/bad.txt", "invalid UTF-8");
    cli_test::expect_error(
        "prepare --tokenizer " + d + "/missing.model --out " + d + "/o " + kShakespeareValid,
        "missing.model");
    cli_test::expect_error(
        "tokenizer train --input " + d + "/empty.txt --out " + d + "/t --vocab-size 400",
        "empty.txt");
}

TEST(CliTrain, BadShards) {
    const std::string d = cli_test::tmp_dir("cli_badshard");
    const std::string sh = d + "/shards";
    fs::copy(data().shards, sh);
    fs::permissions(sh + "/train.pldrtok", fs::perms::owner_read | fs::perms::owner_write);
    std::string b = cli_test::slurp(sh + "/train.pldrtok");
    std::string c = b;
    c[c.size() / 2] = char(c[c.size() / 2] ^ 0x01);
    write(sh + "/train.pldrtok", c);
    const std::string args = " --preset tiny --data " + sh + " --out " + d + "/o --steps 4";
    cli_test::expect_error("train" + args, "checksum mismatch");
    write(sh + "/train.pldrtok", b.substr(0, b.size() - 7));
    cli_test::expect_error("train" + args, "truncated");
    write(sh + "/train.pldrtok", b);
    // Vocabulary of the shard vs the config.
    write(d + "/cfg.json", R"({"vocab_size": 500, "num_hidden_layers": 1, "num_attention_heads": 2,
        "head_dim": 8, "A_dff": 8, "num_reslayerA": 1, "num_denseA": 1,
        "max_position_embeddings": 64})");
    cli_test::expect_error("train --config " + d + "/cfg.json --data " + sh + " --out " + d + "/o",
                           "vocab_size 500");
    // A context longer than max_position_embeddings.
    write(d + "/cfg8.json", R"({"vocab_size": 400, "num_hidden_layers": 1, "num_attention_heads": 2,
        "head_dim": 8, "A_dff": 8, "num_reslayerA": 1, "num_denseA": 1,
        "max_position_embeddings": 8})");
    cli_test::expect_error("train --config " + d + "/cfg8.json --data " + sh + " --out " + d + "/o",
                           "max_position_embeddings = 8");
}

TEST(CliTrain, BadOptionsAndMismatchedCheckpoint) {
    const std::string d = cli_test::tmp_dir("cli_badopts");
    const std::string base = "train --preset tiny --data " + data().shards + " --out " + d;
    cli_test::expect_error(base + "/o --steps 10 --warmup 20", "must not exceed total steps");
    cli_test::expect_error(base + "/o --steps 10 --dag=-1,0,0", ">= 0");
    cli_test::expect_error(base + "/o --steps 10 --ctx 40", "--ctx 40");
    // A checkpoint that does not match the model asked for.
    auto r = cli_test::run(base + "/ck --steps 4 --stop-at 2 --batch 2");
    ASSERT_EQ(r.code, 0) << r.err;
    cli_test::expect_error("train --preset small --resume " + d + "/ck --data " + data().shards +
                               " --out " + d + "/ck",
                           "does not match --preset small");
    cli_test::expect_error(
        "train --resume " + d + "/ck --data " + data().shards + " --out " + d + "/ck --lr 0.1",
        "differs from the checkpoint");
    cli_test::expect_error(
        "train --resume " + d + "/nothing --data " + data().shards + " --out " + d + "/x",
        "not a training checkpoint");
}

TEST(CliTrain, NanLossStopsWithLastGoodCheckpoint) {
    const std::string d = cli_test::tmp_dir("cli_nan");
    auto r = cli_test::run("train --preset tiny --data " + data().shards + " --out " + d +
                           "/o --steps 50 --batch 2 --lr 1e30 --warmup 0 --no-clip "
                           "--save-every 1 --eval-every 0");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("non-finite"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("last good checkpoint"), std::string::npos) << r.err;
    r = cli_test::run("inspect " + d + "/o");
    EXPECT_EQ(r.code, 0) << r.err;
}

TEST(CliTrainPlot, PngAndSvg) {
    const std::string d = cli_test::tmp_dir("cli_plot");
    std::string m;
    for (int s = 1; s <= 30; ++s)
        m += "{\"type\":\"train\",\"step\":" + std::to_string(s) +
             ",\"loss\":" + std::to_string(6.0 / s + 1) + "}\n";
    m += "{\"type\":\"eval\",\"step\":10,\"loss\":2.0}\n{\"type\":\"eval\",\"step\":30,\"loss\":1."
         "5}\n";
    write(d + "/m.jsonl", m);
    auto r = cli_test::run("plot " + d + "/m.jsonl --out " + d + "/p.png --width 640 --height 400");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string png = cli_test::slurp(d + "/p.png");
    ASSERT_GT(png.size(), 33u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    EXPECT_EQ(png.substr(12, 4), "IHDR");
    auto be32 = [&](size_t o) {
        return (uint32_t(uint8_t(png[o])) << 24) | (uint32_t(uint8_t(png[o + 1])) << 16) |
               (uint32_t(uint8_t(png[o + 2])) << 8) | uint32_t(uint8_t(png[o + 3]));
    };
    EXPECT_EQ(be32(16), 640u);
    EXPECT_EQ(be32(20), 400u);
    r = cli_test::run("plot " + d + "/m.jsonl " + d + "/m.jsonl --label a --label b --out " + d +
                      "/p.svg --hline '1.25:unigram entropy'");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string svg = cli_test::slurp(d + "/p.svg");
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    EXPECT_NE(svg.find("<svg"), std::string::npos);
    EXPECT_NE(svg.find("<path d=\"M"), std::string::npos);
    EXPECT_NE(svg.find("a valid"), std::string::npos);
    EXPECT_NE(svg.find("b train"), std::string::npos);
    EXPECT_NE(svg.find("unigram entropy"), std::string::npos);
    EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
    size_t open = 0, close = 0;
    for (char ch : svg) open += ch == '<', close += ch == '>';
    EXPECT_EQ(open, close);
    cli_test::expect_error("plot " + d + "/m.jsonl --out " + d + "/p.gif", ".png or .svg");
    write(d + "/bad.jsonl", "{\"type\":\"train\"}\n");
    cli_test::expect_error("plot " + d + "/bad.jsonl --out " + d + "/p.svg", "bad.jsonl:1");
}

// --audit-every (issue 38): the "audit" lines of metrics.jsonl at the start, every N steps and at
// the end, each the curve point of `pldr audit --steps 8 --cont-len 32` on the model of that step:
// the last one equals what `pldr audit` measures on the final checkpoint with the same prompts
// (float64: the same bits), and the first one (the initial model) differs from it.
TEST(CliTrain, AuditEveryEqualsPldrAuditOnTheCheckpoint) {
    const std::string d = cli_test::tmp_dir("cli_train_audit");
    write(d + "/prompts.txt", "First Citizen:\n\n5, 17,3,9,12\nWe are accounted poor citizens\n");
    auto r = cli_test::run(train_args(d + "/o") + " --steps 6 --audit-every 3 --dtype f64" +
                           " --audit-prompts " + d + "/prompts.txt");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("audits took"), std::string::npos) << r.out;
    std::vector<nlohmann::json> audits;
    std::istringstream ms(cli_test::slurp(d + "/o/metrics.jsonl"));
    for (std::string line; std::getline(ms, line);) {
        auto j = nlohmann::json::parse(line);
        if (j["type"] == "audit") audits.push_back(j);
    }
    ASSERT_EQ(audits.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(audits[i]["step"], int64_t(3 * i));
        EXPECT_EQ(audits[i]["tokens"], int64_t(3 * i) * 4 * 15);  // steps x batch x (ctx - 1)
        EXPECT_EQ(audits[i]["audit"]["prompts"], 3);
        EXPECT_EQ(audits[i]["audit"]["steps"], 8);
        EXPECT_GT(audits[i]["seconds"].get<double>(), 0);
    }
    EXPECT_NE(audits[0]["audit"]["max_eps_G"], audits[2]["audit"]["max_eps_G"]);
    r = cli_test::run("audit " + d + "/o --out " + d + "/a --prompts " + d +
                      "/prompts.txt --steps 8 --cont-len 32 --dtype f64 --items 0");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto a = nlohmann::json::parse(cli_test::slurp(d + "/a/audit.json"));
    EXPECT_EQ(a["curve_point"], audits[2]["audit"]) << a["curve_point"].dump() << "\n"
                                                    << audits[2]["audit"].dump();
    // The curves: log-log against tokens seen.
    r = cli_test::run("plot " + d + "/o/metrics.jsonl --out " + d + "/l.svg --audit-out " + d +
                      "/c.svg");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string svg = cli_test::slurp(d + "/c.svg");
    for (const char* label : {"eps_G", "G_LM order (prompts)", "block-seq gap", "tokens seen"})
        EXPECT_NE(svg.find(label), std::string::npos) << label;
    cli_test::expect_error("plot " + d + "/m.jsonl --out " + d + "/p.svg", "m.jsonl");
    cli_test::expect_error(
        train_args(d + "/o2") + " --steps 2 --audit-every 1 --audit-prompts " + d + "/none.txt",
        "none.txt");
    write(d + "/train_only.jsonl", "{\"type\":\"train\",\"step\":1,\"loss\":2}\n");
    cli_test::expect_error(
        "plot " + d + "/train_only.jsonl --out " + d + "/p2.svg --audit-out " + d + "/c2.svg",
        "no audit lines");
}

// pldr audit --checkpoints (issue 38): a series of saved checkpoints, given in any order, audited
// into one report against tokens seen. Each checkpoint's curve point equals the --audit-every line
// of an uninterrupted run at that step (float64; resume is exact), its tokens are
// step x batch x (ctx - 1), and the curves are drawn.
TEST(CliTrain, AuditCheckpointsEqualsTheRunsAuditLines) {
    namespace fs = std::filesystem;
    const std::string d = cli_test::tmp_dir("cli_train_audit_series");
    auto r = cli_test::run(train_args(d + "/o") + " --steps 6 --audit-every 3 --dtype f64");
    ASSERT_EQ(r.code, 0) << r.err;
    std::map<int64_t, nlohmann::json> line;  // step -> audit
    std::istringstream ms(cli_test::slurp(d + "/o/metrics.jsonl"));
    for (std::string l; std::getline(ms, l);) {
        auto j = nlohmann::json::parse(l);
        if (j["type"] == "audit") line[j["step"].get<int64_t>()] = j["audit"];
    }
    ASSERT_EQ(line.size(), 3u);
    r = cli_test::run(train_args(d + "/p") + " --steps 6 --stop-at 3 --dtype f64");
    ASSERT_EQ(r.code, 0) << r.err;
    fs::copy(d + "/p", d + "/c3", fs::copy_options::recursive);
    r = cli_test::run("train --resume " + d + "/p --data " + data().shards + " --out " + d +
                      "/p --steps 6");  // the checkpoint's dtype, f64
    ASSERT_EQ(r.code, 0) << r.err;
    cli_test::expect_error("train --resume " + d + "/p --data " + data().shards + " --out " + d +
                               "/p --steps 7 --dtype f32",
                           "trained with --dtype f64, not f32");
    r = cli_test::run("audit --checkpoints " + d + "/p " + d + "/c3 --out " + d +
                      "/s --steps 8 --cont-len 32 --dtype f64 --items 0");
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<nlohmann::json> pts;
    std::istringstream cs(cli_test::slurp(d + "/s/curves.jsonl"));
    for (std::string l; std::getline(cs, l);) pts.push_back(nlohmann::json::parse(l));
    ASSERT_EQ(pts.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const int64_t step = 3 * int64_t(i + 1);  // sorted by tokens seen
        EXPECT_EQ(pts[i]["step"], step);
        EXPECT_EQ(pts[i]["tokens"].get<double>(), double(step * 4 * 15));
        EXPECT_EQ(pts[i]["audit"], line[step]) << pts[i]["audit"].dump() << "\n"
                                               << line[step].dump();
    }
    const auto all = nlohmann::json::parse(cli_test::slurp(d + "/s/audit.json"));
    ASSERT_EQ(all["checkpoints"].size(), 2u);
    EXPECT_EQ(all["checkpoints"][1]["report"]["curve_point"], line[6]);
    const std::string svg = cli_test::slurp(d + "/s/curves.svg");
    for (const char* label : {"eps_G", "G_LM order (prompts)", "tokens seen"})
        EXPECT_NE(svg.find(label), std::string::npos) << label;
    cli_test::expect_error("audit " + d + "/p --checkpoints " + d + "/c3 --out " + d + "/s2",
                           "not both");
    cli_test::expect_error("audit --checkpoints " + d + "/none --out " + d + "/s3", "none");
}
