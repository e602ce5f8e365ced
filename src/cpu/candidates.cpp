// SPDX-License-Identifier: Apache-2.0
// CPU candidate blocks: the source's block selection, vLLM's mask and the consumer's selection on
// dense logits. Rows are independent and run on OpenMP threads; each row's answer is exact under
// the orders of candidates.h / topk.h, so no result depends on the thread count.
#include "cpu/candidates.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/access.h"
#include "cpu/topk/select.h"
#include "cpu/topk/streaming_topk.h"

namespace flashindexer::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Max of a block's logits with NaN propagating, NaN then ranked as +inf.
float block_score(const float* x, int64_t n) {
  float best = -kInf;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return kInf;
    best = x[i] > best ? x[i] : best;
  }
  return best;
}

// Offers positions [first, first + n) of a row (scores from `row`, position 0 first) to the
// selector, in pushes of at most kMaxPushed.
void push_positions(StreamingTopK& selector, const float* row, int64_t first, int64_t n) {
  for (int64_t at = first; at < first + n; at += kMaxPushed) {
    const int count = static_cast<int>(std::min<int64_t>(kMaxPushed, first + n - at));
    selector.push(row + at, count, static_cast<uint32_t>(at));
  }
}

// vLLM's mask of one row (candidates.h, apply_candidate_mask); `row` is column 0.
void mask_row(float* row, int64_t width, const RowBound& b, const int32_t* candidates,
              int64_t stride, int64_t count, int block_size, std::vector<uint8_t>& flags) {
  const Visible vis = visible_of(b, width);
  const int64_t row_blocks = (vis.count + block_size - 1) / block_size;
  flags.assign(static_cast<size_t>(row_blocks), 0);
  bool edge = false;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = candidates[i * stride];
    if (c < 0) continue;
    if (b.ks + c * block_size >= width) {
      edge = true;
    } else if (c < row_blocks) {
      flags[c] = 1;
    }
  }
  for (int64_t col = 0; col < vis.start; ++col) row[col] = -kInf;
  for (int64_t p = 0; p < vis.count; ++p) {
    const bool keep = flags[p / block_size] != 0 || (vis.start + p == width - 1 && edge);
    if (!keep) row[vis.start + p] = -kInf;
  }
  for (int64_t col = vis.start + vis.count; col < width; ++col) row[col] = -kInf;
}

}  // namespace

Visible visible_of(const RowBound& b, int64_t width) {
  const int64_t start = std::clamp<int64_t>(b.ks, 0, width);
  const int64_t end = std::clamp<int64_t>(b.ke, start, width);
  return {start, end - start};
}

void kept_blocks(std::vector<int64_t>& blocks, const int32_t* candidates, int64_t stride,
                 int64_t count, int64_t row_blocks) {
  blocks.clear();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = candidates[i * stride];
    if (c >= 0 && c < row_blocks) blocks.push_back(c);
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
}

std::vector<RowBound> candidate_row_bounds(const CandidateRows& rows, int64_t count) {
  std::vector<RowBound> bounds(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t r = t / rows.row_repeat;
    const int64_t ks = rows.ks.defined() ? *element<int32_t>(rows.ks, r) : 0;
    int64_t ke = 0;
    if (rows.ke.rank == 2) {
      ke = *element<int32_t>(rows.ke, r / rows.ke.shape[1], r % rows.ke.shape[1]);
    } else if (rows.ke.defined()) {
      ke = *element<int32_t>(rows.ke, r);
    }
    bounds[t] = {ks, ke};
  }
  return bounds;
}

void select_row_blocks(int32_t* out_row, int64_t out_stride, const float* block_max,
                       int64_t row_blocks, int num_blocks, std::vector<uint64_t>& keys) {
  const uint32_t minus_inf_key = ordered_score_bits(-kInf);
  keys.resize(static_cast<size_t>(row_blocks));
  for (int64_t b = 0; b < row_blocks; ++b) {
    const float score = b == row_blocks - 1 ? kInf : block_max[b];
    keys[b] = rank_key_of_score(score, static_cast<uint32_t>(b));
  }
  const size_t kept = keep_largest(keys.data(), keys.size(), num_blocks, /*sorted=*/true);
  for (int64_t i = 0; i < num_blocks; ++i) {
    const bool valid = static_cast<size_t>(i) < kept && (keys[i] >> 32) != minus_inf_key;
    out_row[i * out_stride] = valid ? static_cast<int32_t>(~static_cast<uint32_t>(keys[i])) : -1;
  }
}

void select_candidate_blocks(const TensorView& out, const TensorView& logits,
                             const std::vector<RowBound>& bounds, int num_blocks, int block_size,
                             int threads) {
  const int64_t width = logits.shape[1];
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint64_t> keys;
    std::vector<float> block_max;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < out.shape[0]; ++t) {
      const Visible vis = visible_of(bounds[t], width);
      const int64_t row_blocks = (vis.count + block_size - 1) / block_size;
      const float* row = element<float>(logits, t, vis.start);
      block_max.resize(static_cast<size_t>(row_blocks));
      for (int64_t b = 0; b < row_blocks; ++b) {
        const int64_t n = std::min<int64_t>(block_size, vis.count - b * block_size);
        block_max[b] = block_score(row + b * block_size, n);
      }
      select_row_blocks(element<int32_t>(out, t, 0), out.stride[1], block_max.data(), row_blocks,
                        num_blocks, keys);
    }
  }
}

void apply_candidate_mask(const TensorView& logits, const std::vector<RowBound>& bounds,
                          const TensorView& candidates, int block_size, int threads) {
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint8_t> flags;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < logits.shape[0]; ++t) {
      mask_row(element<float>(logits, t, 0), logits.shape[1], bounds[t],
               element<int32_t>(candidates, t, 0), candidates.stride[1], candidates.shape[1],
               block_size, flags);
    }
  }
}

void candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                            const std::vector<RowBound>& bounds, const TensorView& candidates,
                            int block_size, int k, bool sorted, bool vllm_compatible, int threads) {
  const int64_t width = logits.shape[1];
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint64_t> buffer(streaming_topk_capacity(k));
    std::vector<int64_t> blocks;
    std::vector<uint8_t> flags;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < out.shape[0]; ++t) {
      const Visible vis = visible_of(bounds[t], width);
      const int32_t* row_candidates = element<int32_t>(candidates, t, 0);
      StreamingTopK selector;
      selector.reset(buffer.data(), k);
      if (vllm_compatible) {
        mask_row(element<float>(logits, t, 0), width, bounds[t], row_candidates,
                 candidates.stride[1], candidates.shape[1], block_size, flags);
        push_positions(selector, element<float>(logits, t, vis.start), 0, vis.count);
      } else {
        const int64_t row_blocks = (vis.count + block_size - 1) / block_size;
        kept_blocks(blocks, row_candidates, candidates.stride[1], candidates.shape[1], row_blocks);
        // Runs of consecutive blocks are pushed together (fewer, fuller pushes).
        for (size_t i = 0; i < blocks.size();) {
          size_t j = i + 1;
          while (j < blocks.size() && blocks[j] == blocks[j - 1] + 1) ++j;
          const int64_t first = blocks[i] * block_size;
          const int64_t last = std::min<int64_t>((blocks[j - 1] + 1) * block_size, vis.count);
          push_positions(selector, element<float>(logits, t, vis.start), first, last - first);
          i = j;
        }
      }
      selector.finish(sorted);
      write_indices(element<int32_t>(out, t, 0), selector.keys(), selector.size(), k, sorted);
    }
  }
}

}  // namespace flashindexer::cpu
