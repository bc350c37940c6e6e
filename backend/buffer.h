#ifndef TESSERA_BACKEND_BUFFER_H_
#define TESSERA_BACKEND_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace tessera {

class Buffer;
class Device;

enum class BufferUsage { kAny, kWeights, kCompute };

// A tensor and the byte offset its buffer will give it.
struct TensorPlacement {
  const Tensor* tensor;
  size_t offset;
};

// An allocator of one kind of memory (ggml_backend_buffer_type).
// Thread-safe.
class BufferType {
 public:
  virtual ~BufferType() = default;

  virtual std::string_view name() const = 0;
  // The device whose memory this is.
  virtual Device& device() = 0;
  // A new buffer of at least `size` bytes (size 0 gives a valid empty
  // buffer). Errors: RESOURCE_EXHAUSTED when the memory is not there or
  // `size` exceeds max_size(); never aborts.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) = 0;
  // A buffer of `size` bytes for weights that will lie at `placements`
  // (AllocTensors with BufferUsage::kWeights) and nowhere else. By default
  // Alloc(size); a type whose buffers can hold such tensors in less memory
  // (a meta device's: each member keeps only its slices) overrides it.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocPlaced(
      size_t size, absl::Span<const TensorPlacement> placements) {
    return Alloc(size);
  }
  // Alignment of tensor data placed by allocators, a power of two.
  virtual size_t alignment() const = 0;
  virtual size_t max_size() const = 0;
  // Bytes a tensor needs in a buffer of this type (padding included).
  virtual size_t AllocSize(const Tensor& t) const { return t.NumBytes(); }
  // Whether buffer memory is host memory that the CPU may read and write
  // directly through `data` pointers.
  virtual bool is_host() const = 0;
};

// A block of memory of one BufferType. Byte-range and tensor operations are
// bounds-checked: a range outside the buffer, or outside the tensor, or a
// tensor that is not in this buffer is INVALID_ARGUMENT. Synchronous:
// returns once the data is in place. Thread-compatible: callers serialize
// writes to overlapping ranges.
class Buffer {
 public:
  Buffer(BufferType& type, size_t size) : type_(type), size_(size) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  BufferType& type() const { return type_; }
  size_t size() const { return size_; }
  BufferUsage usage() const { return usage_; }
  void set_usage(BufferUsage usage) { usage_ = usage; }
  // Address of byte 0: host memory for host buffers, otherwise an address
  // meaningful only to the device. Tensors in this buffer have data in
  // [base, base + size).
  virtual void* base() = 0;

  // Byte ranges relative to the start of the buffer.
  absl::Status Write(size_t offset, const void* data, size_t size);
  absl::Status Read(size_t offset, void* data, size_t size);
  absl::Status Memset(size_t offset, uint8_t value, size_t size);
  absl::Status Clear(uint8_t value) { return Memset(0, value, size_); }

  // Byte ranges relative to the start of a tensor's data.
  absl::Status SetTensor(Tensor& t, const void* data, size_t offset,
                         size_t size);
  absl::Status GetTensor(const Tensor& t, void* data, size_t offset,
                         size_t size);
  absl::Status MemsetTensor(Tensor& t, uint8_t value, size_t offset,
                            size_t size);

  // Byte offset of `t`'s data in this buffer, or INVALID_ARGUMENT if `t`
  // does not lie wholly inside it.
  absl::StatusOr<size_t> OffsetOf(const Tensor& t);

  // Copies `src` (same byte size, any buffer) into `dst` (in this buffer)
  // without going through the caller. Returns false when this buffer cannot
  // reach `src`'s memory directly; the caller then stages through host
  // memory.
  virtual absl::StatusOr<bool> CopyFrom(const Tensor& src, Tensor& dst);

 protected:
  // Unchecked transfers; the public wrappers have validated the range.
  virtual absl::Status DoWrite(size_t offset, const void* data,
                               size_t size) = 0;
  virtual absl::Status DoRead(size_t offset, void* data, size_t size) = 0;
  virtual absl::Status DoMemset(size_t offset, uint8_t value, size_t size) = 0;
  // Unchecked tensor transfers, called by SetTensor, GetTensor and
  // MemsetTensor once `t` is known to lie in this buffer at byte
  // `base_offset` and [offset, offset + size) inside its data. The defaults
  // move the byte range at base_offset + offset; a buffer whose tensors are
  // not plain bytes at their offset (a meta buffer, whose tensors are
  // sliced over member devices) overrides them.
  virtual absl::Status DoSetTensor(Tensor& t, size_t base_offset,
                                   const void* data, size_t offset,
                                   size_t size);
  virtual absl::Status DoGetTensor(const Tensor& t, size_t base_offset,
                                   void* data, size_t offset, size_t size);
  virtual absl::Status DoMemsetTensor(Tensor& t, size_t base_offset,
                                      uint8_t value, size_t offset,
                                      size_t size);

 private:
  BufferType& type_;
  const size_t size_;
  BufferUsage usage_ = BufferUsage::kAny;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_BUFFER_H_
