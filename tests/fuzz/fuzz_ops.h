// SPDX-License-Identifier: Apache-2.0
// The op families the fuzzer drives; each reads its arguments from the input and checks the
// contract of every call it makes (fuzz_input.h).
#pragma once

#include "fuzz_input.h"

namespace flashindexer::fuzz {

void fuzz_topk(FuzzInput& in);
void fuzz_prefill(FuzzInput& in);  // mqa_logits and indexer_prefill
void fuzz_decode(FuzzInput& in);   // paged_mqa_logits and indexer_decode
void fuzz_quantize(FuzzInput& in);
void fuzz_kcache(FuzzInput& in);  // insert_k_cache, then gather_k_workspace
void fuzz_dcp(FuzzInput& in);     // dcp_pack_candidates on every rank, then dcp_merge_topk
void fuzz_row_shard(FuzzInput& in);

// k: mostly in [1, limit + 1], sometimes at or beyond the bounds [1, max_k].
int pick_k(FuzzInput& in, int64_t limit, int max_k);

}  // namespace flashindexer::fuzz
