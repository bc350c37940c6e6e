#include "backend/meta/meta_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// Plans kept per stream before the cache starts over.
constexpr size_t kMaxPlans = 64;

}  // namespace

MetaStream::MetaStream(MetaDevice& device,
                       std::vector<std::unique_ptr<Stream>> members)
    : device_(device), members_(std::move(members)) {
  for (auto& s : members_) member_ptrs_.push_back(s.get());
}

MetaStream::~MetaStream() {
  for (auto& s : members_) (void)s->Synchronize();
}

absl::StatusOr<MetaBuffer*> MetaStream::MetaBufferOf(const Tensor& t,
                                                     absl::string_view where) {
  auto* b = dynamic_cast<MetaBuffer*>(t.buffer);
  if (b == nullptr || &b->meta_device() != &device_) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", device_.name(), " ", where, "] tensor ", Describe(t),
                     " is not in this meta device's memory"));
  }
  TESSERA_RETURN_IF_ERROR(b->OffsetOf(t).status());
  return b;
}

absl::Status MetaStream::SetTensorAsync(Tensor& t, const void* data,
                                        size_t offset, size_t size) {
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * b, MetaBufferOf(t, "SetTensorAsync"));
  if (offset > t.NumBytes() || size > t.NumBytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), " SetTensorAsync] range outside ", Describe(t)));
  }
  TESSERA_ASSIGN_OR_RETURN(SplitState state, b->StateOf(t));
  const char* src = static_cast<const char*>(data);
  for (int i = 0; i < device_.size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(Tensor * m, b->StableMemberTensor(t, state, i));
    if (state.axis == SplitAxis::kPartial && i > 0) {
      // The other members hold zeros: the sum is the value.
      zeros_.push_back(std::make_unique<std::vector<uint8_t>>(size, 0));
      TESSERA_RETURN_IF_ERROR(
          members_[i]->SetTensorAsync(*m, zeros_.back()->data(), offset, size));
      continue;
    }
    TESSERA_RETURN_IF_ERROR(ForEachRun(
        t, state, i, offset, size, [&](size_t full, size_t mine, size_t len) {
          return members_[i]->SetTensorAsync(*m, src + (full - offset), mine,
                                             len);
        }));
  }
  return absl::OkStatus();
}

absl::Status MetaStream::GetTensorAsync(const Tensor& t, void* data,
                                        size_t offset, size_t size) {
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * b, MetaBufferOf(t, "GetTensorAsync"));
  if (offset > t.NumBytes() || size > t.NumBytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), " GetTensorAsync] range outside ", Describe(t)));
  }
  TESSERA_ASSIGN_OR_RETURN(SplitState state, b->StateOf(t));
  char* dst = static_cast<char*>(data);
  if (state.axis == SplitAxis::kPartial) {
    if (t.type != Type::kF32 || offset % 4 != 0 || size % 4 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "[", device_.name(),
          " GetTensorAsync] reading a partial sum needs whole F32 values: ",
          Describe(t)));
    }
    auto sum = std::make_unique<PendingSum>();
    sum->dst = reinterpret_cast<float*>(dst);
    sum->parts.resize(device_.size(), std::vector<float>(size / 4));
    for (int i = 0; i < device_.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(Tensor * m, b->StableMemberTensor(t, state, i));
      TESSERA_RETURN_IF_ERROR(
          members_[i]->GetTensorAsync(*m, sum->parts[i].data(), offset, size));
    }
    pending_sums_.push_back(std::move(sum));
    return absl::OkStatus();
  }
  const int readers = state.is_split() ? device_.size() : 1;
  for (int i = 0; i < readers; ++i) {
    TESSERA_ASSIGN_OR_RETURN(Tensor * m, b->StableMemberTensor(t, state, i));
    TESSERA_RETURN_IF_ERROR(ForEachRun(
        t, state, i, offset, size, [&](size_t full, size_t mine, size_t len) {
          return members_[i]->GetTensorAsync(*m, dst + (full - offset), mine,
                                             len);
        }));
  }
  return absl::OkStatus();
}

absl::Status MetaStream::CopyTensorAsync(const Tensor& src, Tensor& dst) {
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * b,
                           MetaBufferOf(dst, "CopyTensorAsync"));
  if (src.buffer == nullptr || src.data == nullptr ||
      src.NumBytes() != dst.NumBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), " CopyTensorAsync] source ", Describe(src),
        " does not match destination ", Describe(dst)));
  }
  if (src.buffer->type().is_host() && src.IsContiguous()) {
    TESSERA_RETURN_IF_ERROR(src.buffer->OffsetOf(src).status());
    return SetTensorAsync(dst, src.data, 0, dst.NumBytes());
  }
  auto* sb = dynamic_cast<MetaBuffer*>(src.buffer);
  if (sb != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(SplitState ss, sb->StateOf(src));
    TESSERA_ASSIGN_OR_RETURN(SplitState ds, b->StateOf(dst));
    if (ss.axis == SplitAxis::kMirrored && ds.axis == SplitAxis::kMirrored) {
      for (int i = 0; i < device_.size(); ++i) {
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * from,
            sb->StableMemberTensor(src, ss, i % sb->n_members()));
        TESSERA_ASSIGN_OR_RETURN(Tensor * to,
                                 b->StableMemberTensor(dst, ds, i));
        TESSERA_RETURN_IF_ERROR(members_[i]->CopyTensorAsync(*from, *to));
      }
      return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "[", device_.name(), " CopyTensorAsync] cannot copy ", Describe(src),
      " from ", std::string(src.buffer->type().name()), " directly"));
}

