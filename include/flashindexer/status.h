// SPDX-License-Identifier: Apache-2.0
// Status: how every FlashIndexer op reports success or failure.
//
// Ops never throw across the public API. A failed op returns a Status whose message names
// the op, the argument, the value received and the value expected, for example
//   "topk_per_row: k=5000 exceeds the maximum 4096".
#pragma once

#include <string>
#include <utility>

namespace flashindexer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // wrong dtype, shape, stride, bounds, or an out-of-range value
  kUnsupported,        // valid request that this build or device cannot serve
  kWorkspaceTooSmall,  // caller-provided workspace is smaller than *_workspace_size()
  kDeviceError,        // a CUDA runtime call failed
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status Unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }
  static Status WorkspaceTooSmall(std::string message) {
    return Status(StatusCode::kWorkspaceTooSmall, std::move(message));
  }
  static Status DeviceError(std::string message) {
    return Status(StatusCode::kDeviceError, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);

}  // namespace flashindexer
