// SPDX-License-Identifier: Apache-2.0
#include "flashindexer/formats.h"
#include "flashindexer/kcache.h"

namespace flashindexer {

const char* kformat_name(KFormat format) { return format == KFormat::kFP8 ? "fp8" : "mxfp4"; }

int64_t PagedKCache::bytes_per_key(KFormat format, int head_dim) {
  return format == KFormat::kFP8 ? head_dim + 4 : head_dim / 2 + head_dim / kMxfp4BlockSize;
}

int64_t PagedKCache::page_bytes(KFormat format, int page_size, int head_dim) {
  return static_cast<int64_t>(page_size) * bytes_per_key(format, head_dim);
}

int64_t PagedKCache::value_bytes_per_key() const {
  return format == KFormat::kFP8 ? head_dim : head_dim / 2;
}

int64_t PagedKCache::scale_bytes_per_key() const {
  return format == KFormat::kFP8 ? 4 : head_dim / kMxfp4BlockSize;
}

}  // namespace flashindexer
