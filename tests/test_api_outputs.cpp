// The output rule and the checked sizes through the public APIs (C++ and C), which the CLI's
// table (test_errors_table.cpp) does not reach: Session::save_g_cache and Model::save never
// replace the model they come from, write into another model directory or checkpoint only with
// force, and refuse an empty path; convert_model and audit alike; sizes whose product or sum
// overflows int64 are an error before anything runs (no token streamed, no batch scored).
#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cli_util.h"
#include "error_util.h"
#include "pldr/pldr.h"
#include "pldr/pldr.hpp"
#include "train/shard.h"

namespace fs = std::filesystem;
namespace api = pldr::api;

namespace {

const std::string kTiny = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f32";
const std::string kSotu = std::string(PLDR_SOURCE_DIR) + "/models/pldr-sotu-small";

std::string copy_model(const std::string& from, const std::string& to) {
    fs::remove_all(to);
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
}

}  // namespace

// Python's Session.save_g_cache(model_dir + "/model.safetensors") used to replace the model it
// was loaded from; the CLI refused the same path. Now the library refuses it, even with force.
TEST(ApiOutputs, SaveGCacheNeverReplacesItsModel) {
    const std::string d = cli_test::tmp_dir("api_out_g");
    const std::string own = copy_model(kTiny, d + "/own"), other = copy_model(kTiny, d + "/other");
    const std::string before = cli_test::slurp(own + "/model.safetensors");
    const api::Model m = api::Model::load(own);
    api::Session s(m);
    s.prefill({1, 2, 3});
    EXPECT_ERROR_HAS(s.save_g_cache(own + "/model.safetensors"), "would overwrite the input");
    EXPECT_ERROR_HAS(s.save_g_cache(own + "/model.safetensors", true), "would overwrite the input");
    EXPECT_ERROR_HAS(s.save_g_cache(own + "/config.json", true), "would overwrite the input");
    EXPECT_EQ(cli_test::slurp(own + "/model.safetensors"), before);
    EXPECT_ERROR_HAS(s.save_g_cache(""), "is empty: give an output path");
    // Another model's file: only with force. A new file beside a model: always.
    EXPECT_ERROR_HAS(s.save_g_cache(other + "/model.safetensors"),
                     "would replace a file of a model directory (" + other + ")");
    EXPECT_EQ(cli_test::slurp(other + "/model.safetensors"), before);
    s.save_g_cache(own + "/g.safetensors");
    EXPECT_TRUE(fs::exists(own + "/g.safetensors"));
    s.save_g_cache(other + "/model.safetensors", true);
    EXPECT_NE(cli_test::slurp(other + "/model.safetensors"), before);
}

TEST(ApiOutputs, SaveAndConvertFollowTheRule) {
    const std::string d = cli_test::tmp_dir("api_out_save");
    const std::string own = copy_model(kTiny, d + "/own"), other = copy_model(kTiny, d + "/other");
    const api::Model m = api::Model::load(own);
    EXPECT_ERROR_HAS(m.save(own), "is the input directory");
    EXPECT_ERROR_HAS(m.save(own, api::DType::F32, true), "is the input directory");
    EXPECT_ERROR_HAS(m.save(""), "is empty: give an output path");
    EXPECT_ERROR_HAS(m.save(other), "is a model directory; writing there would replace it");
    EXPECT_NO_THROW(m.save(other, api::DType::F64, true));
    int f64 = 0;  // replaced: the weights are stored as F64 now
    for (const auto& t : api::inspect_model_dir(other).tensors) f64 += t.dtype == "F64";
    EXPECT_GT(f64, 0);
    EXPECT_NO_THROW(m.save(d + "/fresh"));
    // convert_model: the same rule (the lossy q8 copy never replaces a model unasked).
    EXPECT_ERROR_HAS(api::convert_model(own, "", "q8"), "is empty: give an output path");
    const std::string before = cli_test::slurp(d + "/fresh/model.safetensors");
    EXPECT_ERROR_HAS(api::convert_model(own, d + "/fresh", "q8"),
                     "is a model directory; writing there would replace it");
    EXPECT_EQ(cli_test::slurp(d + "/fresh/model.safetensors"), before);
    EXPECT_NO_THROW(api::convert_model(own, d + "/fresh", "q8", true));
    EXPECT_NE(cli_test::slurp(d + "/fresh/model.safetensors"), before);
    // audit: checked before the audit runs.
    api::AuditOptions ao;
    ao.out_dir = other;
    EXPECT_ERROR_HAS(api::audit(m, ao), "out_dir " + other + " is a model directory");
    ao.out_dir = own;
    ao.force = true;
    EXPECT_ERROR_HAS(api::audit(m, ao), "is the input directory");
}

