#include "backend/meta/meta_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/meta/meta_stream.h"
#include "backend/meta/tp_plan.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// Bytes of `length` indices along `axis` of contiguous `t`.
size_t AxisBytes(const Tensor& t, int axis, int64_t length) {
  if (axis == 0) return RowSize(t.type, length);
  return static_cast<size_t>(length) * t.nb[axis];
}

}  // namespace

// ---------------------------------------------------------------- runs

absl::Status ForEachRun(
    const Tensor& t, const SplitState& state, int member, size_t offset,
    size_t size,
    const std::function<absl::Status(size_t, size_t, size_t)>& fn) {
  const size_t end = offset + size;
  if (!state.is_split()) {
    if (state.axis == SplitAxis::kPartial && !t.IsContiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[MetaBuffer] partial tensor ", Describe(t), " is not contiguous"));
    }
    return size == 0 ? absl::OkStatus() : fn(offset, offset, size);
  }
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[MetaBuffer] split tensor ", Describe(t), " is not contiguous"));
  }
  const int axis = state.axis_index();
  int64_t outer = 1;
  for (int d = axis + 1; d < kMaxDims; ++d) outer *= t.ne[d];
  const size_t full_stride = AxisBytes(t, axis, t.ne[axis]);
  const size_t member_stride = AxisBytes(t, axis, state.MemberExtent(member));
  const std::vector<SlicePiece> pieces = state.Pieces(member);
  for (int64_t o = 0; o < outer; ++o) {
    for (const SlicePiece& p : pieces) {
      size_t full = o * full_stride + AxisBytes(t, axis, p.full_offset);
      size_t mine = o * member_stride + AxisBytes(t, axis, p.member_offset);
      size_t len = AxisBytes(t, axis, p.length);
      // Intersect [full, full + len) with [offset, end).
      const size_t lo = std::max(full, offset);
      const size_t hi = std::min(full + len, end);
      if (lo >= hi) continue;
      TESSERA_RETURN_IF_ERROR(fn(lo, mine + (lo - full), hi - lo));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- types

Device& MetaBufferType::device() { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> MetaBufferType::Alloc(size_t size) {
  std::vector<std::unique_ptr<Buffer>> members;
  for (int i = 0; i < device_.size(); ++i) {
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        device_.member(i).buffer_type().Alloc(size);
    if (!b.ok()) {
      return Prefixed(b.status(),
                      absl::StrCat("[", device_.name(), " Alloc] member ", i,
                                   " (", device_.member(i).name(), "): "));
    }
    members.push_back(*std::move(b));
  }
  return Wrap(size, std::move(members), {});
}

absl::StatusOr<std::unique_ptr<Buffer>> MetaBufferType::Wrap(
    size_t size, std::vector<std::unique_ptr<Buffer>> members,
    MetaPacking packing) {
  // Reserve inaccessible addresses so that tensor data pointers are unique
  // and never mistaken for memory.
  const size_t reserved = std::max<size_t>(size, 1) + alignment();
  void* base = mmap(nullptr, reserved, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[", device_.name(), " Alloc] cannot reserve ", reserved,
                     " bytes of address space"));
  }
  return std::make_unique<MetaBuffer>(*this, size, std::move(members), base,
                                      reserved, std::move(packing));
}

absl::StatusOr<std::unique_ptr<Buffer>> MetaBufferType::AllocPlaced(
    size_t size, absl::Span<const TensorPlacement> placements) {
  std::vector<PackedTensor> tensors;
  for (const TensorPlacement& p : placements) {
    SplitState state = device_.policy()(*p.tensor);
    TESSERA_RETURN_IF_ERROR(
        Prefixed(ValidateSplit(state, *p.tensor, device_.size()),
                 absl::StrCat("[", device_.name(), "] split policy: ")));
    tensors.push_back({p.tensor, p.offset, std::move(state)});
  }
  return AllocPacked(size, tensors);
}

absl::StatusOr<std::unique_ptr<Buffer>> MetaBufferType::AllocPacked(
    size_t size, absl::Span<const PackedTensor> tensors) {
  const int n = device_.size();
  MetaPacking packing;
  std::vector<size_t> used(n, 0);
  for (const PackedTensor& p : tensors) {
    const Tensor& t = *p.tensor;
    const SplitState& state = p.state;
    MetaSlot slot{.type = t.type, .meta_bytes = t.NumBytes(), .state = state};
    std::copy(std::begin(t.ne), std::end(t.ne), std::begin(slot.ne));
    for (int i = 0; i < n; ++i) {
      BufferType& member = device_.member(i).buffer_type();
      Tensor m;
      m.type = t.type;
      MemberShape(t, state, i, m.ne);
      ContiguousStrides(m.type, m.ne, m.nb);
      const size_t align = member.alignment();
      const size_t at = (used[i] + align - 1) / align * align;
      slot.offset.push_back(at);
      slot.bytes.push_back(member.AllocSize(m));
      used[i] = at + slot.bytes.back();
    }
    if (!packing.emplace(p.offset, std::move(slot)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[", device_.name(), " AllocPacked] two tensors placed at offset ",
          p.offset));
    }
  }
  std::vector<std::unique_ptr<Buffer>> members;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        device_.member(i).buffer_type().Alloc(used[i]);
    if (!b.ok()) {
      return Prefixed(b.status(),
                      absl::StrCat("[", device_.name(), " AllocPacked] member ",
                                   i, " (", device_.member(i).name(), "): "));
    }
    members.push_back(*std::move(b));
  }
  return Wrap(size, std::move(members), std::move(packing));
}

