#ifndef TESSERA_BACKEND_META_META_DEVICE_H_
#define TESSERA_BACKEND_META_META_DEVICE_H_

// The tensor-parallel meta device: a Device made of N member devices of any
// kind, seen through the device API only.
//
//   - Its buffer type allocates one buffer per member, each as large as the
//     meta buffer; a tensor at byte offset o of a meta buffer has, on member
//     i, its member tensor (its slice, contiguous) at byte offset o of member
//     buffer i. Memory per member is the meta size (pages a member never
//     touches are not committed on hosts).
//   - Weights (AllocTensors with BufferUsage::kWeights, through
//     AllocPlaced) are packed instead: each member buffer holds only its
//     slices of the placed tensors, one after another, so a model split
//     over N members costs each about 1/N of it (plus what is mirrored).
//     Such a buffer is addressed by tensor only: its placed tensors, in the
//     state they were placed with.
//   - Every tensor has a SplitState (backend/meta/split_state.h). Weights
//     get theirs from the caller's SplitPolicy when written; computed
//     tensors from MetaStream, which records the state of each node it
//     computes in the node's buffer. Writing a tensor scatters its slices,
//     reading gathers them (PARTIAL: sums F32 values).
//   - MetaStream (meta_stream.h) computes a graph by deriving one graph per
//     member and inserting the Communicator's collectives between them.
//   - MetaEvent holds one event per member and completes when every member
//     has reached it, so that a Scheduler pipelines over meta devices.
//
// Example: two CPU devices, tensor parallel.
//   std::vector<Device*> members = registry.OfType(DeviceType::kCpu);
//   auto comm = HostCommunicator::Create(members).value();
//   auto meta = MetaDevice::Create("tp0", members, *comm,
//                                  LlamaSplitPolicy(2, {.head_dim = 128}))
//                   .value();
//   auto weights = AllocTensors(meta->buffer_type(), tensors).value();
//   weights->set_usage(BufferUsage::kWeights);  // before writing them
//   weights->SetTensor(*w, data, 0, w->NumBytes());  // scatters
//   auto stream = meta->CreateStream().value();     // or a Scheduler stage

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "backend/buffer.h"
#include "backend/comm/communicator.h"
#include "backend/device.h"
#include "backend/event.h"
#include "backend/meta/split_state.h"
#include "graph/tensor.h"

namespace tessera {

class MetaDevice;

// Gives the split state of a weight (a tensor in a meta buffer whose usage
// is not kCompute) from its name and shape. Must be deterministic.
using SplitPolicy = std::function<SplitState(const Tensor&)>;

// A placed tensor of a packed meta buffer: its type, shape and state, and
// where it lies on each member with the room it has there.
struct MetaSlot {
  Type type;
  int64_t ne[kMaxDims];
  size_t meta_bytes;  // the whole tensor's
  SplitState state;
  std::vector<size_t> offset;
  std::vector<size_t> bytes;
};
// Byte offset in the meta buffer -> its tensor's slot.
using MetaPacking = absl::btree_map<size_t, MetaSlot>;

class MetaBufferType final : public BufferType {
 public:
  explicit MetaBufferType(MetaDevice& device) : device_(device) {}
  std::string_view name() const override { return name_; }
  Device& device() override;
  // One buffer of `size` bytes per member. Errors: a member's.
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override;
  // A packed buffer: each placed tensor's state from the device's policy
  // (AllocPacked). Errors: INVALID_ARGUMENT for a policy's state that does
  // not fit its tensor; AllocPacked's.
  absl::StatusOr<std::unique_ptr<Buffer>> AllocPlaced(
      size_t size, absl::Span<const TensorPlacement> placements) override;
  // A packed buffer of `size` bytes for contiguous tensors at distinct
  // offsets, each in its (validated) state: each member buffer holds that
  // member's slices one after another. Errors: INVALID_ARGUMENT for two
  // tensors at one offset; a member's allocation error.
  struct PackedTensor {
    const Tensor* tensor;
    size_t offset;
    SplitState state;
  };
  absl::StatusOr<std::unique_ptr<Buffer>> AllocPacked(
      size_t size, absl::Span<const PackedTensor> tensors);
  // The largest of the members' alignments and AllocSizes; the smallest
  // max_size.
  size_t alignment() const override;
  size_t max_size() const override;
  size_t AllocSize(const Tensor& t) const override;
  bool is_host() const override { return false; }
  MetaDevice& meta_device() { return device_; }

