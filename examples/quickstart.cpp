// SPDX-License-Identifier: Apache-2.0
// The README's C++ example: top-64 keys of 4 query rows over 1000 keys on the CPU.
#include <cstdio>
#include <random>
#include <vector>

#include "flashindexer/flashindexer.h"

namespace fi = flashindexer;

int main() {
  constexpr int kRows = 4, kKeys = 1000, kHeads = 32, kDim = 128, kTopK = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> keys(kKeys * kDim), queries(kRows * kHeads * kDim), weights(kRows * kHeads);
  for (float& x : keys) x = normal(rng);
  for (float& x : queries) x = normal(rng);
  for (float& x : weights) x = normal(rng);

  // Keys -> e4m3 + one power-of-two scale per key; query heads too, their scale folded into W.
  std::vector<uint8_t> key_values(kKeys * kDim), q_values(kRows * kHeads * kDim);
  std::vector<float> key_scales(kKeys), q_scales(kRows * kHeads);
  fi::Status status = fi::quantize_k_fp8(
      fi::TensorView::contiguous(key_values.data(), fi::DType::kE4M3, {kKeys, kDim}),
      fi::TensorView::contiguous(key_scales.data(), fi::DType::kF32, {kKeys}),
      fi::TensorView::contiguous(keys.data(), fi::DType::kF32, {kKeys, kDim}));
  if (status.ok()) {
    status = fi::quantize_k_fp8(
        fi::TensorView::contiguous(q_values.data(), fi::DType::kE4M3, {kRows * kHeads, kDim}),
        fi::TensorView::contiguous(q_scales.data(), fi::DType::kF32, {kRows * kHeads}),
        fi::TensorView::contiguous(queries.data(), fi::DType::kF32, {kRows * kHeads, kDim}));
  }
  for (int i = 0; i < kRows * kHeads; ++i) weights[i] *= q_scales[i];

  // Causal rows: row t sees keys [0, kKeys - kRows + t + 1).
  std::vector<int32_t> ks(kRows, 0), ke(kRows), top(kRows * kTopK);
  for (int t = 0; t < kRows; ++t) ke[t] = kKeys - kRows + t + 1;
  if (status.ok()) {
    status = fi::indexer_prefill(
        fi::TensorView::contiguous(top.data(), fi::DType::kI32, {kRows, kTopK}),
        {fi::TensorView::contiguous(q_values.data(), fi::DType::kE4M3, {kRows, kHeads, kDim}), {}},
        {fi::TensorView::contiguous(key_values.data(), fi::DType::kE4M3, {kKeys, kDim}),
         fi::TensorView::contiguous(key_scales.data(), fi::DType::kF32, {kKeys})},
        fi::TensorView::contiguous(weights.data(), fi::DType::kF32, {kRows, kHeads}),
        fi::TensorView::contiguous(ks.data(), fi::DType::kI32, {kRows}),
        fi::TensorView::contiguous(ke.data(), fi::DType::kI32, {kRows}), kTopK,
        fi::TopKOptions{.sorted = true});
  }
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  std::printf("row 0, best 8 keys:");
  for (int i = 0; i < 8; ++i) std::printf(" %d", top[i]);
  std::printf("\n");
  return 0;
}
