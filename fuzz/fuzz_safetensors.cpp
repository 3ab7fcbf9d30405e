// Fuzz target: a safetensors file (header length, JSON header, offsets, dtypes, data), opened
// and read as the model loader does.
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    const std::string p =
        fuzz::write_bytes("t.safetensors", {reinterpret_cast<const char*>(data), size});
    return fuzz::guarded([&] {
        SafetensorsFile f(p);
        double sum = 0;
        for (const TensorInfo& t : f.tensors()) {
            if (t.dtype == DType::BOOL || !dtype_is_float(t.dtype)) {
                for (int64_t v : f.read_i64(t.name)) sum += double(v);
            } else {
                Tensor<double> x = f.read<double>(t.name);
                for (double v : x.data) sum += v;
                Tensor<float> y = f.read<float>(t.name);
                sum += y.numel();
            }
        }
        for (const auto& [k, v] : f.metadata()) sum += double(k.size() + v.size());
        (void)sum;
    });
}
