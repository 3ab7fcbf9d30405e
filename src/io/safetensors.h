// safetensors reading (memory-mapped, validated) and writing (atomic).
// Layout: u64 LE header length N, N bytes of JSON, then the raw little-endian data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace pldr {

// Hard limits, checked before anything is allocated for the header: the JSON header's size
// (the reference library's own limit), the number of tensors and the rank of each. The data
// of a tensor must lie inside the file, so element counts are bounded by the file size.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;
inline constexpr size_t kMaxSafetensorsTensors = 1u << 16;
inline constexpr size_t kMaxSafetensorsRank = 8;

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool dtype_from_name(const std::string& s, DType* out);

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    size_t begin = 0, end = 0;  // data offsets, relative to the start of the data section

    int64_t numel() const { return shape_numel(shape); }
    size_t nbytes() const { return end - begin; }
};

// True for F64, F32, F16 and BF16.
bool dtype_is_float(DType t);

// A read-only, memory-mapped safetensors file. Everything is validated at open time, and every
// error is one line that starts with the path:
// - the file: a regular file of at least 8 bytes; the header length fits in the file;
// - the header: a JSON object without duplicate keys; `__metadata__` maps strings to strings;
// - each tensor: a known dtype, a shape of non-negative integers, two unsigned offsets inside the
//   data section, byte size = numel * dtype size;
// - the data section: tensors neither overlap nor leave holes, and they cover it to the end (as
//   the reference safetensors library requires).
class SafetensorsFile {
  public:
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const TensorInfo* find(const std::string& name) const;
    const TensorInfo& at(const std::string& name) const;  // throws if missing
    bool has(const std::string& name) const { return find(name) != nullptr; }
    const uint8_t* raw(const TensorInfo& t) const { return data_ + t.begin; }
    // Byte offset of the data section in the file (8 + the header length).
    size_t data_offset() const { return size_t(data_ - static_cast<const uint8_t*>(map_)); }

    // Converts any numeric dtype to T = float, double or int64_t (float types widen/narrow;
    // ints and bools cast).
    template <typename T>
    Tensor<T> read(const std::string& name) const;
    std::vector<int64_t> read_i64(const std::string& name) const;
    // Converts tensor `t` (numel n) into dst, then lets the kernel drop its pages of the mapping,
    // so a loaded model is not held twice (weights + mapped file) at its peak.
    template <typename T>
    void read_into(const TensorInfo& t, T* dst) const;
    // Drops the mapped pages wholly inside t's bytes (they fault in again if read later).
    void release(const TensorInfo& t) const;

  private:
    std::string path_;
    void* map_ = nullptr;
    size_t map_size_ = 0;
    const uint8_t* data_ = nullptr;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// Converts n elements of dtype `src` at `p` into T.
template <typename T>
void convert_to(DType src, const uint8_t* p, int64_t n, T* out);

// Collects tensors and writes them atomically (temp file + rename), sorted by name, or in the
// order they were added (keep_insertion_order: a model's parameters in its layout order, which
// lets a loader map the file as the model's parameter buffer, io/model_load.h).
class SafetensorsWriter {
  public:
    void add_raw(const std::string& name, DType dtype, const Shape& shape, const void* data);
    // Stores a tensor in its own type: float → F32, double → F64, int64_t → I64.
    template <typename T>
    void add(const std::string& name, const Tensor<T>& t) {
        static_assert(
            std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t>,
            "SafetensorsWriter::add: float, double or int64_t");
        DType dt = std::is_same_v<T, double>    ? DType::F64
                   : std::is_same_v<T, int64_t> ? DType::I64
                                                : DType::F32;
        PLDR_REQUIRE(int64_t(t.data.size()) == shape_numel(t.shape), "safetensors writer: tensor '",
                     name, "' has ", t.data.size(), " values but shape ", shape_str(t.shape));
        add_raw(name, dt, t.shape, t.ptr());
    }
    // Converts float/double data to F32 or F64 (other dtypes are an error).
    template <typename T>
    void add_as(const std::string& name, DType dtype, const Shape& shape, const T* data);
    // Borrow instead of copying: `data` must stay alive and unchanged until the last write() or
    // serialize(). add_view_as borrows when T is the stored type and converts (a copy) otherwise.
    // Saving a 110M model's optimizer state this way holds no second copy of it.
    void add_view(const std::string& name, DType dtype, const Shape& shape, const void* data);
    template <typename T>
    void add_view_as(const std::string& name, DType dtype, const Shape& shape, const T* data);
    // Stores bools as BOOL bytes (0/1), e.g. decoder.past_G_values_status.
    void add_bool(const std::string& name, const Shape& shape, const std::vector<bool>& values);
    void add_i64(const std::string& name, const Shape& shape, const int64_t* data) {
        add_raw(name, DType::I64, shape, data);
    }
    void set_metadata(const std::string& k, const std::string& v) { metadata_[k] = v; }
    void keep_insertion_order() { insertion_order_ = true; }
    bool empty() const { return entries_.empty(); }
    size_t size() const { return entries_.size(); }
    bool has(const std::string& name) const { return entries_.count(name) != 0; }
    // Name, dtype, shape and data offsets of every entry, in file order.
    std::vector<TensorInfo> infos() const;
    // The whole file as bytes (write() streams it instead); `extra_metadata` is merged into
    // `__metadata__` (the writer's own entries win on a clash).
    std::string serialize(const std::map<std::string, std::string>& extra_metadata = {}) const;
    void write(const std::string& path,
               const std::map<std::string, std::string>& extra_metadata = {}) const;

  private:
    struct Entry {
        DType dtype;
        Shape shape;
        std::vector<uint8_t> bytes;     // owned, or
        const uint8_t* view = nullptr;  // borrowed (add_view)
        size_t nbytes = 0;
        const uint8_t* data() const { return view ? view : bytes.data(); }
    };
    Entry& put(const std::string& name, DType dtype, const Shape& shape, const void* data);
    std::string header(const std::map<std::string, std::string>& extra_metadata,
                       size_t* data_bytes) const;
    std::map<std::string, Entry> entries_;
    std::vector<std::string> added_;  // names in the order of their first add
    bool insertion_order_ = false;
    std::map<std::string, std::string> metadata_;
    std::vector<std::pair<const std::string*, const Entry*>> in_file_order() const;
};

}  // namespace pldr