size_t MetaBufferType::alignment() const {
  size_t a = 1;
  for (int i = 0; i < device_.size(); ++i) {
    a = std::max(a, device_.member(i).buffer_type().alignment());
  }
  return a;
}

size_t MetaBufferType::max_size() const {
  size_t m = std::numeric_limits<size_t>::max();
  for (int i = 0; i < device_.size(); ++i) {
    m = std::min(m, device_.member(i).buffer_type().max_size());
  }
  return m;
}

size_t MetaBufferType::AllocSize(const Tensor& t) const {
  size_t s = t.NumBytes();
  for (int i = 0; i < device_.size(); ++i) {
    s = std::max(s, device_.member(i).buffer_type().AllocSize(t));
  }
  return s;
}

// ---------------------------------------------------------------- buffer

MetaBuffer::MetaBuffer(MetaBufferType& type, size_t size,
                       std::vector<std::unique_ptr<Buffer>> members, void* base,
                       size_t reserved, MetaPacking packing)
    : Buffer(type, size),
      type_(type),
      members_(std::move(members)),
      base_(base),
      reserved_(reserved),
      packing_(std::move(packing)) {
  absl::MutexLock lock(&mu_);
  for (const auto& [offset, slot] : packing_) {
    Key key{.offset = offset, .type = slot.type};
    std::copy(std::begin(slot.ne), std::end(slot.ne), std::begin(key.ne));
    states_[key] = slot.state;
  }
}

MetaBuffer::~MetaBuffer() { munmap(base_, reserved_); }

MetaBuffer::Key MetaBuffer::KeyOf(const Tensor& t) {
  Key key{.offset = static_cast<size_t>(static_cast<const char*>(t.data) -
                                        static_cast<const char*>(base_)),
          .type = t.type};
  for (int d = 0; d < kMaxDims; ++d) key.ne[d] = t.ne[d];
  return key;
}

absl::StatusOr<SplitState> MetaBuffer::StateOf(const Tensor& t) {
  const Key key = KeyOf(t);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = states_.find(key); it != states_.end()) return it->second;
  }
  if (usage() == BufferUsage::kCompute) return SplitState::Mirrored();
  SplitState state = meta_device().policy()(t);
  TESSERA_RETURN_IF_ERROR(
      Prefixed(ValidateSplit(state, t, n_members()),
               absl::StrCat("[", meta_device().name(), "] split policy: ")));
  absl::MutexLock lock(&mu_);
  if (states_.size() < kMaxStates) states_[key] = state;
  return state;
}

absl::Status MetaBuffer::RecordState(const Tensor& t, const SplitState& state) {
  const Key key = KeyOf(t);
  absl::MutexLock lock(&mu_);
  auto it = states_.find(key);
  if (it != states_.end()) {
    it->second = state;
    return absl::OkStatus();
  }
  if (states_.size() >= kMaxStates) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "[", meta_device().name(), "] ", Describe(t), ": a buffer holds split ",
        "states for at most ", kMaxStates, " distinct tensors"));
  }
  states_.emplace(key, state);
  return absl::OkStatus();
}

