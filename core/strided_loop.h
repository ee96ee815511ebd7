// Iterates an N-d index space row by row for up to three strided operands.
//
// The innermost dimension is walked with a stride; the outer index is decomposed once per row.
// Used by the layout copy in core/ and the broadcasting elementwise kernels in kernels/cpu/.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zdl {

template <int K>
struct StridedRows {
  std::vector<int64_t> shape;                   // iteration shape (>= 1 dim)
  std::array<std::vector<int64_t>, K> strides;  // per operand, in elements, same rank as shape

  int64_t inner() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
    return r;
  }
  // Element offsets of the first element of row `row` for each operand.
  std::array<int64_t, K> row_offsets(int64_t row) const {
    std::array<int64_t, K> off{};
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      int64_t idx = row % shape[d];
      row /= shape[d];
      for (int k = 0; k < K; ++k) off[k] += idx * strides[k][d];
    }
    return off;
  }
  std::array<int64_t, K> inner_strides() const {
    std::array<int64_t, K> s{};
    for (int k = 0; k < K; ++k) s[k] = shape.empty() ? 0 : strides[k].back();
    return s;
  }
};

// Merges adjacent dimensions that are contiguous for every operand, so a transposed copy of a
// [B,T,NH,HS] tensor walks rows of HS and a contiguous one walks one long row.
template <int K>
StridedRows<K> coalesce(StridedRows<K> in) {
  StridedRows<K> out;
  if (in.shape.empty()) {
    out.shape = {1};
    for (int k = 0; k < K; ++k) out.strides[k] = {0};
    return out;
  }
  out.shape.push_back(in.shape[0]);
  for (int k = 0; k < K; ++k) out.strides[k].push_back(in.strides[k][0]);
  for (size_t d = 1; d < in.shape.size(); ++d) {
    if (in.shape[d] == 1) continue;
    bool merge = out.shape.back() == 1;
    if (!merge) {
      merge = true;
      for (int k = 0; k < K; ++k)
        if (out.strides[k].back() != in.strides[k][d] * in.shape[d]) merge = false;
    }
    if (merge) {
      out.shape.back() *= in.shape[d];
      for (int k = 0; k < K; ++k) out.strides[k].back() = in.strides[k][d];
    } else {
      out.shape.push_back(in.shape[d]);
      for (int k = 0; k < K; ++k) out.strides[k].push_back(in.strides[k][d]);
    }
  }
  return out;
}

}  // namespace zdl
