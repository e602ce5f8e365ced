// SPDX-License-Identifier: Apache-2.0
#include "cli/workload.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <random>

namespace flashindexer::cli {
namespace {

// Shapes shared by the three model presets, requests as {context_len, query_rows,
// repeated_prompt_len}. Context lengths are not multiples of the page size (partial last
// pages), one decode request is shorter than k = 2048 (-1 padding), and one request per batch
// repeats a prompt (ties). Scoring work at H = 64 is 711,770 visible pairs, 11.7 GFLOP: a
// plain CPU backend on two cores finishes it in seconds.
std::vector<BatchShape> model_batches() {
  return {
      {.name = "prefill", .requests = {{3971, 32, 0}, {6013, 32, 3000}, {8957, 32, 0}}},
      {.name = "decode next_n=1",
       .decode = true,
       .next_n = 1,
       .requests = {{3001, 1, 0},
                    {4507, 1, 0},
                    {1337, 1, 0},
                    {6029, 1, 0},
                    {7541, 1, 2600},
                    {9001, 1, 0},
                    {10499, 1, 0},
                    {11987, 1, 0}}},
      {.name = "decode next_n=2",
       .decode = true,
       .next_n = 2,
       .per_token_lens = true,
       .requests = {{3499, 2, 0}, {7003, 2, 2600}, {11003, 2, 0}, {5119, 2, 0}}},
  };
}

// A few hundred keys per request (one shorter than k = 64): the whole run, verification
// included, takes well under a second.
std::vector<BatchShape> small_batches() {
  return {
      {.name = "prefill", .requests = {{203, 8, 0}, {331, 8, 120}, {457, 12, 0}}},
      {.name = "decode next_n=1",
       .decode = true,
       .next_n = 1,
       .requests = {{41, 1, 0}, {150, 1, 0}, {222, 1, 0}, {287, 1, 100}, {350, 1, 0}, {413, 1, 0}}},
      {.name = "decode next_n=2",
       .decode = true,
       .next_n = 2,
       .per_token_lens = true,
       .requests = {{190, 2, 0}, {300, 2, 100}, {480, 2, 0}}},
  };
}

// The structure of the scores. Key and query elements carry N(0, 1) noise, so a plain
// q . k has a standard deviation of sqrt(D) ~ 11.3; the components below are sized against it.
// Query heads with a positive weight carry +shared_direction and the local-window features,
// heads with a negative weight carry their opposite: keys along those directions then raise
// the logit of every row (the ReLU silences the negative heads), as trained indexers do.
constexpr int kSinkKeys = 4;                  // attention sinks at the start of each request
constexpr int kNeedlesPerRequest = 4;         // keys copying one query head of the request
constexpr double kRequestMeanNorm = 4.0;      // per-request mean key: a common offset per row
constexpr double kSharedQueryAlign = 3.0;     // query component along the shared direction
constexpr double kSinkNorm = 30.0;            // sink component along it: q . k ~ 90, far above
constexpr double kNeedleNorm = 12.0;          // needle = 12 * unit(q head): q . k ~ 12 |q| ~ 140
constexpr double kRepeatedPromptAlign = 8.0;  // above the noise, below sinks and the window
// Local window, RoPE-like: cos/sin of the position at kPositionFrequencies periods spaced
// geometrically from 8 to 4096 in dims [0, 32). The positional part of q . k is then
// amplitude^2 * sum_i cos(2 pi (p - s) / period_i): 36 at s = p, decaying over a few dozen
// positions to a background of standard deviation ~6 (the periods decorrelate).
constexpr size_t kPositionFrequencies = 16;
constexpr double kShortestPeriod = 8.0;
constexpr double kPeriodOctaves = 9.0;  // longest period 8 * 2^9 = 4096
constexpr double kPositionAmplitude = 1.5;

using Vector = std::array<double, kHeadDim>;

// Uniform, normal and integer draws of our own on std::mt19937_64: the engine's output is
// fixed by the standard, std::normal_distribution and std::shuffle are not.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n); the modulo bias is below n / 2^64.
  int64_t below(int64_t n) { return static_cast<int64_t>(engine_() % static_cast<uint64_t>(n)); }

  // Box-Muller: one pair of uniforms gives two independent N(0, 1) draws.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));  // 1 - u in (0, 1]
    const double angle = 2.0 * std::numbers::pi * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

  Vector normal_vector() {
    Vector v;
    for (double& x : v) x = normal();
    return v;
  }