 private:
  friend class MetaDevice;
  // A meta buffer over `members` with an address range of its own.
  absl::StatusOr<std::unique_ptr<Buffer>> Wrap(
      size_t size, std::vector<std::unique_ptr<Buffer>> members,
      MetaPacking packing);

  MetaDevice& device_;
  std::string name_;
};

// A meta buffer: its `base()` is a reserved, inaccessible address range
// (tensor data pointers are offsets, never dereferenced); the bytes live in
// the member buffers. Byte-range Write/Read/Memset treat the bytes as
// mirrored (every member / member 0); in a packed buffer only bytes of one
// mirrored placed tensor (or the whole buffer, for Clear) may be addressed
// so. Tensor transfers scatter and gather by
// the tensor's split state; only contiguous tensors may be split or partial
// (else INVALID_ARGUMENT). Thread-compatible like every Buffer; the split
// state records are thread-safe.
class MetaBuffer final : public Buffer {
 public:
  // `packing` empty: every member tensor at its meta offset.
  MetaBuffer(MetaBufferType& type, size_t size,
             std::vector<std::unique_ptr<Buffer>> members, void* base,
             size_t reserved, MetaPacking packing = {});
  ~MetaBuffer() override;

  void* base() override { return base_; }
  int n_members() const { return static_cast<int>(members_.size()); }
  Buffer& member(int i) { return *members_[i]; }
  MetaDevice& meta_device() { return type_.meta_device(); }

  // The split state of `t` (in this buffer): the one last recorded for its
  // offset, type and shape; else, outside compute buffers, the device's
  // policy (recorded while the buffer has room); else MIRRORED. Errors:
  // INVALID_ARGUMENT for a policy's state that does not fit `t`.
  absl::StatusOr<SplitState> StateOf(const Tensor& t);
  // Records `state` for `t`'s offset, type and shape. Errors:
  // RESOURCE_EXHAUSTED when `t` would be the buffer's kMaxStates + 1st
  // distinct tensor with a state.
  absl::Status RecordState(const Tensor& t, const SplitState& state);
  static constexpr size_t kMaxStates = 1 << 16;
  // The state last recorded for `t` (no policy), if any.
  std::optional<SplitState> RecordedState(const Tensor& t);

  // Member `i`'s tensor of `t` under `state`, at t's offset in member buffer
  // i (packed: at its slot): contiguous with the member's shape (a view's
  // strides kept when not split). `t` must lie in this buffer. Errors
  // (packed only): INVALID_ARGUMENT for a tensor that was not placed there
  // or a state whose slice does not fit its slot.
  absl::StatusOr<Tensor> MemberTensor(const Tensor& t, const SplitState& state,
                                      int i);
  // The same, owned by this buffer and stable for its life (for work queued
  // on member streams).
  absl::StatusOr<Tensor*> StableMemberTensor(const Tensor& t,
                                             const SplitState& state, int i);
  bool packed() const { return !packing_.empty(); }

  // A host source is scattered; another meta buffer's tensor is gathered
  // and scattered through host memory. Returns true.
  absl::StatusOr<bool> CopyFrom(const Tensor& src, Tensor& dst) override;

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override;
  absl::Status DoRead(size_t offset, void* data, size_t size) override;
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override;
  absl::Status DoSetTensor(Tensor& t, size_t base_offset, const void* data,
                           size_t offset, size_t size) override;
  absl::Status DoGetTensor(const Tensor& t, size_t base_offset, void* data,
                           size_t offset, size_t size) override;
  absl::Status DoMemsetTensor(Tensor& t, size_t base_offset, uint8_t value,
                              size_t offset, size_t size) override;

