// SPDX-License-Identifier: Apache-2.0
// CPU topk_per_row: one read of each visible logit.
//
// A sample of the row gives a floor expected to let about 3k/2 scores through; one pass
// then streams the row through StreamingTopK, which drops everything below the floor at once.
// If the guess was too high (fewer than min(n, k) survivors), the row is streamed again with no
// floor, so the result is always exact.
#include <omp.h>

#include <algorithm>

#include "core/rows.h"
#include "cpu/cpu_ops.h"
#include "cpu/topk/streaming_topk.h"
#include "flashindexer/formats.h"

namespace flashindexer::cpu {
namespace {

// The sample: kSampleLines runs of kSampleRun consecutive scores (one cache line each), spread
// evenly over the row, so sampling costs a few dozen cache misses, not one per sample.
constexpr int64_t kSampleRun = 16;
constexpr int64_t kSampleLines = 128;
constexpr int64_t kSamples = kSampleRun * kSampleLines;
// Sample only when the sample expects at least this many of its members in the top k (fewer
// would make the guess too noisy to pay for itself), and only rows several times longer than k.
constexpr int64_t kMinSampledTopK = 8;
constexpr int64_t kMinRowOverK = 4;
// The floor is the sample's score at the rank that expects 3k/2 survivors: below the 2k at
// which the selector prunes, so a good guess costs one selection at the end, and far enough
// above k that a guess too high (fewer than k survivors: a second pass) is rare.
constexpr int64_t kSurvivorsPerK2 = 3;  // survivors expected = kSurvivorsPerK2 * k / 2

template <typename Logit>
float to_float(Logit value) {
  if constexpr (sizeof(Logit) == 2) {
    return bf16_to_float(value);
  } else {
    return value;
  }
}

// A floor below about 3k/2 of the n scores, from the sample; 0 (no floor) for short rows.
template <typename Logit>
uint32_t sampled_floor(const Logit* row, int64_t n, int k) {
  if (n < kSampleRun || kSamples * k < kMinSampledTopK * n || n < kMinRowOverK * k) return 0;
  uint32_t sample[kSamples];
  const int64_t line_stride = (n - kSampleRun) / (kSampleLines - 1);
  // All the lines' misses at once (a run may straddle two lines), not a few at a time.
  for (int64_t line = 0; line < kSampleLines; ++line) {
    __builtin_prefetch(row + line * line_stride);
    __builtin_prefetch(row + line * line_stride + kSampleRun - 1);
  }
  for (int64_t line = 0; line < kSampleLines; ++line) {
    const Logit* run = row + line * line_stride;
    for (int64_t i = 0; i < kSampleRun; ++i) {
      sample[line * kSampleRun + i] = ordered_score_bits(to_float(run[i]));
    }
  }
  const int64_t rank = std::min<int64_t>(kSamples - 1, kSurvivorsPerK2 * kSamples * k / (2 * n));
  return largest_at_rank(sample, kSamples, static_cast<size_t>(rank));
}

// How far ahead of the block being filtered its row is prefetched, in blocks of kMaxPushed
// scores (4 KiB of fp32): left to the hardware prefetcher, the pass, which stops every block for
// the survivors and the selector, read at ~40 % of the single-thread streaming-read ceiling.
constexpr int64_t kPrefetchBlocks = 4;

template <typename Logit>
void stream_row(StreamingTopK& selector, const Logit* row, int64_t n) {
  float widened[kMaxPushed];
  for (int64_t begin = 0; begin < n; begin += kMaxPushed) {
    const int count = static_cast<int>(std::min<int64_t>(kMaxPushed, n - begin));
    const int64_t ahead = begin + kPrefetchBlocks * kMaxPushed;
    const int64_t ahead_end = std::min<int64_t>(n, ahead + kMaxPushed);
    for (int64_t at = ahead; at < ahead_end; at += 64 / static_cast<int64_t>(sizeof(Logit))) {
      __builtin_prefetch(row + at);
    }
    if constexpr (sizeof(Logit) == 2) {  // bf16: widen (exactly) to fp32 first
      for (int i = 0; i < count; ++i) widened[i] = to_float(row[begin + i]);
      selector.push(widened, count, static_cast<uint32_t>(begin));
    } else {
      selector.push(row + begin, count, static_cast<uint32_t>(begin));
    }
  }
}

template <typename Logit>
void select_row(int32_t* out, const Logit* row, int64_t n, int k, bool sorted, uint64_t* buffer) {
  StreamingTopK selector;
  selector.reset(buffer, k, sampled_floor(row, n, k));
  stream_row(selector, row, n);
  if (selector.size() < static_cast<size_t>(std::min<int64_t>(n, k))) {
    selector.reset(buffer, k);
    stream_row(selector, row, n);
  }
  selector.finish(sorted);
  write_indices(out, selector.keys(), selector.size(), k, sorted);
}

}  // namespace

void topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                  bool sorted, int threads, void* workspace) {
  const int64_t rows = out.shape[0];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    // The checks keep every range within the logits, so the clamp changes nothing here.
    const int64_t width = logits.shape[1];
    const rows::Range range =
        ranges.is_prefill()
            ? rows::prefill_range(*element<int32_t>(ranges.ks, r), *element<int32_t>(ranges.ke, r),
                                  width)
            : rows::decode_range(rows::decode_row_end(ranges.lengths, ranges.next_n, r), width);
    const int64_t start = range.start;
    const int64_t visible = range.end - range.start;
    uint64_t* buffer =
        static_cast<uint64_t*>(workspace) + omp_get_thread_num() * streaming_topk_capacity(k);
    int32_t* out_row = element<int32_t>(out, r, 0);
    if (logits.dtype == DType::kBF16) {
      select_row(out_row, element<uint16_t>(logits, r, start), visible, k, sorted, buffer);
    } else {
      select_row(out_row, element<float>(logits, r, start), visible, k, sorted, buffer);
    }
  }
}

size_t topk_thread_workspace_bytes(int k) { return streaming_topk_capacity(k) * sizeof(uint64_t); }

}  // namespace flashindexer::cpu