std::optional<SplitState> MetaBuffer::RecordedState(const Tensor& t) {
  const Key key = KeyOf(t);
  absl::MutexLock lock(&mu_);
  if (auto it = states_.find(key); it != states_.end()) return it->second;
  return std::nullopt;
}

absl::StatusOr<Tensor> MetaBuffer::MemberTensor(const Tensor& t,
                                                const SplitState& state,
                                                int i) {
  Tensor m;
  m.type = t.type;
  m.name = t.name;
  m.flags = t.flags;
  MemberShape(t, state, i, m.ne);
  if (state.is_split() || !t.IsView() || t.IsContiguous()) {
    ContiguousStrides(m.type, m.ne, m.nb);
  } else {
    for (int d = 0; d < kMaxDims; ++d) m.nb[d] = t.nb[d];
  }
  size_t offset =
      static_cast<const char*>(t.data) - static_cast<const char*>(base_);
  if (packed()) {
    auto it = packing_.find(offset);
    if (it == packing_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[", meta_device().name(), "] ", Describe(t),
          " is not a tensor this weights buffer was laid out for"));
    }
    if (m.NumBytes() > it->second.bytes[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[", meta_device().name(), "] ", Describe(t), " as ",
          state.ToString(), " needs ", m.NumBytes(), " bytes on member ", i,
          " where its weights buffer has room for ", it->second.bytes[i],
          " (placed as ", it->second.state.ToString(), ")"));
    }
    offset = it->second.offset[i];
  }
  m.data = static_cast<char*>(members_[i]->base()) + offset;
  m.buffer = members_[i].get();
  return m;
}

absl::StatusOr<Tensor*> MetaBuffer::StableMemberTensor(const Tensor& t,
                                                       const SplitState& state,
                                                       int i) {
  TESSERA_ASSIGN_OR_RETURN(Tensor member, MemberTensor(t, state, i));
  auto m = std::make_unique<Tensor>(std::move(member));
  MemberKey key{.data = m->data, .member = i, .type = m->type};
  std::copy(std::begin(m->ne), std::end(m->ne), std::begin(key.ne));
  std::copy(std::begin(m->nb), std::end(m->nb), std::begin(key.nb));
  absl::MutexLock lock(&mu_);
  // An identical one is reused.
  auto [it, inserted] = stable_.try_emplace(key, nullptr);
  if (inserted) it->second = std::move(m);
  return it->second.get();
}

absl::StatusOr<std::vector<size_t>> MetaBuffer::MemberOffsets(
    size_t offset, size_t size, absl::string_view what) const {
  if (!packed()) return std::vector<size_t>(members_.size(), offset);
  // The placed tensor that starts at or before `offset`.
  auto it = packing_.upper_bound(offset);
  if (it != packing_.begin()) {
    --it;
    const MetaSlot& slot = it->second;
    const size_t delta = offset - it->first;
    if (slot.state.axis == SplitAxis::kMirrored && delta <= slot.meta_bytes &&
        size <= slot.meta_bytes - delta) {
      std::vector<size_t> at = slot.offset;
      for (size_t& o : at) o += delta;
      return at;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "[", type_.meta_device().name(), "] ", what, " of bytes [", offset, ", ",
      offset + size,
      ") of a weights buffer outside its mirrored tensors: its tensors are "
      "packed per member, write and read them by tensor"));
}

absl::Status MetaBuffer::DoWrite(size_t offset, const void* data, size_t size) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<size_t> at,
                           MemberOffsets(offset, size, "a write"));
  for (size_t i = 0; i < members_.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(members_[i]->Write(at[i], data, size));
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::DoRead(size_t offset, void* data, size_t size) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<size_t> at,
                           MemberOffsets(offset, size, "a read"));
  return members_[0]->Read(at[0], data, size);
}

