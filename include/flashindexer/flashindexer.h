// SPDX-License-Identifier: Apache-2.0
// FlashIndexer: the sparse-attention indexer of DeepSeek Sparse Attention models.
#pragma once

#include "flashindexer/candidates.h"
#include "flashindexer/dist.h"
#include "flashindexer/formats.h"
#include "flashindexer/indexer.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/planning.h"
#include "flashindexer/quantize.h"
#include "flashindexer/query.h"
#include "flashindexer/rope.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"
#include "flashindexer/version.h"