absl::Status MetaStream::ComputeAsync(const Graph& graph) {
  TpPlan* plan = nullptr;
  if (auto it = plans_.find(&graph);
      it != plans_.end() && it->second->fingerprint == Fingerprint(graph)) {
    plan = it->second.get();
  } else {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<TpPlan> fresh,
                             DerivePlan(device_, graph));
    ++plans_derived_;
    if (it != plans_.end()) {
      retired_.push_back(std::move(it->second));
      plans_.erase(it);
    }
    if (plans_.size() >= kMaxPlans) {
      for (auto& [g, p] : plans_) retired_.push_back(std::move(p));
      plans_.clear();
    }
    plan = (plans_[&graph] = std::move(fresh)).get();
  }
  for (auto& [t, state] : plan->final_states) {
    TESSERA_RETURN_IF_ERROR(
        static_cast<MetaBuffer*>(t->buffer)->RecordState(*t, state));
  }
  last_collectives_ = plan->n_collectives;
  Communicator& comm = device_.comm();
  const std::string where =
      absl::StrCat("[", device_.name(), " ComputeAsync] ");
  for (TpStep& step : plan->steps) {
    switch (step.kind) {
      case TpStep::Kind::kCompute:
        for (int i = 0; i < device_.size(); ++i) {
          if (step.graphs[i]->nodes().empty()) continue;
          TESSERA_RETURN_IF_ERROR(
              Prefixed(members_[i]->ComputeAsync(*step.graphs[i]),
                       absl::StrCat(where, "member ", i, " (",
                                    device_.member(i).name(), "): ")));
        }
        break;
      case TpStep::Kind::kAllReduce:
        TESSERA_RETURN_IF_ERROR(
            Prefixed(comm.AllReduce(member_ptrs_, step.a), where));
        break;
      case TpStep::Kind::kAllGather:
        TESSERA_RETURN_IF_ERROR(
            Prefixed(comm.AllGather(member_ptrs_, step.a, step.b), where));
        break;
      case TpStep::Kind::kBroadcast:
        TESSERA_RETURN_IF_ERROR(
            Prefixed(comm.Broadcast(member_ptrs_, step.root, step.a), where));
        break;
      case TpStep::Kind::kZero:
        for (int i = 0; i < device_.size(); ++i) {
          TESSERA_RETURN_IF_ERROR(members_[i]->SetTensorAsync(
              *step.a[i], plan->zeros.data(), 0, step.a[i]->NumBytes()));
        }
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status MetaStream::Synchronize() {
  absl::Status first;
  for (int i = 0; i < device_.size(); ++i) {
    absl::Status s = members_[i]->Synchronize();
    if (!s.ok() && first.ok()) {
      first = Prefixed(s, absl::StrCat("[", device_.name(), "] member ", i,
                                       " (", device_.member(i).name(), "): "));
    }
  }
  if (first.ok()) {
    for (auto& sum : pending_sums_) {
      const size_t n = sum->parts[0].size();
      for (size_t k = 0; k < n; ++k) {
        float v = 0.0f;
        for (const auto& part : sum->parts) v += part[k];
        sum->dst[k] = v;
      }
    }
  }
  pending_sums_.clear();
  retired_.clear();
  zeros_.clear();
  return first;
}

absl::Status MetaStream::RecordEvent(Event& event) {
  auto* meta = dynamic_cast<MetaEvent*>(&event);
  if (meta == nullptr || &meta->device() != &device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), " RecordEvent] the event is not of this device"));
  }
  for (int i = 0; i < device_.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(members_[i]->RecordEvent(meta->member(i)));
  }
  return absl::OkStatus();
}

absl::Status MetaStream::WaitEvent(Event& event) {
  auto* meta = dynamic_cast<MetaEvent*>(&event);
  if (meta != nullptr && &meta->device() == &device_) {
    for (int i = 0; i < device_.size(); ++i) {
      TESSERA_RETURN_IF_ERROR(members_[i]->WaitEvent(meta->member(i)));
    }
    return absl::OkStatus();
  }
  if (meta != nullptr) {
    // Another meta device: wait for each of its members' markers as
    // recorded now.
    auto& other = static_cast<MetaDevice&>(meta->device());
    for (int i = 0; i < device_.size(); ++i) {
      for (int j = 0; j < other.size(); ++j) {
        TESSERA_RETURN_IF_ERROR(members_[i]->WaitEvent(meta->member(j)));
      }
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < device_.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(members_[i]->WaitEvent(event));
  }
  return absl::OkStatus();
}

}  // namespace tessera