absl::Status MetaBuffer::DoMemset(size_t offset, uint8_t value, size_t size) {
  if (packed() && offset == 0 && size == this->size()) {
    // Clear: every member buffer whole.
    for (auto& m : members_) TESSERA_RETURN_IF_ERROR(m->Clear(value));
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<size_t> at,
                           MemberOffsets(offset, size, "a memset"));
  for (size_t i = 0; i < members_.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(members_[i]->Memset(at[i], value, size));
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::DoSetTensor(Tensor& t, size_t base_offset,
                                     const void* data, size_t offset,
                                     size_t size) {
  TESSERA_ASSIGN_OR_RETURN(SplitState state, StateOf(t));
  const char* src = static_cast<const char*>(data);
  for (int i = 0; i < n_members(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(Tensor m, MemberTensor(t, state, i));
    const bool zeros = state.axis == SplitAxis::kPartial && i > 0;
    TESSERA_RETURN_IF_ERROR(ForEachRun(
        t, state, i, offset, size,
        [&](size_t full, size_t mine, size_t len) -> absl::Status {
          if (zeros) return members_[i]->MemsetTensor(m, 0, mine, len);
          return members_[i]->SetTensor(m, src + (full - offset), mine, len);
        }));
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::DoGetTensor(const Tensor& t, size_t base_offset,
                                     void* data, size_t offset, size_t size) {
  TESSERA_ASSIGN_OR_RETURN(SplitState state, StateOf(t));
  char* dst = static_cast<char*>(data);
  if (state.axis == SplitAxis::kPartial) {
    if (t.type != Type::kF32 || offset % 4 != 0 || size % 4 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "[", meta_device().name(),
          "] reading a partial sum needs whole F32 values: ", Describe(t)));
    }
    std::vector<float> sum(size / 4, 0.0f), part(size / 4);
    for (int i = 0; i < n_members(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(Tensor m, MemberTensor(t, state, i));
      TESSERA_RETURN_IF_ERROR(
          members_[i]->GetTensor(m, part.data(), offset, size));
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
    }
    std::memcpy(dst, sum.data(), size);
    return absl::OkStatus();
  }
  const int readers = state.is_split() ? n_members() : 1;
  for (int i = 0; i < readers; ++i) {
    TESSERA_ASSIGN_OR_RETURN(Tensor m, MemberTensor(t, state, i));
    TESSERA_RETURN_IF_ERROR(ForEachRun(
        t, state, i, offset, size, [&](size_t full, size_t mine, size_t len) {
          return members_[i]->GetTensor(m, dst + (full - offset), mine, len);
        }));
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::DoMemsetTensor(Tensor& t, size_t base_offset,
                                        uint8_t value, size_t offset,
                                        size_t size) {
  TESSERA_ASSIGN_OR_RETURN(SplitState state, StateOf(t));
  for (int i = 0; i < n_members(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(Tensor m, MemberTensor(t, state, i));
    const uint8_t v =
        state.axis == SplitAxis::kPartial && i > 0 ? uint8_t{0} : value;
    TESSERA_RETURN_IF_ERROR(ForEachRun(
        t, state, i, offset, size, [&](size_t, size_t mine, size_t len) {
          return members_[i]->MemsetTensor(m, v, mine, len);
        }));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> MetaBuffer::CopyFrom(const Tensor& src, Tensor& dst) {
  TESSERA_RETURN_IF_ERROR(OffsetOf(dst).status());
  if (src.buffer == nullptr || src.NumBytes() != dst.NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[MetaBuffer::CopyFrom] source ", Describe(src),
                     " does not match destination ", Describe(dst)));
  }
  if (src.buffer->type().is_host()) {
    TESSERA_RETURN_IF_ERROR(src.buffer->OffsetOf(src).status());
    TESSERA_RETURN_IF_ERROR(SetTensor(dst, src.data, 0, dst.NumBytes()));
    return true;
  }
  return false;
}

// ---------------------------------------------------------------- event

Device& MetaEvent::device() { return device_; }

// The marks of every member's event, captured together.
class MetaMark final : public EventMark {
 public:
  MetaMark(MetaDevice& device, std::vector<std::unique_ptr<EventMark>> marks)
      : device_(device), marks_(std::move(marks)) {}
  // Waits for every member; returns the first member error, naming it.
  absl::Status Wait() override {
    absl::Status first;
    for (size_t i = 0; i < marks_.size(); ++i) {
      absl::Status s = marks_[i]->Wait();
      if (!s.ok() && first.ok()) {
        first = Prefixed(s, absl::StrCat("[", device_.name(), "] member ", i,
                                         " (", device_.member(i).name(),
                                         "): "));
      }
    }
    return first;
  }
  bool IsDone() override {
    for (auto& mark : marks_) {
      if (!mark->IsDone()) return false;
    }
    return true;
  }

 private:
  MetaDevice& device_;
  const std::vector<std::unique_ptr<EventMark>> marks_;
};

absl::Status MetaEvent::Synchronize() { return Capture()->Wait(); }

bool MetaEvent::IsDone() { return Capture()->IsDone(); }

std::unique_ptr<EventMark> MetaEvent::Capture() {
  std::vector<std::unique_ptr<EventMark>> marks;
  marks.reserve(members_.size());
  for (auto& event : members_) marks.push_back(event->Capture());
  return std::make_unique<MetaMark>(device_, std::move(marks));
}

// ---------------------------------------------------------------- device

MetaDevice::MetaDevice(std::string name, std::vector<Device*> members,
                       Communicator& comm, SplitPolicy policy)
    : name_(std::move(name)),
      members_(std::move(members)),
      comm_(comm),
      policy_(std::move(policy)),
      buffer_type_(*this) {
  buffer_type_.name_ = absl::StrCat(name_, ":meta");
}

absl::StatusOr<std::unique_ptr<MetaDevice>> MetaDevice::Create(
    std::string name, std::vector<Device*> members, Communicator& comm,
    SplitPolicy policy) {
  const std::string where = absl::StrCat("[MetaDevice::Create ", name, "] ");
  if (members.empty()) {
    return absl::InvalidArgumentError(where + "no member devices");
  }
  if (!policy) return absl::InvalidArgumentError(where + "no split policy");
  if (comm.size() != static_cast<int>(members.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "the communicator has ", comm.size(), " ranks for ",
                     members.size(), " members"));
  }
  absl::flat_hash_set<Device*> seen;
  for (size_t i = 0; i < members.size(); ++i) {
    Device* d = members[i];
    if (d == nullptr || !seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "member ", i, " is null or repeated"));
    }
    const DeviceCaps caps = d->Props().caps;
    if (!caps.async || !caps.events) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "member ", d->name(), " lacks async streams or events"));
    }
    if (&comm.device(static_cast<int>(i)) != d) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "communicator rank ", i, " is not member ", d->name()));
    }
  }
  return std::unique_ptr<MetaDevice>(new MetaDevice(
      std::move(name), std::move(members), comm, std::move(policy)));
}