  Vector unit_vector() {
    Vector v = normal_vector();
    double norm = 0.0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    for (double& x : v) x /= norm;
    return v;
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

void add_scaled(Vector& into, const Vector& v, double scale) {
  for (int d = 0; d < kHeadDim; ++d) into[d] += scale * v[d];
}

void add_position_features(Vector& into, int64_t position, double amplitude) {
  for (size_t i = 0; i < kPositionFrequencies; ++i) {
    const double period = kShortestPeriod * std::exp2(kPeriodOctaves * static_cast<double>(i) /
                                                      (kPositionFrequencies - 1));
    const double angle = 2.0 * std::numbers::pi * static_cast<double>(position) / period;
    into[2 * i] += amplitude * std::cos(angle);
    into[2 * i + 1] += amplitude * std::sin(angle);
  }
}

void append(std::vector<float>& out, const Vector& v) {
  for (double x : v) out.push_back(static_cast<float>(x));
}

double norm_of(const Vector& v) {
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

// Appends one request's query rows (its last `query_rows` positions, their f32 queries and raw
// head weights) to `batch` and its keys to `keys`.
void draw_request(std::vector<float>& keys, Batch& batch, Rng& rng, const RequestShape& request,
                  int request_index, int heads, const Vector& shared_direction) {
  const int64_t context = request.context_len;
  const int64_t first_query = context - request.query_rows;
  const Vector mean_key = [&] {
    Vector v = rng.unit_vector();
    for (double& x : v) x *= kRequestMeanNorm;
    return v;
  }();

  // Queries: heads keep their fp32 vectors for the needles below.
  std::vector<std::vector<Vector>> query_heads(request.query_rows, std::vector<Vector>(heads));
  std::vector<std::vector<double>> head_weights(request.query_rows, std::vector<double>(heads));
  for (int i = 0; i < request.query_rows; ++i) {
    const int64_t position = first_query + i;
    batch.rows.push_back({request_index, position, 0, position + 1});
    for (int h = 0; h < heads; ++h) {
      const double w = rng.normal();
      const double sign = w >= 0.0 ? 1.0 : -1.0;
      Vector q = rng.normal_vector();
      add_scaled(q, shared_direction, sign * kSharedQueryAlign);
      add_position_features(q, position, sign * kPositionAmplitude);
      head_weights[i][h] = w;
      query_heads[i][h] = q;
      append(batch.q, q);
      batch.weights.push_back(static_cast<float>(w));
    }
  }

  // Keys: mean + noise + position; sinks first; a repeated prompt from a quarter of the way in.
  const int64_t repeat_begin = context / 4;
  const int64_t repeat_end = repeat_begin + request.repeated_prompt_len;
  Vector repeated_key = mean_key;
  add_scaled(repeated_key, rng.normal_vector(), 1.0);
  add_scaled(repeated_key, shared_direction, kRepeatedPromptAlign);
  std::vector<Vector> request_keys(context);
  for (int64_t s = 0; s < context; ++s) {
    if (s >= repeat_begin && s < repeat_end) {
      request_keys[s] = repeated_key;
      continue;
    }
    Vector k = mean_key;
    add_scaled(k, rng.normal_vector(), 1.0);
    add_position_features(k, s, kPositionAmplitude);
    if (s < kSinkKeys) add_scaled(k, shared_direction, kSinkNorm);
    request_keys[s] = k;
  }

  // Needles: outside the sinks and the repeated prompt (the presets leave room for them),
  // visible to every row of the request, each a scaled copy of the highest-weighted head of
  // one of its query rows.
  for (int n = 0; n < kNeedlesPerRequest; ++n) {
    int64_t position;
    do {
      position = kSinkKeys + rng.below(first_query - kSinkKeys);
    } while (position >= repeat_begin && position < repeat_end);
    const int row = static_cast<int>(rng.below(request.query_rows));
    const auto& weights = head_weights[row];
    const int head =
        static_cast<int>(std::max_element(weights.begin(), weights.end()) - weights.begin());
    const Vector& q = query_heads[row][head];
    Vector needle{};
    add_scaled(needle, q, kNeedleNorm / norm_of(q));
    request_keys[position] = needle;
  }
  for (const Vector& k : request_keys) append(keys, k);
}

int64_t pages_for(int64_t keys) { return (keys + kPageSize - 1) / kPageSize; }

// Gives every request its pages from a shuffled pool with spare pages, so that page ids are
// neither contiguous nor dense, and fills block tables and the slot mapping.
void assign_pages(Workload& workload, Rng& rng) {
  int64_t pages_needed = 0;
  for (const Batch& batch : workload.batches) {
    for (const RequestShape& request : batch.shape->requests) {
      pages_needed += pages_for(request.context_len);
    }
  }
  workload.num_pages = pages_needed + pages_needed / 8 + 1;
  std::vector<int32_t> pool(workload.num_pages);
  for (int64_t i = 0; i < workload.num_pages; ++i) pool[i] = static_cast<int32_t>(i);
  for (int64_t i = workload.num_pages - 1; i > 0; --i) std::swap(pool[i], pool[rng.below(i + 1)]);

  int64_t next_page = 0;
  for (Batch& batch : workload.batches) {
    const auto& requests = batch.shape->requests;
    batch.block_table_width = 0;
    for (const RequestShape& request : requests) {
      batch.block_table_width = std::max(batch.block_table_width, pages_for(request.context_len));
    }
    batch.block_table.assign(requests.size() * batch.block_table_width, 0);
    for (size_t r = 0; r < requests.size(); ++r) {
      int32_t* table_row = batch.block_table.data() + r * batch.block_table_width;
      for (int64_t j = 0; j < requests[r].context_len; ++j) {
        if (j % kPageSize == 0) table_row[j / kPageSize] = pool[next_page++];
        workload.slot_mapping.push_back(static_cast<int64_t>(table_row[j / kPageSize]) * kPageSize +
                                        j % kPageSize);
      }
    }
  }
}

// The fewest keys any of the rows sees (0 for no rows).
int64_t fewest_keys(const std::vector<QueryRow>& rows) {
  int64_t fewest = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t sees = rows[r].key_end - rows[r].key_begin;
    fewest = r == 0 ? sees : std::min(fewest, sees);
  }
  return fewest;
}

// Row ranges in the op's column space: workspace offsets for prefill, context positions for
// decode (spec §6.3 with R = 1, §7.1).
void fill_row_ranges(Batch& batch) {
  const auto& requests = batch.shape->requests;
  batch.visible_pairs = 0;
  if (!batch.shape->decode) {
    batch.cu_seq_lens.assign(1, 0);
    for (const RequestShape& request : requests) {
      batch.cu_seq_lens.push_back(batch.cu_seq_lens.back() + request.context_len);
    }
    for (QueryRow& row : batch.rows) {
      row.key_begin = batch.cu_seq_lens[row.request];
      row.key_end = row.key_begin + row.position + 1;
      batch.ks.push_back(static_cast<int32_t>(row.key_begin));
      batch.ke.push_back(static_cast<int32_t>(row.key_end));
      batch.visible_pairs += row.key_end - row.key_begin;
    }
    batch.logits_width = batch.cu_seq_lens.back();
    batch.fewest_row_keys = fewest_keys(batch.rows);
    return;
  }
  for (const RequestShape& request : requests) {
    if (!batch.shape->per_token_lens) batch.context_lens.push_back(request.context_len);
  }
  batch.logits_width = 0;
  for (const QueryRow& row : batch.rows) {
    if (batch.shape->per_token_lens)
      batch.context_lens.push_back(static_cast<int32_t>(row.key_end));
    batch.visible_pairs += row.key_end;
    batch.logits_width = std::max(batch.logits_width, row.key_end);
  }
  batch.fewest_row_keys = fewest_keys(batch.rows);
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"v32", "DeepSeek-V3.2", 64, 2048, 1e-10f, model_batches()},
      {"v4flash", "DeepSeek-V4-Flash", 64, 512, 1e-4f, model_batches()},
      {"glm5", "GLM-5", 32, 2048, 1e-10f, model_batches()},
      {"small", "a few hundred keys per request", 32, 64, 1e-10f, small_batches()},
      // V4.1-Flash's C = 2048 blocks of 8 cover every block of these rows (the restriction only
      // bites past 16,384 keys): v41small keeps C below the rows' block counts so it does.
      {"v41flash", "DeepSeek-V4.1-Flash, candidate source + consumer", 32, 512, 1e-4f,
       model_batches(), 2048, 8},
      {"v41small", "DeepSeek-V4.1 two-level selection, a few hundred keys per request", 32, 64,
       1e-4f, small_batches(), 12, 8},
  };
  return all;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& preset : presets()) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

Status make_workload(Workload* workload, const Preset& preset, uint64_t seed, KFormat format) {
  Rng rng(seed);
  workload->preset = &preset;
  workload->seed = seed;
  workload->format = format;
  // Pages rounded up to a multiple of 512 bytes (8448 -> 8704), as pooled allocations are:
  // kernels must use the given stride, not the 132 * page_size bytes a page needs.
  const int64_t page_bytes = int64_t{kPageSize} * (kHeadDim + 4);
  workload->page_stride_bytes = (page_bytes + 511) / 512 * 512;

  const Vector shared_direction = rng.unit_vector();
  for (const BatchShape& shape : preset.batches) {
    Batch batch;
    batch.shape = &shape;
    for (size_t r = 0; r < shape.requests.size(); ++r) {
      draw_request(workload->keys, batch, rng, shape.requests[r], static_cast<int>(r), preset.heads,
                   shared_direction);
    }
    fill_row_ranges(batch);
    workload->batches.push_back(std::move(batch));
  }
  assign_pages(*workload, rng);
  return Status::Ok();
}

}  // namespace flashindexer::cli
