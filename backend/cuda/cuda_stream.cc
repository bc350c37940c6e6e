#include "backend/cuda/cuda_stream.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_buffer.h"
#include "backend/cuda/cuda_compute.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_event.h"
#include "backend/cuda/cuda_host_buffer.h"
#include "backend/cuda/kernels.h"
#include "graph/graph.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

using cuda_kernels::KernelError;

constexpr size_t kScratchGranularity = size_t{1} << 20;

absl::Status Prefixed(const absl::Status& status, std::string_view prefix) {
  return absl::Status(status.code(),
                      absl::StrFormat("%s%s", prefix, status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaStream>> CudaStream::Create(
    CudaDevice& device) {
  std::unique_ptr<CudaStream> stream(new CudaStream(device));
  TESSERA_RETURN_IF_ERROR(stream->Init());
  return stream;
}

CudaStream::CudaStream(CudaDevice& device) : device_(device), graphs_(device) {}

absl::Status CudaStream::Init() {
  constexpr std::string_view kWhere = "CreateStream";
  const std::string prefix =
      absl::StrFormat("[%s %s] ", device_.name(), kWhere);
  TESSERA_RETURN_IF_ERROR(device_.Activate(kWhere));
  cudaStream_t stream = nullptr;
  TESSERA_RETURN_IF_ERROR(
      device_.Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags", kWhere));
  stream_ = CudaStreamHandle(device_, stream);
  cublasHandle_t cublas = nullptr;
  TESSERA_RETURN_IF_ERROR(
      Prefixed(TESSERA_CUBLAS_STATUS(cublasCreate(&cublas)), prefix));
  cublas_ = CublasHandle(device_, cublas);
  TESSERA_RETURN_IF_ERROR(Prefixed(
      TESSERA_CUBLAS_STATUS(cublasSetStream(cublas_.get(), stream_.get())),
      prefix));
  // A workspace of our own keeps cuBLAS from allocating during CUDA graph
  // capture.
  TESSERA_ASSIGN_OR_RETURN(cublas_workspace_,
                           AllocatePool(device_.pool(), kCublasWorkspaceBytes));
  TESSERA_RETURN_IF_ERROR(Prefixed(
      TESSERA_CUBLAS_STATUS(cublasSetWorkspace(
          cublas_.get(), cublas_workspace_.get(), kCublasWorkspaceBytes)),
      prefix));

  TESSERA_ASSIGN_OR_RETURN(
      error_, AllocatePool<KernelError>(device_.pool(), sizeof(KernelError)));
  TESSERA_ASSIGN_OR_RETURN(readback_, AllocatePinnedHost<KernelError>(
                                          device_, sizeof(KernelError),
                                          cudaHostAllocPortable, kWhere));
  TESSERA_ASSIGN_OR_RETURN(
      foreign_, AllocatePinnedHost<KernelError>(
                    device_, sizeof(KernelError),
                    cudaHostAllocPortable | cudaHostAllocMapped, kWhere));
  TESSERA_ASSIGN_OR_RETURN(
      foreign_flag_, AllocatePinnedHost<uint64_t>(
                         device_, sizeof(uint64_t),
                         cudaHostAllocPortable | cudaHostAllocMapped, kWhere));
  std::memset(readback_.get(), 0, sizeof(KernelError));
  std::memset(foreign_.get(), 0, sizeof(KernelError));
  *foreign_flag_.get() = 0;
  TESSERA_RETURN_IF_ERROR(device_.Check(
      cudaMemsetAsync(error_.get(), 0, sizeof(KernelError), stream_.get()),
      "cudaMemsetAsync", kWhere));
  return device_.Check(cudaStreamSynchronize(stream_.get()),
                       "cudaStreamSynchronize", kWhere);
}

// The members release the rest (cuda_handles.h), the captured graph first.
CudaStream::~CudaStream() {
  // A wait for an event that never completes must not hold the stream.
  device_.foreign_waits().Cancel(this);
  if (stream_ && device_.Activate("~CudaStream").ok()) {
    device_
        .Check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize",
               "~CudaStream")
        .IgnoreError();
  }
}

Device& CudaStream::device() { return device_; }

absl::Status CudaStream::CheckTensor(const Tensor& t,
                                     std::string_view where) const {
  if (t.data == nullptr || t.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%s %s] tensor %s is not allocated", device_.name(),
                        where, Describe(t)));
  }
  if (!device_.SupportsBufferType(t.buffer->type())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] tensor %s is in a %s buffer, not in this device's memory",
        device_.name(), where, Describe(t), t.buffer->type().name()));
  }
  if (absl::StatusOr<size_t> offset = t.buffer->OffsetOf(t); !offset.ok()) {
    return Prefixed(offset.status(),
                    absl::StrFormat("[%s %s] ", device_.name(), where));
  }
  return absl::OkStatus();
}