 private:
  struct Key {
    size_t offset;
    Type type;
    int64_t ne[kMaxDims];
    friend bool operator==(const Key& a, const Key& b) {
      return a.offset == b.offset && a.type == b.type && a.ne[0] == b.ne[0] &&
             a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3];
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.offset, k.type, k.ne[0], k.ne[1],
                        k.ne[2], k.ne[3]);
    }
  };
  Key KeyOf(const Tensor& t);
  // Where bytes [offset, offset + size) lie on each member: the same
  // offset, or, packed, inside one mirrored placed tensor's slots.
  // Errors: INVALID_ARGUMENT naming `what` for other ranges of a packed
  // buffer.
  absl::StatusOr<std::vector<size_t>> MemberOffsets(
      size_t offset, size_t size, absl::string_view what) const;

  // A member tensor's identity: where it lies and how it is laid out.
  struct MemberKey {
    const void* data;
    int member;
    Type type;
    int64_t ne[kMaxDims];
    size_t nb[kMaxDims];
    friend bool operator==(const MemberKey& a, const MemberKey& b) {
      return a.data == b.data && a.member == b.member && a.type == b.type &&
             std::equal(std::begin(a.ne), std::end(a.ne), std::begin(b.ne)) &&
             std::equal(std::begin(a.nb), std::end(a.nb), std::begin(b.nb));
    }
    template <typename H>
    friend H AbslHashValue(H h, const MemberKey& k) {
      return H::combine(std::move(h), k.data, k.member, k.type,
                        absl::MakeSpan(k.ne), absl::MakeSpan(k.nb));
    }
  };

  // Constant after construction.
  MetaBufferType& type_;
  const std::vector<std::unique_ptr<Buffer>> members_;
  void* const base_;
  const size_t reserved_;
  const MetaPacking packing_;

  absl::Mutex mu_;
  absl::flat_hash_map<Key, SplitState> states_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<MemberKey, std::unique_ptr<Tensor>> stable_
      ABSL_GUARDED_BY(mu_);
};

// Calls `fn(member, full_byte, member_byte, length)` for each contiguous
// run of member `member`'s part of bytes [offset, offset + size) of `t`
// under `state`: full_byte counts from the start of `t`'s data (so the
// caller's pointer is data + full_byte - offset), member_byte from the
// start of the member tensor. MIRRORED and PARTIAL: one run, identical.
// Errors: INVALID_ARGUMENT for a split or partial `t` that is not
// contiguous.
absl::Status ForEachRun(
    const Tensor& t, const SplitState& state, int member, size_t offset,
    size_t size,
    const std::function<absl::Status(size_t full_byte, size_t member_byte,
                                     size_t length)>& fn);

// An event per member; done when all are. Thread-safe.
class MetaEvent final : public Event {
 public:
  MetaEvent(MetaDevice& device, std::vector<std::unique_ptr<Event>> members)
      : device_(device), members_(std::move(members)) {}
  Device& device() override;
  // Waits for every member; returns the first member error, naming it.
  absl::Status Synchronize() override;
  bool IsDone() override;
  // The members' current recordings.
  std::unique_ptr<EventMark> Capture() override;
  Event& member(int i) { return *members_[i]; }

 private:
  MetaDevice& device_;
  const std::vector<std::unique_ptr<Event>> members_;
};

class MetaDevice final : public Device {
 public:
  // A meta device over `members` (rank i = members[i]) whose collectives go
  // through `comm` (comm.device(i) == members[i]; it must outlive the
  // device, its streams and their work). Weights are split by `policy`.
  // Errors: INVALID_ARGUMENT for no members, a null or repeated member, a
  // member without async streams or events, a communicator of other
  // devices, or an empty policy.
  static absl::StatusOr<std::unique_ptr<MetaDevice>> Create(
      std::string name, std::vector<Device*> members, Communicator& comm,
      SplitPolicy policy);
  // The same with a communicator the device owns (destroyed with it).
  static absl::StatusOr<std::unique_ptr<MetaDevice>> Create(
      std::string name, std::vector<Device*> members,
      std::unique_ptr<Communicator> comm, SplitPolicy policy);

  const std::string& name() const override { return name_; }
  // Memory: the smallest member's times the member count; members by name.
  DeviceProps Props() override;
  BufferType& buffer_type() override { return buffer_type_; }
  // A MetaStream over a new stream of each member.
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  // Whether a rule splits `node`'s op over members (meta_stream.h lists
  // them) and every member supports the op.
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType& type) const override {
    return &type == &buffer_type_;
  }

  int size() const { return static_cast<int>(members_.size()); }
  Device& member(int i) const { return *members_[i]; }
  Communicator& comm() const { return comm_; }
  const SplitPolicy& policy() const { return policy_; }

 private:
  MetaDevice(std::string name, std::vector<Device*> members, Communicator& comm,
             SplitPolicy policy);

  // Constant after construction.
  const std::string name_;
  const std::vector<Device*> members_;
  std::unique_ptr<Communicator> owned_comm_;  // may be null
  Communicator& comm_;
  const SplitPolicy policy_;
  MetaBufferType buffer_type_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_META_META_DEVICE_H_
