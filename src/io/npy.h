// NumPy .npy files, format version 1.0: magic "\x93NUMPY", bytes 1 0, a little-endian u16 header
// length, then the header "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded
// with spaces and ended by '\n' so that the data starts at a multiple of 64 bytes, then the
// C-order little-endian data. np.load reads these files.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace pldr {

// The whole file as bytes; T = float ('<f4'), double ('<f8') or int64_t ('<i8').
template <typename T>
std::string npy_bytes(const Shape& shape, const T* data);

// Writes the file atomically.
template <typename T>
void save_npy(const std::string& path, const Shape& shape, const T* data);

template <typename T>
void save_npy(const std::string& path, const Tensor<T>& t) {
    PLDR_REQUIRE(int64_t(t.data.size()) == shape_numel(t.shape), path, ": tensor has ",
                 t.data.size(), " values but shape ", shape_str(t.shape));
    save_npy<T>(path, t.shape, t.ptr());
}

// Reads a .npy file (v1.0 – v3.0, C order, dtype <f4, <f8, <i8, <i4 or |b1) converted to T
// (float, double or int64_t). Errors are one line naming the file.
template <typename T>
Tensor<T> load_npy(const std::string& path);

}  // namespace pldr