absl::Status CudaStream::CheckRange(const Tensor& t, const void* data,
                                    size_t offset, size_t size,
                                    std::string_view where) const {
  TESSERA_RETURN_IF_ERROR(CheckTensor(t, where));
  const size_t bytes = t.NumBytes();
  if (offset > bytes || size > bytes - offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] range of %u bytes at offset %u is outside the %u bytes of "
        "tensor %s",
        device_.name(), where, size, offset, bytes, Describe(t)));
  }
  if (data == nullptr && size > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] null host pointer for %u bytes", device_.name(), where,
        size));
  }
  return absl::OkStatus();
}

absl::Status CudaStream::status() {
  absl::MutexLock lock(&mu_);
  return status_;
}

int CudaStream::cuda_ordinal() const { return device_.ordinal(); }

void CudaStream::Fail(absl::Status status) {
  MakeSticky(std::move(status)).IgnoreError();
}

absl::Status CudaStream::MakeSticky(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (status_.ok()) status_ = status;
  return status;
}

absl::Status CudaStream::Queued(cudaError_t error, std::string_view call,
                                std::string_view where) {
  if (error == cudaSuccess) return absl::OkStatus();
  return MakeSticky(device_.Check(error, call, where));
}

absl::Status CudaStream::SetTensorAsync(Tensor& t, const void* data,
                                        size_t offset, size_t size) {
  constexpr std::string_view kWhere = "CudaStream::SetTensorAsync";
  TESSERA_RETURN_IF_ERROR(CheckRange(t, data, offset, size, kWhere));
  if (size == 0 || !status().ok()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  return Queued(cudaMemcpyAsync(static_cast<char*>(t.data) + offset, data, size,
                                cudaMemcpyHostToDevice, stream_.get()),
                "cudaMemcpyAsync", kWhere);
}

absl::Status CudaStream::GetTensorAsync(const Tensor& t, void* data,
                                        size_t offset, size_t size) {
  constexpr std::string_view kWhere = "CudaStream::GetTensorAsync";
  TESSERA_RETURN_IF_ERROR(CheckRange(t, data, offset, size, kWhere));
  if (size == 0 || !status().ok()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  return Queued(cudaMemcpyAsync(data, static_cast<const char*>(t.data) + offset,
                                size, cudaMemcpyDeviceToHost, stream_.get()),
                "cudaMemcpyAsync", kWhere);
}

absl::Status CudaStream::CopyTensorAsync(const Tensor& src, Tensor& dst) {
  constexpr std::string_view kWhere = "CudaStream::CopyTensorAsync";
  TESSERA_RETURN_IF_ERROR(CheckTensor(dst, kWhere));
  if (src.data == nullptr || src.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%s %s] source %s is not allocated", device_.name(),
                        kWhere, Describe(src)));
  }
  CudaDevice* src_device = CudaDeviceOf(src);
  // Host memory only when it is page-locked: cudaMemcpyAsync reads pageable
  // memory when it is called, not in stream order, so it could read a
  // source that another stream has yet to write. The scheduler copies such
  // sources synchronously instead.
  if (src_device == nullptr &&
      dynamic_cast<const CudaHostBufferType*>(&src.buffer->type()) ==
          nullptr) {
    return absl::UnimplementedError(absl::StrFormat(
        "[%s %s] source %s is in %s memory, which this device cannot copy "
        "from in stream order (neither its own nor page-locked)",
        device_.name(), kWhere, Describe(src), src.buffer->type().name()));
  }
  if (absl::StatusOr<size_t> offset = src.buffer->OffsetOf(src);
      !offset.ok()) {
    return Prefixed(offset.status(),
                    absl::StrFormat("[%s %s] ", device_.name(), kWhere));
  }
  const size_t bytes = dst.NumBytes();
  if (src.NumBytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] source %s has %u bytes, destination %s has %u",
        device_.name(), kWhere, Describe(src), src.NumBytes(), Describe(dst),
        bytes));
  }
  if (bytes == 0 || !status().ok()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  if (src_device == nullptr) {
    return Queued(cudaMemcpyAsync(dst.data, src.data, bytes,
                                  cudaMemcpyHostToDevice, stream_.get()),
                  "cudaMemcpyAsync", kWhere);
  }
  TESSERA_RETURN_IF_ERROR(MakeSticky(src_device->health()));
  if (src_device->ordinal() == device_.ordinal()) {
    return Queued(cudaMemcpyAsync(dst.data, src.data, bytes,
                                  cudaMemcpyDeviceToDevice, stream_.get()),
                  "cudaMemcpyAsync", kWhere);
  }
  device_.EnablePeerAccess(src_device->ordinal());
  return Queued(
      cudaMemcpyPeerAsync(dst.data, device_.ordinal(), src.data,
                          src_device->ordinal(), bytes, stream_.get()),
      "cudaMemcpyPeerAsync", kWhere);
}

