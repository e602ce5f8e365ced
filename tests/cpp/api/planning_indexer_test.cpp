// SPDX-License-Identifier: Apache-2.0
// The plan end to end on CPU tensors: running indexer_prefill chunk by chunk, on each chunk's
// slice of the packed workspace with its planned row bounds, gives the same top-k rows bit for
// bit as one unchunked call over the whole batch.
#include <cstdint>
#include <vector>

#include "support/compare.h"
#include "support/operands.h"
#include "support/seed.h"

namespace fitest {
namespace {

// Rows [begin, end) of a view (its outer dimension); an undefined view stays undefined.
TensorView rows_of(const TensorView& view, int64_t begin, int64_t end) {
  if (!view.defined()) return view;
  TensorView rows = view;
  rows.data = static_cast<uint8_t*>(view.data) + begin * view.stride[0] * dtype_size(view.dtype);
  rows.shape[0] = end - begin;
  return rows;
}

QuantizedTensor rows_of(const QuantizedTensor& t, int64_t begin, int64_t end) {
  return {rows_of(t.values, begin, end), rows_of(t.scales, begin, end)};
}

TEST(PlannedPrefillChunks, IndexerChunkByChunkEqualsOneUnchunkedCall) {
  FI_SEEDED_RNG(rng);
  int64_t multi_chunk_plans = 0, sub_chunks = 0;
  for (const OperandCase& c : kOperandCases) {
    SCOPED_TRACE(describe(c));
    for (int trial = 0; trial < 12; ++trial) {
      const int R = static_cast<int>(rng.pick(std::vector<int64_t>{1, 2, 4}));
      const int64_t requests = rng.uniform_int(1, 6);
      std::vector<int64_t> seq_lens, query_lens, key_lens;
      int64_t tokens = 0, keys = 0;
      for (int64_t r = 0; r < requests; ++r) {
        seq_lens.push_back(rng.bernoulli(0.15) ? 0 : rng.uniform_int(0, 120));
        query_lens.push_back(rng.uniform_int(0, seq_lens.back()));
        key_lens.push_back(seq_lens.back() / R);
        tokens += query_lens.back();
        keys += key_lens.back();
      }
      if (tokens == 0 || keys == 0) continue;
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{1, 8, 40}));
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " R=" << R << " k=" << k
                                        << " tokens=" << tokens << " keys=" << keys);
      const Operand q = make_query(rng, c.format, {tokens, c.heads}, c.head_dim);
      const Operand workspace = make_keys(rng, c.format, keys, c.head_dim);
      const HostTensor weights = make_weights(rng, tokens, c.heads);

      // One call over the whole batch: one chunk holding every request and row.
      const PrefillChunk whole{0, static_cast<int32_t>(requests), 0, tokens, 0, tokens, keys, true};
      HostTensor ks(DType::kI32, {tokens}), ke(DType::kI32, {tokens});
      FI_ASSERT_OK(build_prefill_row_bounds({ks.data<int32_t>(), static_cast<size_t>(tokens)},
                                            {ke.data<int32_t>(), static_cast<size_t>(tokens)}, {},
                                            whole, seq_lens, query_lens, {R}));
      HostTensor expected = poisoned_topk_output(tokens, k);
      FI_ASSERT_OK(indexer_prefill(expected.view(), q.view(), workspace.view(), weights.view(),
                                   ks.view(), ke.view(), k, TopKOptions{true}));

      // The planned chunks, each on its slice of the workspace; rows no chunk holds stay -1.
      std::vector<PrefillChunk> chunks;
      FI_ASSERT_OK(
          plan_prefill_chunks(chunks, key_lens, query_lens,
                              {rng.uniform_int(1, keys), rng.uniform_int(4, 4 * tokens * keys),
                               rng.uniform_int(0, 4)}));
      HostTensor got(DType::kI32, {tokens, k});
      got.fill<int32_t>(-1);
      std::vector<int64_t> key_offset = {0};  // each request's first key in the whole workspace
      for (int64_t n : key_lens) key_offset.push_back(key_offset.back() + n);
      multi_chunk_plans += chunks.size() > 1 ? 1 : 0;
      for (const PrefillChunk& chunk : chunks) {
        sub_chunks += chunk.gathers_keys ? 0 : 1;
        const int64_t rows = chunk.token_end - chunk.token_begin;
        HostTensor chunk_ks(DType::kI32, {rows}), chunk_ke(DType::kI32, {rows});
        FI_ASSERT_OK(build_prefill_row_bounds({chunk_ks.data<int32_t>(), static_cast<size_t>(rows)},
                                              {chunk_ke.data<int32_t>(), static_cast<size_t>(rows)},
                                              {}, chunk, seq_lens, query_lens, {R}));
        const int64_t first_key = key_offset[chunk.request_begin];
        FI_ASSERT_OK(
            indexer_prefill(rows_of(got.view(), chunk.token_begin, chunk.token_end),
                            rows_of(q.view(), chunk.token_begin, chunk.token_end),
                            rows_of(workspace.view(), first_key, first_key + chunk.num_keys),
                            rows_of(weights.view(), chunk.token_begin, chunk.token_end),
                            chunk_ks.view(), chunk_ke.view(), k, TopKOptions{true}));
      }
      for (int64_t t = 0; t < tokens; ++t) {
        for (int i = 0; i < k; ++i) {
          ASSERT_EQ(got.at<int32_t>({t, i}), expected.at<int32_t>({t, i}))
              << "row " << t << " slot " << i << " of " << chunks.size() << " chunks";
        }
      }
    }
  }
  EXPECT_GT(multi_chunk_plans, 0);  // the plans exercised several groups and query sub-chunks
  EXPECT_GT(sub_chunks, 0);
}

}  // namespace
}  // namespace fitest
