// --device on every command that runs a model: "cpu" runs as before; "cuda" where no CUDA device
// can run the model (no GPU visible, a build without the backend, or a command the backend does
// not run yet) exits 1 with one line naming the device; anything else is refused naming it. The
// same through the C++ API (LoadOptions, TrainOptions, BenchOptions) and the C API.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_util.h"
#include "pldr/bench.hpp"
#include "pldr/pldr.h"
#include "pldr/pldr.hpp"

namespace {

const std::string kModel = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f32";

TEST(Device, CudaWithoutABackendExitsOneWithOneLine) {
    const std::string out = cli_test::tmp_dir("device");
    const std::vector<std::string> commands = {
        "generate " + kModel + " --ids 5,6 -n 2",
        "dump " + kModel + " --tokens 5,6,7 --out " + out + "/d.safetensors",
        "grad " + kModel + " --tokens 5,6,7,8 --out " + out + "/g.safetensors",
        "audit " + kModel + " --out " + out + "/audit",
        "serve " + kModel + " --port 0",
        "bench --config S --only decode",
        "train --preset tiny --data " + out + " --out " + out + "/ckpt --steps 1",
    };
    for (const auto& c : commands) {
        SCOPED_TRACE(c);
        const auto r = cli_test::run(c + " --device cuda");
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("device cuda"), std::string::npos) << r.err;
    }
    const auto r = cli_test::run("generate " + kModel + " --ids 5,6 -n 2 --device tpu");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("--device 'tpu': expected cpu, cuda or cuda:N"), std::string::npos)
        << r.err;
    // cpu is the default and runs.
    EXPECT_EQ(cli_test::run("generate " + kModel + " --ids 5,6 -n 2 --device cpu").code, 0);
}

TEST(Device, TheApiRefusesWhatItCannotRun) {
    EXPECT_NO_THROW(pldr::api::check_model_device("cpu"));
    for (const char* d : {"cuda", "cuda:0", "cuda:1", "gpu", "cuda:", "cuda:x", ""})
        EXPECT_THROW(pldr::api::check_model_device(d), pldr::Error) << d;
    pldr::api::LoadOptions lo;
    lo.device = "cuda";
    EXPECT_THROW(pldr::api::Model::load(kModel, lo), pldr::Error);
    lo.device = "cpu";
    EXPECT_NO_THROW(pldr::api::Model::load(kModel, lo));
    pldr::api::BenchOptions bo;
    bo.device = "cuda:0";
    EXPECT_THROW(pldr::api::bench(bo), pldr::Error);

    pldr_load_options c = pldr_load_default_options();
    EXPECT_STREQ(c.device, "cpu");
    c.device = "cuda";
    pldr_model* m = nullptr;
    EXPECT_EQ(pldr_model_load_with(kModel.c_str(), &c, &m), PLDR_ERR_FAILED);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(pldr_last_error()).find("device cuda"), std::string::npos);
    c.device = "cpu";
    ASSERT_EQ(pldr_model_load_with(kModel.c_str(), &c, &m), PLDR_OK) << pldr_last_error();
    pldr_model_free(m);
}

}  // namespace