absl::Status CudaStream::ComputeAsync(const Graph& graph) {
  constexpr std::string_view kWhere = "CudaStream::ComputeAsync";
  TESSERA_RETURN_IF_ERROR(device_.health());
  std::vector<const Tensor*> nodes;
  nodes.reserve(graph.nodes().size());
  size_t scratch = 0;
  for (const Tensor* node : graph.nodes()) {
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[%s %s] the graph has a null node", device_.name(), kWhere));
    }
    TESSERA_RETURN_IF_ERROR(CheckTensor(*node, kWhere));
    for (const Tensor* src : node->src) {
      if (src != nullptr) TESSERA_RETURN_IF_ERROR(CheckTensor(*src, kWhere));
    }
    if (IsViewOp(node->op)) continue;  // views and NONE do no work
    if (absl::Status s = CudaCheckNode(*node); !s.ok()) {
      return Prefixed(s, absl::StrFormat("[%s %s] ", device_.name(), kWhere));
    }
    scratch = std::max(scratch, CudaScratchBytes(*node));
    nodes.push_back(node);
  }
  if (nodes.empty() || !status().ok()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  TESSERA_RETURN_IF_ERROR(EnsureScratch(scratch));
  absl::Status s;
  if (device_.options().graph_capture) {
    const void* const extra[] = {scratch_.get()};
    s = graphs_.Run(stream_.get(), nodes, extra,
                    [this, &nodes] { return EnqueueNodes(nodes); });
  } else {
    s = EnqueueNodes(nodes);
  }
  return s.ok() ? s : MakeSticky(s);
}

absl::Status CudaStream::EnqueueNodes(const std::vector<const Tensor*>& nodes) {
  const CudaComputeContext ctx{&device_,       stream_.get(), cublas_.get(),
                               scratch_.get(), scratch_size_, error_.get()};
  for (const Tensor* node : nodes) {
    TESSERA_RETURN_IF_ERROR(CudaEnqueueNode(ctx, *node));
  }
  return absl::OkStatus();
}

absl::Status CudaStream::EnsureScratch(size_t bytes) {
  if (bytes <= scratch_size_) return absl::OkStatus();
  constexpr std::string_view kWhere = "CudaStream scratch";
  if (scratch_) {
    // Queued kernels may still use the old scratch.
    TESSERA_RETURN_IF_ERROR(Queued(cudaStreamSynchronize(stream_.get()),
                                   "cudaStreamSynchronize", kWhere));
    graphs_.Clear();
    scratch_.reset();
    scratch_size_ = 0;
  }
  const size_t size =
      (bytes + kScratchGranularity - 1) / kScratchGranularity *
      kScratchGranularity;
  TESSERA_ASSIGN_OR_RETURN(scratch_, AllocatePool(device_.pool(), size));
  scratch_size_ = size;
  return absl::OkStatus();
}

