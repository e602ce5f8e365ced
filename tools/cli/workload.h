// SPDX-License-Identifier: Apache-2.0
// The embedded demo workload of `flashindexer run`: one prefill chunk and two decode batches
// over one paged K cache (FP8, or MXFP4 in FP8-sized pages as DeepSeek-V4 lays it out),
// generated deterministically from a seed.
//
// The scores have the structure real indexer scores have, so that selection is exercised on
// more than i.i.d. noise: a per-request common offset, attention sinks, a local window,
// needles, and runs of identical keys that make many logits tie at the k-th value.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "flashindexer/kcache.h"
#include "flashindexer/status.h"

namespace flashindexer::cli {

inline constexpr int kHeadDim = 128;  // D of every supported model
inline constexpr int kPageSize = 64;  // keys per K cache page (the SM90 kernels' page)

struct RequestShape {
  int context_len;          // keys of the request (compressed positions), this step's included
  int query_rows;           // rows scored this step: the request's last positions
  int repeated_prompt_len;  // keys of a run of identical keys (0 = none): a tie-heavy request
};

// A batch is either the prefill chunk (scored over the packed workspace) or a decode batch
// (scored over the paged cache, every request contributing next_n rows).
struct BatchShape {
  std::string_view name;
  bool decode = false;
  int next_n = 1;               // decode: rows per request; each request's query_rows equals it
  bool per_token_lens = false;  // decode: context_lens [B, next_n] instead of [B]
  std::vector<RequestShape> requests;
};

struct Preset {
  std::string_view name;
  std::string_view model;
  int heads;  // H
  int topk;   // k
  // eps_q of the model's query quantization (spec §2.3): 1e-10 in DeepSeek-V3.2's kernel (which
  // GLM-5 runs too), 1e-4 in V4's (V4 and V4.1).
  float query_eps;
  std::vector<BatchShape> batches;  // batches[0] is the prefill chunk, the others decode
  // DeepSeek-V4.1 two-level selection (candidates.h): when candidate_blocks (C) > 0, every batch
  // also runs a candidate source (its blocks of candidate_block_size positions, selected from the
  // batch's logits) and a consumer layer on the same rows that selects only inside them.
  int candidate_blocks = 0;
  int candidate_block_size = 0;
};

const std::vector<Preset>& presets();
// nullptr when no preset has that name.
const Preset* find_preset(std::string_view name);

// One query row of a batch.
struct QueryRow {
  int request;        // index into the batch's requests
  int64_t position;   // absolute (compressed) position of the query token in its request
  int64_t key_begin;  // visible columns [key_begin, key_end) of the row in the op's logits
  int64_t key_end;
};

// Every host buffer one batch's ops take. Rows are request-major; a decode batch's rows are
// r = b * next_n + j, so its [rows, ...] buffers are also its [B, next_n, ...] buffers.
struct Batch {
  const BatchShape* shape = nullptr;
  std::vector<QueryRow> rows;
  // The query projection's output before quantization: the run quantizes it on its device
  // (quantize_query_fp8), which folds each head's scale into the weights.
  std::vector<float> q;               // [rows, H, D] f32
  std::vector<float> weights;         // [rows, H] f32 raw head weights (may be negative)
  std::vector<int32_t> block_table;   // [requests, block_table_width] i32 physical page ids
  int64_t block_table_width = 0;      // pages of the longest request; shorter rows pad with 0
  std::vector<int32_t> cu_seq_lens;   // prefill: [requests + 1] i32 workspace offsets
  std::vector<int32_t> ks;            // prefill: [rows] i32 first visible workspace key
  std::vector<int32_t> ke;            // prefill: [rows] i32 one past the last visible key
  std::vector<int32_t> context_lens;  // decode: [B] or [B, next_n] i32
  int64_t visible_pairs = 0;          // sum over rows of key_end - key_begin
  int64_t fewest_row_keys = 0;        // the least key_end - key_begin of a row (0: no rows)
  int64_t logits_width = 0;           // logits columns: workspace keys, or the longest decode row
};

struct Workload {
  const Preset* preset = nullptr;
  uint64_t seed = 0;
  // The K cache's and the queries' format. An MXFP4 page keeps the FP8 page's stride and uses
  // its first 68 * kPageSize bytes (DeepSeek-V4's layout), so the stride is never the page's.
  KFormat format = KFormat::kFP8;
  int64_t num_pages = 0;          // pages of the cache pool (more than the requests need)
  int64_t page_stride_bytes = 0;  // padded beyond the 132 * kPageSize bytes an FP8 page needs
  // [N, D] f32: every request's keys, batch after batch. The prefill chunk's come first, in
  // the order of its packed workspace (row i of the workspace is key i).
  std::vector<float> keys;
  std::vector<int64_t> slot_mapping;  // [N] i64 cache slot of each key
  std::vector<Batch> batches;         // parallel to preset->batches
};

// Draws the workload of `preset` from `seed`: the same bits on every platform (own normal
// and integer draws on std::mt19937_64). The keys and queries stay unquantized: the run
// quantizes them on its device in `format`.
Status make_workload(Workload* workload, const Preset& preset, uint64_t seed,
                     KFormat format = KFormat::kFP8);

}  // namespace flashindexer::cli
