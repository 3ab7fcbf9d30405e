// Fuzz target: the TruthfulQA task file (mc_task.json).
#include "fuzz_util.h"
#include "infer/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    const std::string p =
        fuzz::write_bytes("mc_task.json", {reinterpret_cast<const char*>(data), size});
    return fuzz::guarded([&] {
        std::vector<McItem> mc1, mc2;
        load_truthfulqa(p, &mc1, &mc2);
        for (const auto& m : mc2) {
            std::vector<double> lls(m.choices.size(), -1.0);
            (void)mc2_score(lls, m.labels);
        }
    });
}