absl::Status CudaStream::Synchronize() {
  constexpr std::string_view kWhere = "CudaStream::Synchronize";
  if (absl::Status s = device_.Activate(kWhere); !s.ok()) return MakeSticky(s);
  TESSERA_RETURN_IF_ERROR(
      Queued(cudaMemcpyAsync(readback_.get(), error_.get(), sizeof(KernelError),
                             cudaMemcpyDeviceToHost, stream_.get()),
             "cudaMemcpyAsync", kWhere));
  TESSERA_RETURN_IF_ERROR(Queued(cudaStreamSynchronize(stream_.get()),
                                 "cudaStreamSynchronize", kWhere));
  if (absl::Status s = KernelErrorStatus(*readback_.get(), device_.name());
      !s.ok()) {
    MakeSticky(std::move(s)).IgnoreError();  // reported by status() below
  }
  return status();
}

absl::Status CudaStream::RecordEvent(Event& event) {
  constexpr std::string_view kWhere = "CudaStream::RecordEvent";
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr || &cuda_event->cuda_device() != &device_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] the event belongs to device %s", device_.name(), kWhere,
        event.device().name()));
  }
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  // The record copy and the marker run even after a failure, so that the
  // event reports it.
  TESSERA_RETURN_IF_ERROR(
      MakeSticky(cuda_event->Record(stream_.get(), error_.get(), status())));
  return absl::OkStatus();
}

absl::Status CudaStream::WaitEvent(Event& event) {
  constexpr std::string_view kWhere = "CudaStream::WaitEvent";
  const std::string what =
      absl::StrFormat("waiting for an event of %s: ", event.device().name());
  const std::string prefix = absl::StrFormat("[%s] %s", device_.name(), what);
  TESSERA_RETURN_IF_ERROR(MakeSticky(device_.Activate(kWhere)));
  if (auto* cuda_event = dynamic_cast<CudaEvent*>(&event)) {
    TESSERA_RETURN_IF_ERROR(MakeSticky(cuda_event->cuda_device().health()));
    CudaEvent::Latest latest = cuda_event->latest();
    if (!latest.status.ok()) {
      // Sticky from now on; reported by Synchronize and later events.
      MakeSticky(Prefixed(latest.status, prefix)).IgnoreError();
      return absl::OkStatus();
    }
    TESSERA_RETURN_IF_ERROR(
        Queued(cudaStreamWaitEvent(stream_.get(), latest.event, 0),
               "cudaStreamWaitEvent", kWhere));
    TESSERA_RETURN_IF_ERROR(
        Queued(cuda_kernels::MergeKernelError(error_.get(), latest.record,
                                              stream_.get()),
               "MergeKernelError kernel launch", kWhere));
    // Keeps the recording's record from being overwritten before the merge
    // above reads it: a stream this far behind is not expected.
    waited_.push_back(std::move(latest.hold));
    if (waited_.size() > kMaxWaited) waited_.pop_front();
    return absl::OkStatus();
  }
  // Another kind of device: the mark of its current recording is released
  // by the device's ForeignWaits; the GPU holds this stream meanwhile, and
  // no CUDA thread blocks.
  std::unique_ptr<EventMark> mark = event.Capture();
  if (mark->IsDone()) {
    if (absl::Status s = mark->Wait(); !s.ok()) {
      MakeSticky(Prefixed(s, prefix)).IgnoreError();
    }
    return absl::OkStatus();
  }
  const uint64_t target = ++foreign_waits_;
  TESSERA_RETURN_IF_ERROR(
      Queued(cuda_kernels::WaitHostFlag(foreign_flag_.get(), target,
                                        stream_.get()),
             "WaitHostFlag kernel launch", kWhere));
  device_.foreign_waits().Add(this, foreign_flag_.get(), target,
                              std::move(mark), foreign_.get(), what);
  return Queued(cuda_kernels::MergeKernelError(error_.get(), foreign_.get(),
                                               stream_.get()),
                "MergeKernelError kernel launch", kWhere);
}

}  // namespace tessera
