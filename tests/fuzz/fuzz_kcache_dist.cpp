// SPDX-License-Identifier: Apache-2.0
// The quantizers, the page cache (insert, then gather) and the multi-GPU building blocks (DCP
// pack + merge against the un-sharded top-k, TP row sharding against the best split).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fuzz_ops.h"
#include "reference/reference.h"

namespace flashindexer::fuzz {
namespace {

// Element offset in bytes of [i0, i1, last] (rank 3) or [i0, last] (rank 2).
size_t offset_of(const Tensor& t, int64_t i0, int64_t i1, int64_t last) {
  if (t.view.rank == 3) return t.offset({i0, i1, last});
  return t.offset({i0, last});
}

float dense_value(const Tensor& t, int64_t i0, int64_t i1, int64_t d) {
  const uint8_t* at = t.memory.data() + offset_of(t, i0, i1, d);
  if (t.view.dtype == DType::kBF16) {
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    return bf16_to_float(bits);
  }
  float value;
  std::memcpy(&value, at, 4);
  return value;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

void fuzz_quantize(FuzzInput& in) {
  const int kind = static_cast<int>(in.range(0, 3));
  const bool mxfp4 = kind >= 2;
  const bool three_d = mxfp4 && in.chance(96);
  const int64_t rows = in.range(0, 5);
  const int64_t heads = three_d ? in.range(0, 3) : 1;
  int64_t dim = in.pick<int64_t>({32, 64, 128, 96, 256});
  if (in.chance(8)) {
    dim = in.pick<int64_t>({16, 48, 1056});
    if (mxfp4 || dim > 1024) in.valid = false;
  }
  const DType dense_dtype = in.chance(96) ? DType::kBF16 : DType::kF32;
  std::vector<uint8_t> no_workspace;
  const RunOptions options = make_run_options(in, no_workspace, [](int) { return size_t{0}; });
  const int64_t inner = three_d ? heads : 1;
  const int64_t value_dim = mxfp4 ? dim / 2 : dim;
  const int64_t scale_dim = dim / kMxfp4BlockSize;
  auto shaped = [&](DType dtype, int64_t last, Fill fill) {
    return three_d ? make_tensor(in, dtype, {rows, heads, last}, fill)
                   : make_tensor(in, dtype, {rows, last}, fill);
  };

  Tensor dense = kind % 2 == 0 ? shaped(dense_dtype, dim, Fill::kScores)
                               : shaped(DType::kF32, dim, Fill::kZero);
  Tensor values = shaped(mxfp4 ? DType::kE2M1x2 : DType::kE4M3, value_dim, Fill::kRawBytes);
  Tensor scales = mxfp4 ? shaped(DType::kUE8M0, scale_dim, Fill::kScaleBytes)
                        : make_tensor(in, DType::kF32, {rows}, Fill::kKeyScales);
  dense.snapshot();
  values.snapshot();
  scales.snapshot();
  const char* op = kind == 0   ? "quantize_k_fp8"
                   : kind == 1 ? "dequantize_k_fp8"
                   : kind == 2 ? "quantize_mxfp4"
                               : "dequantize_mxfp4";
  Status status;
  switch (kind) {
    case 0:
      status = quantize_k_fp8(values.view, scales.view, dense.view, options);
      break;
    case 1:
      status = dequantize_k_fp8(dense.view, values.view, scales.view, options);
      break;
    case 2:
      status = quantize_mxfp4(values.view, scales.view, dense.view, options);
      break;
    default:
      status = dequantize_mxfp4(dense.view, values.view, scales.view, options);
      break;
  }
  if (kind % 2 == 0) {
    expect_unchanged(op, "input", dense);
  } else {
    expect_unchanged(op, "values", values);
    expect_unchanged(op, "scales", scales);
  }
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  if (!three_d) {
    expect_untouched_outside(op, kind % 2 == 0 ? "values" : "out", kind % 2 == 0 ? values : dense,
                             rows, kind % 2 == 0 ? value_dim : dim);
    if (mxfp4 && kind == 2) expect_untouched_outside(op, "scales", scales, rows, scale_dim);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < inner; ++h) {
      std::vector<float> row(dim);
      for (int64_t d = 0; d < dim; ++d) row[d] = dense_value(dense, r, h, d);
      const std::string where = " at row " + std::to_string(r) + ", " + std::to_string(h);
      if (kind == 0) {
        std::vector<uint8_t> want(dim);
        float want_scale;
        reference::quantize_fp8_row(want.data(), &want_scale, row.data(), static_cast<int>(dim));
        if (!same_float(want_scale, scales.get<float>({r}))) violation(op, "scale differs" + where);
        for (int64_t d = 0; d < dim; ++d) {
          if (values.get<uint8_t>({r, d}) != want[d]) violation(op, "value differs" + where);
        }
      } else if (kind == 2) {
        std::vector<uint8_t> want(dim / 2), want_scales(scale_dim);
        reference::quantize_mxfp4_row(want.data(), want_scales.data(), row.data(),
                                      static_cast<int>(dim));
        for (int64_t d = 0; d < dim / 2; ++d) {
          if (values.memory[offset_of(values, r, h, d)] != want[d])
            violation(op, "value differs" + where);
        }
        for (int64_t b = 0; b < scale_dim; ++b) {
          if (scales.memory[offset_of(scales, r, h, b)] != want_scales[b]) {
            violation(op, "scale byte differs" + where);
          }
        }
      } else {
        for (int64_t d = 0; d < dim; ++d) {
          float want;
          if (kind == 1) {
            want = e4m3_to_float(values.get<uint8_t>({r, d})) * scales.get<float>({r});
          } else {
            const uint8_t pair = values.memory[offset_of(values, r, h, d / 2)];
            const uint8_t code = d % 2 == 0 ? pair & 15 : pair >> 4;
            want = e2m1_to_float(code) *
                   ue8m0_to_float(scales.memory[offset_of(scales, r, h, d / kMxfp4BlockSize)]);
          }
          if (!same_float(want, row[d])) {
            violation(op, "out differs" + where + " column " + std::to_string(d) + ": " +
                              std::to_string(row[d]) + ", expected " + std::to_string(want));
          }
        }
      }
    }
  }
}

void fuzz_kcache(FuzzInput& in) {
  PagedKCache cache;
  cache.format = in.chance(128) ? KFormat::kMXFP4 : KFormat::kFP8;
  const bool mxfp4 = cache.format == KFormat::kMXFP4;
  cache.head_dim = in.pick({64, 128});
  cache.page_size = in.pick({1, 2, 3, 4, 16});
  cache.num_pages = in.range(0, 4);
  const int64_t page_bytes = PagedKCache::page_bytes(cache.format, cache.page_size, cache.head_dim);
  cache.page_stride_bytes = (page_bytes + 3) / 4 * 4 + 4 * in.range(0, 2);
  if (in.chance(6)) {
    cache.head_dim = in.pick({32, 96});
    in.valid = false;
  }
  Tensor pages = cache_pages(in, cache.num_pages * cache.page_stride_bytes);
  cache.data = pages.view.data;
  const int64_t slots = cache.num_pages * cache.page_size;
  const int64_t value_bytes = mxfp4 ? cache.head_dim / 2 : cache.head_dim;
  const int64_t scale_bytes = mxfp4 ? cache.head_dim / 32 : 4;
  auto value_at = [&](int64_t slot) {
    return (slot / cache.page_size) * cache.page_stride_bytes +
           (slot % cache.page_size) * value_bytes;
  };
  auto scale_at = [&](int64_t slot) {
    return (slot / cache.page_size) * cache.page_stride_bytes +
           int64_t{cache.page_size} * value_bytes + (slot % cache.page_size) * scale_bytes;
  };

  // insert_k_cache
  const int64_t count = in.range(0, 6);
  Tensor keys = make_tensor(in, in.chance(96) ? DType::kBF16 : DType::kF32,
                            {count + in.range(0, 1), cache.head_dim}, Fill::kScores);
  Tensor mapping =
      make_tensor(in, in.chance(128) ? DType::kI32 : DType::kI64, {count}, Fill::kZero);
  std::vector<int64_t> slot_of(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t slot = slots > 0 ? in.range(-1, slots - 1) : -1;
    if (in.chance(6)) {
      slot = in.pick<int64_t>({slots, -7, int64_t{1} << 40});
      if (slot >= slots) in.valid = false;
    }
    slot_of[i] = mapping.view.dtype == DType::kI32 ? static_cast<int32_t>(slot) : slot;
    mapping.set_i64({i}, slot);
  }
  std::vector<uint8_t> no_workspace;
  const RunOptions options = make_run_options(in, no_workspace, [](int) { return size_t{0}; });
  keys.snapshot();
  mapping.snapshot();
  pages.snapshot();
  const char* op = "insert_k_cache";
  Status status = insert_k_cache(cache, keys.view, mapping.view, options);
  expect_unchanged(op, "keys", keys);
  expect_unchanged(op, "slot_mapping", mapping);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  std::vector<int> writers(std::max<int64_t>(slots, 0), 0);
  for (int64_t slot : slot_of) {
    if (slot >= 0 && slot < slots) ++writers[slot];
  }
  std::vector<bool> writable(pages.memory.size(), false);
  for (int64_t slot = 0; slot < slots; ++slot) {
    if (writers[slot] == 0) continue;
    for (int64_t b = 0; b < value_bytes; ++b) writable[value_at(slot) + b] = true;
    for (int64_t b = 0; b < scale_bytes; ++b) writable[scale_at(slot) + b] = true;
  }
  for (size_t i = 0; i < pages.memory.size(); ++i) {
    if (!writable[i] && pages.memory[i] != pages.before[i]) {
      violation(op, "wrote cache byte " + std::to_string(i) + ", which no mapped slot owns");
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = slot_of[i];
    if (slot < 0 || slot >= slots || writers[slot] != 1) continue;
    std::vector<float> row(cache.head_dim);
    for (int d = 0; d < cache.head_dim; ++d) row[d] = dense_value(keys, i, 0, d);
    std::vector<uint8_t> want_values(value_bytes), want_scales(scale_bytes);
    if (mxfp4) {
      reference::quantize_mxfp4_row(want_values.data(), want_scales.data(), row.data(),
                                    cache.head_dim);
    } else {
      float scale;
      reference::quantize_fp8_row(want_values.data(), &scale, row.data(), cache.head_dim);
      std::memcpy(want_scales.data(), &scale, 4);
    }
    if (std::memcmp(pages.memory.data() + value_at(slot), want_values.data(), value_bytes) != 0 ||
        std::memcmp(pages.memory.data() + scale_at(slot), want_scales.data(), scale_bytes) != 0) {
      violation(op, "slot " + std::to_string(slot) + " does not hold the quantized key " +
                        std::to_string(i));
    }
  }

  // gather_k_workspace over the cache as filled
  const int64_t requests = in.range(0, 3);
  const int64_t table_pages = in.range(0, 3);
  Tensor block_table = make_tensor(in, DType::kI32, {requests, table_pages}, Fill::kZero);
  Tensor cu_seq_lens = make_tensor(in, DType::kI32, {requests + 1}, Fill::kZero);
  int64_t total = 0;
  cu_seq_lens.set_i32({0}, 0);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t length = in.range(0, table_pages * cache.page_size);
    for (int64_t p = 0; p < table_pages; ++p) {
      int64_t page = cache.num_pages > 0 ? in.range(0, cache.num_pages - 1) : 0;
      const bool used = p * cache.page_size < length;
      if (in.chance(5)) page = in.pick<int64_t>({-1, cache.num_pages});
      if (used && (page < 0 || page >= cache.num_pages)) in.valid = false;
      block_table.set_i32({r, p}, static_cast<int32_t>(page));
    }
    total += length;
    cu_seq_lens.set_i32({r + 1}, static_cast<int32_t>(total));
  }
  const int64_t workspace_keys = std::max<int64_t>(total + in.range(-1, 2), 0);
  if (workspace_keys < total) in.valid = false;
  Tensor ws_values = make_tensor(in, mxfp4 ? DType::kE2M1x2 : DType::kE4M3,
                                 {workspace_keys, value_bytes}, Fill::kRawBytes);
  Tensor ws_scales =
      mxfp4 ? make_tensor(in, DType::kUE8M0, {workspace_keys, cache.head_dim / 32}, Fill::kRawBytes)
            : make_tensor(in, DType::kF32, {workspace_keys}, Fill::kRawBytes);
  pages.snapshot();
  block_table.snapshot();
  cu_seq_lens.snapshot();
  ws_values.snapshot();
  ws_scales.snapshot();
  op = "gather_k_workspace";
  status = gather_k_workspace(ws_values.view, ws_scales.view, cache, block_table.view,
                              cu_seq_lens.view, options);
  expect_unchanged(op, "cache", pages);
  expect_unchanged(op, "block_table", block_table);
  expect_unchanged(op, "cu_seq_lens", cu_seq_lens);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  expect_untouched_outside(op, "values", ws_values, total, value_bytes);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t begin = cu_seq_lens.get<int32_t>({r});
    const int64_t end = cu_seq_lens.get<int32_t>({r + 1});
    for (int64_t j = 0; j < end - begin; ++j) {
      const int64_t page = block_table.get<int32_t>({r, j / cache.page_size});
      const int64_t slot = page * cache.page_size + j % cache.page_size;
      const uint8_t* got_scale = ws_scales.memory.data() + (mxfp4 ? ws_scales.offset({begin + j, 0})
                                                                  : ws_scales.offset({begin + j}));
      if (std::memcmp(ws_values.memory.data() + ws_values.offset({begin + j, 0}),
                      pages.memory.data() + value_at(slot), value_bytes) != 0 ||
          std::memcmp(got_scale, pages.memory.data() + scale_at(slot), scale_bytes) != 0) {
        violation(op, "workspace key " + std::to_string(begin + j) + " is not cache slot " +
                          std::to_string(slot));
      }
    }
  }
}

void fuzz_dcp(FuzzInput& in) {
  DcpGroup group;
  group.ranks = static_cast<int>(in.range(1, 4));
  group.interleave = static_cast<int>(in.range(1, 3));
  const int64_t rows = in.range(0, 4);
  const int k = pick_k(in, 40, kMaxDcpTopK);
  const int safe_k = std::clamp(k, 1, kMaxDcpTopK);
  const DType dtype = in.chance(80) ? DType::kBF16 : DType::kF32;
  std::vector<int64_t> lengths(rows);
  int64_t width = 0;
  for (int64_t t = 0; t < rows; ++t) width = std::max(width, lengths[t] = in.range(0, 40));
  Tensor global = make_tensor(in, dtype, {rows, width}, Fill::kScores);
  if (!in.valid) return;  // the un-sharded answer needs a valid row set
  Tensor global_lengths = plain_tensor(DType::kI32, {rows});
  for (int64_t t = 0; t < rows; ++t) global_lengths.set_i32({t}, static_cast<int32_t>(lengths[t]));
  const bool three_d = in.chance(128);
  const int64_t block = rows * safe_k;
  Tensor gathered = plain_tensor(DType::kI64, {rows, group.ranks * int64_t{safe_k}});
  const TopKOptions local_sorted{in.chance(128)};
  const size_t element = dtype_size(dtype);
  for (int rank = 0; rank < group.ranks; ++rank) {
    int64_t local_width = 0;
    for (int64_t t = 0; t < rows; ++t)
      local_width = std::max(local_width, dcp_local_len(lengths[t], rank, group));
    Tensor local = plain_tensor(dtype, {rows, local_width});
    Tensor local_lengths = plain_tensor(DType::kI32, {rows});
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t n = dcp_local_len(lengths[t], rank, group);
      local_lengths.set_i32({t}, static_cast<int32_t>(n));
      for (int64_t l = 0; l < n; ++l) {
        std::memcpy(local.memory.data() + local.offset({t, l}),
                    global.memory.data() + global.offset({t, dcp_global(l, rank, group)}), element);
      }
    }
    Tensor local_topk = plain_tensor(DType::kI32, {rows, safe_k});
    if (!topk_per_row(local_topk.view, local.view, RowRanges::decode(local_lengths.view), safe_k,
                      local_sorted)
             .ok()) {
      violation("topk_per_row", "refused a local DCP selection");
    }
    // Rank r's block: columns [r k, (r + 1) k) of [rows, N k], or block r of [N, rows, k].
    TensorView candidates = gathered.view;
    candidates.shape[1] = safe_k;
    if (three_d) {
      candidates.stride[0] = safe_k;
      candidates.data = gathered.view.ptr<int64_t>() + rank * block;
    } else {
      candidates.data = gathered.view.ptr<int64_t>() + rank * int64_t{safe_k};
    }
    if (rows == 0) candidates.data = gathered.view.data;
    const Status packed = dcp_pack_candidates(candidates, local.view, local_topk.view, TensorView{},
                                              safe_k, rank, group);
    if (!packed.ok()) violation("dcp_pack_candidates", "refused a valid call: " + packed.message());
  }
  TensorView merged_input = gathered.view;
  if (three_d) {
    merged_input.rank = 3;
    merged_input.shape = {rows, group.ranks, safe_k, 0};
    merged_input.stride = {safe_k, block, 1, 0};
  }
  const int ranks = in.chance(8) ? group.ranks + 1 : group.ranks;
  if (ranks != group.ranks) in.valid = false;
  Tensor out = make_tensor(in, DType::kI32, {rows, safe_k + in.range(0, 2)}, Fill::kRawBytes);
  const TopKOptions topk_options{in.chance(128)};
  std::vector<uint8_t> workspace;
  const RunOptions options = make_run_options(in, workspace, [&](int threads) {
    return dcp_merge_topk_cpu_workspace_size(ranks, k, threads);
  });
  gathered.snapshot();
  out.snapshot();
  const Status status = dcp_merge_topk(out.view, merged_input, k, ranks, topk_options, options);
  expect_unchanged("dcp_merge_topk", "gathered", gathered);
  if (in.valid && !status.ok())
    violation("dcp_merge_topk", "refused a valid call: " + status.message());
  if (status.ok() && in.valid) {
    expect_topk("dcp_merge_topk", out, global.view, RowRanges::decode(global_lengths.view), k,
                topk_options.sorted);
  }
}

