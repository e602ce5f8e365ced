// SPDX-License-Identifier: Apache-2.0
// TP prefill row sharding: a contiguous split of the prefill rows into tp windows whose largest
// cost is the smallest any contiguous split achieves (the classic linear-partition bottleneck,
// found by binary search over the bottleneck with a greedy feasibility test on prefix sums).
//
// Cost: O(rows + log(total cost) * tp * log(rows)) for the bottleneck, then O(tp^2 log^2 rows)
// to place the cuts; rows are a few thousand and tp <= 64 in practice, so this is microseconds.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/cpu_ops.h"

namespace flashindexer::cpu {
namespace {

// prefix[i] = cost of rows [0, i). Rows [begin, n) split greedily into windows of cost <= limit
// (each window as long as possible); returns the number of windows, or a number > max_windows
// as soon as it is clear more are needed. Needs every single row cost <= limit.
int64_t greedy_windows(const std::vector<int64_t>& prefix, int64_t begin, int64_t limit,
                       int64_t max_windows) {
  const int64_t n = static_cast<int64_t>(prefix.size()) - 1;
  int64_t windows = 0;
  while (begin < n && windows <= max_windows) {
    // The last end with prefix[end] - prefix[begin] <= limit.
    const auto last =
        std::upper_bound(prefix.begin() + begin + 1, prefix.end(), prefix[begin] + limit);
    begin = (last - prefix.begin()) - 1;
    ++windows;
  }
  return begin < n ? max_windows + 1 : windows;
}

}  // namespace

void tp_row_shard_plan(int32_t* sizes, const int64_t* costs, int64_t rows, int tp) {
  if (rows <= tp) {
    for (int j = 0; j < tp; ++j) sizes[j] = j < rows ? 1 : 0;
    return;
  }
  std::vector<int64_t> prefix(static_cast<size_t>(rows) + 1, 0);
  int64_t largest_row = 0;
  for (int64_t i = 0; i < rows; ++i) {
    prefix[i + 1] = prefix[i] + costs[i];
    largest_row = std::max(largest_row, costs[i]);
  }
  const int64_t total = prefix[rows];

  // The smallest bottleneck B for which rows split into <= tp windows of cost <= B. Any split
  // into fewer windows can be refined into exactly tp non-empty ones (rows > tp) without raising
  // the maximum, so B is also the optimum under "every rank >= 1 row".
  int64_t low = std::max(largest_row, (total + tp - 1) / tp);
  int64_t high = std::max(low, total);
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (greedy_windows(prefix, 0, mid, tp) <= tp) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  const int64_t bottleneck = low;

  // Place the cuts left to right. Window j aims at the prefix-sum target that shares the
  // remaining cost equally among the remaining windows (so the light windows are not all pushed
  // to the end), then is moved right only as far as needed to keep the rest feasible under the
  // bottleneck, and never takes rows the remaining windows need (>= 1 row each).
  int64_t begin = 0;
  for (int j = 0; j < tp; ++j) {
    const int64_t remaining_windows = tp - j - 1;
    if (remaining_windows == 0) {
      sizes[j] = static_cast<int32_t>(rows - begin);
      break;
    }
    const int64_t max_end_by_rows = rows - remaining_windows;
    const int64_t max_end_by_cost =
        (std::upper_bound(prefix.begin() + begin + 1, prefix.end(), prefix[begin] + bottleneck) -
         prefix.begin()) -
        1;
    const int64_t max_end = std::min(max_end_by_rows, max_end_by_cost);
    const int64_t target = prefix[begin] + (total - prefix[begin]) / (remaining_windows + 1);
    // The end whose prefix is nearest the target (ties: the shorter window).
    int64_t end =
        std::lower_bound(prefix.begin() + begin + 1, prefix.end(), target) - prefix.begin();
    if (end > begin + 1 && end <= rows && target - prefix[end - 1] <= prefix[end] - target) --end;
    end = std::clamp(end, begin + 1, max_end);
    // Feasibility of the rest grows with `end`: the smallest feasible end in [end, max_end]
    // (max_end is feasible: it is where the bottleneck's greedy split would cut, or later).
    if (greedy_windows(prefix, end, bottleneck, remaining_windows) > remaining_windows) {
      int64_t lo = end + 1;
      int64_t hi = max_end;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (greedy_windows(prefix, mid, bottleneck, remaining_windows) <= remaining_windows) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      end = hi;
    }
    sizes[j] = static_cast<int32_t>(end - begin);
    begin = end;
  }
}

}  // namespace flashindexer::cpu
