// SPDX-License-Identifier: Apache-2.0
// Inputs of the query quantizers and of RoPE: queries, weights, a cos/sin cache and positions,
// shared by the CPU and the GPU tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/seed.h"
#include "support/tensors.h"

namespace fitest {

// A tensor of `dtype` (f32 or bf16) holding `x`; `x` is replaced by what the tensor holds.
inline HostTensor float_tensor(DType dtype, std::vector<int64_t> shape, std::vector<float>& x) {
  HostTensor t(dtype, std::move(shape));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::kBF16) {
      t.data<uint16_t>()[i] = float_to_bf16(x[i]);
      x[i] = bf16_to_float(t.data<uint16_t>()[i]);
    } else {
      t.data<float>()[i] = x[i];
    }
  }
  return t;
}

// cos/sin cache rows [P, 64] of a rotary embedding with base 10000, in f32 or bf16; `values`
// receives the floats the tensor holds.
inline HostTensor cos_sin_cache(DType dtype, int64_t positions, std::vector<float>& values) {
  values.assign(static_cast<size_t>(positions * 64), 0.0f);
  for (int64_t p = 0; p < positions; ++p) {
    for (int i = 0; i < 32; ++i) {
      const double angle = static_cast<double>(p) * std::pow(10000.0, -i / 32.0);
      values[p * 64 + i] = static_cast<float>(std::cos(angle));
      values[p * 64 + 32 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return float_tensor(dtype, {positions, 64}, values);
}

// Positions [n] in [0, limit) as i32 or i64; `values` receives them.
inline HostTensor position_tensor(Rng& rng, DType dtype, int64_t n, int64_t limit,
                                  std::vector<int64_t>& values) {
  HostTensor t(dtype, {n});
  values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[i] = rng.uniform_int(0, limit - 1);
    if (dtype == DType::kI64) {
      t.data<int64_t>()[i] = values[i];
    } else {
      t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    }
  }
  return t;
}

// Query rows with adversarial heads among random ones: all zero, all equal, one huge value, a
// value at the e4m3 saturation edge, subnormal, and heads over many binades.
inline std::vector<float> query_values(Rng& rng, int64_t rows, int head_dim) {
  std::vector<float> x(static_cast<size_t>(rows * head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * head_dim;
    const float sigma = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-30, 30)));
    for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(sigma);
    switch (r % 11) {
      case 0:
        for (int d = 0; d < head_dim; ++d) row[d] = 0.0f;
        break;
      case 1:
        for (int d = 0; d < head_dim; ++d) row[d] = -1.5f;
        break;
      case 2:
        row[rng.uniform_int(0, head_dim - 1)] = 3.0e38f;
        break;
      case 3:
        row[0] = 448.0f;
        row[1] = 464.0f;
        row[2] = -447.9f;
        break;
      case 4:
        for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(1e-39f);
        break;
      case 5:
        for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(1e-12f);
        break;
      default:
        break;
    }
  }
  return x;
}

}  // namespace fitest