void fuzz_row_shard(FuzzInput& in) {
  in.extents_bounded = true;
  const int64_t rows = in.range(0, 12);
  int tp = static_cast<int>(in.range(1, 5));
  if (in.chance(6)) {
    tp = in.pick({0, -1});
    in.valid = false;
  }
  Tensor costs = make_tensor(in, in.chance(128) ? DType::kI64 : DType::kI32, {rows}, Fill::kZero);
  std::vector<int64_t> cost(rows);
  for (int64_t i = 0; i < rows; ++i) {
    cost[i] = in.range(0, 100);
    if (in.chance(4)) {
      cost[i] = in.pick<int64_t>({-1, INT32_MAX, int64_t{1} << 61});
      if (cost[i] < 0 || (costs.view.dtype == DType::kI64 &&
                          cost[i] > (int64_t{1} << 62) / std::max<int64_t>(rows, 1)))
        in.valid = false;
      if (costs.view.dtype == DType::kI32) cost[i] = static_cast<int32_t>(cost[i]);
    }
    if (cost[i] < 0) in.valid = false;
    costs.set_i64({i}, cost[i]);
  }
  Tensor sizes = make_tensor(in, DType::kI32, {std::max(tp, 0)}, Fill::kRawBytes);
  costs.snapshot();
  const char* op = "tp_row_shard_plan";
  const Status status = tp_row_shard_plan(sizes.view, costs.view, tp);
  expect_unchanged(op, "costs", costs);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  std::vector<int64_t> size(tp);
  int64_t sum = 0;
  for (int j = 0; j < tp; ++j) sum += size[j] = sizes.get<int32_t>({j});
  if (sum != rows)
    violation(op, "sizes sum to " + std::to_string(sum) + ", not " + std::to_string(rows));
  for (int j = 0; j < tp; ++j) {
    const int64_t want_min = rows >= tp ? 1 : (j < rows ? 1 : 0);
    if (size[j] < want_min || (rows < tp && size[j] != want_min)) {
      violation(op, "rank " + std::to_string(j) + " gets " + std::to_string(size[j]) + " rows");
    }
  }
  // The best largest window over contiguous splits with the same non-empty-window rule.
  const int64_t parts = std::min<int64_t>(tp, rows);
  if (parts > 0) {
    const int64_t inf = std::numeric_limits<int64_t>::max();
    std::vector<std::vector<int64_t>> best(parts + 1, std::vector<int64_t>(rows + 1, inf));
    best[0][0] = 0;
    for (int64_t j = 1; j <= parts; ++j) {
      for (int64_t i = j; i <= rows; ++i) {
        int64_t window = 0;
        for (int64_t start = i - 1; start >= j - 1; --start) {
          window += cost[start];
          if (best[j - 1][start] != inf)
            best[j][i] = std::min(best[j][i], std::max(best[j - 1][start], window));
        }
      }
    }
    int64_t largest = 0, row = 0;
    for (int j = 0; j < tp; ++j) {
      int64_t window = 0;
      for (int64_t i = 0; i < size[j]; ++i) window += cost[row++];
      largest = std::max(largest, window);
    }
    if (largest != best[parts][rows]) {
      violation(op, "largest window costs " + std::to_string(largest) + ", the best split " +
                        std::to_string(best[parts][rows]));
    }
  }

  // tp_row_shard_narrow of one rank over a chunk
  const int rank = static_cast<int>(in.range(0, tp - 1));
  const int64_t first = in.range(0, 3);
  const int64_t chunk_start = in.range(0, rows + 3);
  const int64_t chunk_rows = in.range(0, 6);
  Tensor chunk_ks = make_tensor(in, DType::kI32, {chunk_rows}, Fill::kRawBytes);
  Tensor chunk_ke = make_tensor(in, DType::kI32, {chunk_rows}, Fill::kRawBytes);
  TpRowWindow window;
  op = "tp_row_shard_narrow";
  const Status narrowed = tp_row_shard_narrow(&window, sizes.view, rank, first, chunk_start,
                                              chunk_ks.view, chunk_ke.view);
  if (in.valid && !narrowed.ok()) violation(op, "refused a valid call: " + narrowed.message());
  if (!narrowed.ok() || !in.valid) return;
  int64_t owned = first;
  for (int j = 0; j < rank; ++j) owned += size[j];
  const int64_t start = std::max(owned, chunk_start);
  const int64_t end = std::min(owned + size[rank], chunk_start + chunk_rows);
  if (start < end) {
    if (window.start != start || window.end != end || window.ks.shape[0] != end - start ||
        window.ks.data != chunk_ks.view.ptr<int32_t>() + (start - chunk_start) ||
        window.ke.data != chunk_ke.view.ptr<int32_t>() + (start - chunk_start)) {
      violation(op, "window [" + std::to_string(window.start) + ", " + std::to_string(window.end) +
                        "), expected [" + std::to_string(start) + ", " + std::to_string(end) + ")");
    }
  } else if (!window.empty()) {
    violation(op, "a rank with no row of the chunk gets a non-empty window");
  }
}

}  // namespace flashindexer::fuzz