absl::StatusOr<std::unique_ptr<MetaDevice>> MetaDevice::Create(
    std::string name, std::vector<Device*> members,
    std::unique_ptr<Communicator> comm, SplitPolicy policy) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("[MetaDevice::Create ", name, "] no communicator"));
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<MetaDevice> device,
      Create(std::move(name), std::move(members), *comm, std::move(policy)));
  device->owned_comm_ = std::move(comm);
  return device;
}

DeviceProps MetaDevice::Props() {
  DeviceProps props;
  props.name = name_;
  props.type = DeviceType::kMeta;
  props.description =
      absl::StrCat("tensor parallel over ", members_.size(), " devices:");
  size_t free = std::numeric_limits<size_t>::max();
  size_t total = std::numeric_limits<size_t>::max();
  for (Device* d : members_) {
    DeviceProps p = d->Props();
    absl::StrAppend(&props.description, " ", p.name);
    props.members.push_back(p.name);
    free = std::min(free, p.memory_free);
    total = std::min(total, p.memory_total);
  }
  props.memory_free = free * members_.size();
  props.memory_total = total * members_.size();
  props.caps.async = true;
  props.caps.events = true;
  return props;
}

absl::StatusOr<std::unique_ptr<Stream>> MetaDevice::CreateStream() {
  std::vector<std::unique_ptr<Stream>> streams;
  for (Device* d : members_) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, d->CreateStream());
    streams.push_back(std::move(s));
  }
  return std::unique_ptr<Stream>(new MetaStream(*this, std::move(streams)));
}

absl::StatusOr<std::unique_ptr<Event>> MetaDevice::CreateEvent() {
  std::vector<std::unique_ptr<Event>> events;
  for (Device* d : members_) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, d->CreateEvent());
    events.push_back(std::move(e));
  }
  return std::unique_ptr<Event>(new MetaEvent(*this, std::move(events)));
}

bool MetaDevice::SupportsOp(const Tensor& node) const {
  if (!HasSplitRule(node)) return false;
  if (IsViewOp(node.op)) return true;
  for (Device* d : members_) {
    if (!d->SupportsOp(node)) return false;
  }
  return true;
}

}  // namespace tessera
