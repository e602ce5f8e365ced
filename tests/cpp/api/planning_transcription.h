// SPDX-License-Identifier: Apache-2.0
// Direct transcriptions of the planning rules of the specification, written as plainly as the
// text states them (no shortcuts, 128-bit products), for the planning tests to compare against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace fitest::transcription {

struct Chunk {
  int64_t start, end, q_begin, q_end, n_real;
  bool operator==(const Chunk&) const = default;
};

// split_indexer_prefill_chunks, with the V4.1 clamp applied to the lengths the loop sees and
// groups whose real key total is 0 dropped.
inline std::vector<Chunk> split_prefill_chunks(const std::vector<int64_t>& real_n,
                                               const std::vector<int64_t>& query_m,
                                               int64_t workspace_size, int64_t max_logits_bytes,
                                               int64_t min_split_seq_len) {
  std::vector<int64_t> N = real_n;
  for (int64_t& n_r : N) n_r = std::max(n_r, min_split_seq_len);
  const std::vector<int64_t>& M = query_m;
  const int64_t n_req = static_cast<int64_t>(N.size());
  const __int128 max_logits_elems = max_logits_bytes / 4;
  std::vector<Chunk> out;
  int64_t end = 0;
  while (end < n_req) {
    const int64_t start = end;
    int64_t m = 0, n = 0;
    while (end < n_req && (n + N[end]) <= workspace_size &&
           static_cast<__int128>(m + M[end]) * (n + N[end]) <= max_logits_elems) {
      m += M[end];
      n += N[end];
      end += 1;
    }
    if (end == start) {
      m = M[start];
      n = N[start];
      end += 1;
    }
    int64_t n_real = 0;
    for (int64_t r = start; r < end; ++r) n_real += real_n[r];
    const int64_t max_q = n > 0 ? std::max<int64_t>(1, static_cast<int64_t>(max_logits_elems / n))
                                : std::max<int64_t>(1, m);
    if (n_real == 0) continue;
    for (int64_t q_off = 0; q_off < m; q_off += max_q) {
      out.push_back({start, end, q_off, std::min(q_off + max_q, m), n_real});
    }
  }
  return out;
}

// ks/ke of every row of a chunk's query rows [q_begin, q_end) and token_to_seq of its (local)
// workspace, per specification section 6.3 with the DCP localization of section 9.1.
struct Bounds {
  std::vector<int32_t> ks, ke, token_to_seq;
};

inline int64_t local_len(int64_t L, int64_t r, int64_t N, int64_t I) {
  const int64_t base = (L / I / N) * I;
  return base + std::clamp<int64_t>(L - base * N - r * I, 0, I);
}

inline Bounds row_bounds(const std::vector<int64_t>& S, const std::vector<int64_t>& M,
                         int64_t start, int64_t end, int64_t q_begin, int64_t q_end, int64_t R,
                         int64_t ranks, int64_t interleave, int64_t rank) {
  Bounds b;
  std::vector<int64_t> cu = {0};
  for (int64_t r = start; r < end; ++r) {
    const int64_t local = local_len(S[r] / R, rank, ranks, interleave);
    for (int64_t s = 0; s < local; ++s) b.token_to_seq.push_back(static_cast<int32_t>(r - start));
    cu.push_back(cu.back() + local);
  }
  int64_t row = 0;  // the group's query row
  for (int64_t r = start; r < end; ++r) {
    for (int64_t i = 0; i < M[r]; ++i, ++row) {
      if (row < q_begin || row >= q_end) continue;
      const int64_t p = S[r] - M[r] + i;
      b.ks.push_back(static_cast<int32_t>(cu[r - start]));
      b.ke.push_back(
          static_cast<int32_t>(cu[r - start] + local_len((p + 1) / R, rank, ranks, interleave)));
    }
  }
  return b;
}

// _decode_chunk_ranges of specification section 7.5 (valid budgets only).
inline std::vector<std::pair<int64_t, int64_t>> decode_chunk_ranges(int64_t R, int64_t W,
                                                                    int64_t B) {
  if (R == 0 || B == 0 || R * W * 2 <= B) return {{0, R}};
  const int64_t limit = (B / (2 * W)) / 16 * 16;
  const int64_t units = (R + 15) / 16;
  const int64_t count = (units + limit / 16 - 1) / (limit / 16);
  const int64_t base = units / count, extra = units % count;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t start = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t end = std::min(R, start + 16 * (base + (i < extra ? 1 : 0)));
    ranges.emplace_back(start, end);
    start = end;
  }
  return ranges;
}

}  // namespace fitest::transcription