// -n / max_tokens near INT64_MAX: prompt + max_new wrapped negative, the up-front context check
// passed, tokens streamed out and only then came "context is full". Now nothing is generated.
TEST(ApiOutputs, GenerationSizesThatOverflowAreRefusedUpFront) {
    const api::Model m = api::Model::load(kSotu);
    api::GenerateOptions o;
    o.max_tokens = INT64_MAX;
    int calls = 0;
    EXPECT_ERROR_HAS(m.generate("The state of the Union is", o,
                                [&](const api::TokenInfo&, const std::string&) {
                                    ++calls;
                                    return true;
                                }),
                     "the prompt plus -n new tokens is too large");
    EXPECT_ERROR_HAS(m.check_generation({1, 2}, o), "is too large: 2 + 9223372036854775807");
    EXPECT_ERROR_HAS(m.generate_batch({{1, 2}}, o), "is too large");
    EXPECT_EQ(calls, 0);

    pldr_model* cm = nullptr;
    ASSERT_EQ(pldr_model_load(kSotu.c_str(), nullptr, &cm), PLDR_OK) << pldr_last_error();
    pldr_generate_options go = pldr_generate_default_options();
    go.max_tokens = INT64_MAX;
    char* text = nullptr;
    auto count = [](int64_t, const char*, double, void* user) {
        ++*static_cast<int*>(user);
        return 1;
    };
    EXPECT_EQ(pldr_generate(cm, "The state of the Union is", &go, count, &calls, &text),
              PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("is too large"), std::string::npos)
        << pldr_last_error();
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(text, nullptr);
    pldr_model_free(cm);
}

// --batches × --batch past INT64_MAX wrapped to a small or negative chunk count: "loss 0.0000
// perplexity 1.00". Now an error naming the product, through the C API too; batch × seq of the
// C API's forward and gradient likewise.
TEST(ApiOutputs, ShardAndBatchSizesThatOverflowAreRefused) {
    const std::string d = cli_test::tmp_dir("api_out_shard");
    std::vector<int64_t> t;
    for (int i = 0; i < 9 * 8; ++i) t.push_back((7 * i + 3) % 50);
    pldr::write_shard(d + "/valid.pldrtok", t, 50, 9);
    const api::Model m = api::Model::load(kTiny);
    EXPECT_ERROR_HAS(api::evaluate_shard(m, d + "/valid.pldrtok", 8, INT64_MAX),
                     "the batches' chunks (batches x batch) is too large");
    EXPECT_ERROR_HAS(api::evaluate_shard(m, d + "/valid.pldrtok", INT64_MAX),
                     "the chunks plus --batch is too large");
    EXPECT_EQ(api::evaluate_shard(m, d + "/valid.pldrtok", 2, 2).chunks, 4);  // still counts

    pldr_model* cm = nullptr;
    ASSERT_EQ(pldr_model_load(kTiny.c_str(), nullptr, &cm), PLDR_OK) << pldr_last_error();
    pldr_shard_eval e{};
    EXPECT_EQ(pldr_evaluate_shard(cm, (d + "/valid.pldrtok").c_str(), 8, INT64_MAX, 0, &e),
              PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("is too large"), std::string::npos)
        << pldr_last_error();
    const int64_t ids[2] = {1, 2};
    int64_t n = 0;
    double loss = 0;
    EXPECT_EQ(pldr_forward_tensor(cm, ids, int64_t(1) << 32, int64_t(1) << 32, "fwd.logits",
                                  nullptr, 0, &n, nullptr, nullptr),
              PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("batch x seq is too large"), std::string::npos)
        << pldr_last_error();
    EXPECT_EQ(pldr_loss_and_grad(cm, ids, int64_t(1) << 32, int64_t(1) << 32, &loss, nullptr,
                                 nullptr, 0, nullptr),
              PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("batch x seq is too large"), std::string::npos)
        << pldr_last_error();
    pldr_model_free(cm);
}

// The C API's training writes into another model directory only with opt.force.
TEST(ApiOutputs, CTrainRefusesAModelDirectoryWithoutForce) {
    const std::string d = cli_test::tmp_dir("api_out_train");
    const std::string other = copy_model(kTiny, d + "/other");
    std::vector<int64_t> t;
    for (int i = 0; i < 9 * 8; ++i) t.push_back((7 * i + 3) % 50);
    fs::create_directories(d + "/data");
    pldr::write_shard(d + "/data/train.pldrtok", t, 50, 9);
    const std::string cfg = kTiny + "/config.json", data = d + "/data";
    pldr_train_options o = pldr_train_default_options();
    EXPECT_EQ(o.force, 0);
    o.config_path = cfg.c_str();
    o.data_dir = data.c_str();
    o.out_dir = other.c_str();
    o.steps = 1;
    o.batch = 2;
    o.eval_every = 0;
    pldr_train_summary s{};
    EXPECT_EQ(pldr_train(&o, nullptr, nullptr, &s), PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("is a model directory; writing there"),
              std::string::npos)
        << pldr_last_error();
    o.force = 1;
    EXPECT_EQ(pldr_train(&o, nullptr, nullptr, &s), PLDR_OK) << pldr_last_error();
    EXPECT_EQ(s.steps_done, 1);
    EXPECT_TRUE(fs::exists(other + "/train_state.safetensors"));
}

// A moved-from session is refused in one line by every call, never a null dereference; the
// session it moved into goes on.
TEST(ApiOutputs, AMovedFromSessionIsRefused) {
    const api::Model m = api::Model::load(kTiny);
    api::Session a(m, api::CacheMode::KVG, 8);
    a.prefill({5, 6});
    api::Session b(std::move(a));
    for (const auto& call : std::vector<std::function<void()>>{
             [&] { a.prefill({5}); }, [&] { a.decode(5); }, [&] { a.logits(); }, [&] { a.reset(); },
             [&] { a.length(); }, [&] { a.g_cache(); }}) {
        try {
            call();
            ADD_FAILURE() << "a moved-from session answered";
        } catch (const pldr::Error& e) {
            EXPECT_EQ(std::string(e.what()), "use of a moved-from pldr session");
        }
    }
    EXPECT_EQ(b.length(), 2);
    EXPECT_EQ(b.decode(7).shape[0], m.info().vocab_size);
}
