// The public file helpers (include/pldr/files.hpp) over core/fs, io/safetensors and io/npy.
#include "pldr/files.hpp"

#include "api_impl.h"
#include "core/fs.h"
#include "io/npy.h"
#include "io/safetensors.h"

namespace pldr::api {

void write_file_atomic(const std::string& path, const std::string& bytes) {
    ::pldr::write_file_atomic(path, bytes);
}
std::string read_file(const std::string& path) {
    return ::pldr::read_file(path);
}
bool file_exists(const std::string& path) {
    return ::pldr::file_exists(path);
}
void require_utf8(const std::string& text, const std::string& what) {
    ::pldr::require_utf8(text, what);
}

Tensor int_tensor(std::vector<int64_t> shape, std::vector<int64_t> ids) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    PLDR_REQUIRE(n == int64_t(ids.size()), "int_tensor: ", ids.size(), " ids for a shape of ", n);
    auto sp = std::make_shared<std::vector<int64_t>>(std::move(ids));
    Tensor t;
    t.dtype = DType::I64;
    t.shape = std::move(shape);
    t.storage = std::shared_ptr<const void>(sp, sp->data());
    return t;
}

namespace {
::pldr::DType internal(DType d) {
    return d == DType::F32   ? ::pldr::DType::F32
           : d == DType::F64 ? ::pldr::DType::F64
                             : ::pldr::DType::I64;
}
}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
    ::pldr::SafetensorsWriter w;
    for (const auto& [name, t] : tensors) {
        PLDR_REQUIRE(t.storage || t.numel() == 0, "save_safetensors: tensor ", name,
                     " has no data");
        w.add_raw(name, internal(t.dtype), t.shape, t.data());
    }
    for (const auto& [k, v] : metadata) w.set_metadata(k, v);
    w.write(path);
}

void save_npy(const std::string& path, const Tensor& t) {
    switch (t.dtype) {
        case DType::F32:
            ::pldr::save_npy<float>(path, t.shape, t.f32());
            break;
        case DType::F64:
            ::pldr::save_npy<double>(path, t.shape, t.f64());
            break;
        default:
            ::pldr::save_npy<int64_t>(path, t.shape, t.i64());
            break;
    }
}

struct Inputs::Impl {
    ::pldr::InputSet in;
};
Inputs::Inputs() : impl_(std::make_unique<Impl>()) {}
Inputs::~Inputs() = default;
Inputs& Inputs::file(const std::string& path) {
    impl_->in.add_file(path);
    return *this;
}
Inputs& Inputs::dir(const std::string& path) {
    impl_->in.add_dir(path);
    return *this;
}
void Inputs::check_file(const std::string& out, const std::string& flag, bool force) const {
    ::pldr::require_output_file(out, impl_->in, flag, force);
}
void Inputs::check_dir(const std::string& out, const std::string& flag,
                       const std::vector<std::string>& writes, bool force,
                       const std::string& own) const {
    ::pldr::require_output_dir(out, impl_->in, flag, writes, force, own);
}

::pldr::InputSet inputs_of(const Model& m) {
    ::pldr::InputSet in;
    in.add_dir(m.info().dir);
    return in;
}

}  // namespace pldr::api
