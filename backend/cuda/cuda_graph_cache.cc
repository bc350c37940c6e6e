#include "backend/cuda/cuda_graph_cache.h"

#include <cstring>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

template <typename T>
void Append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void AppendTensor(std::string& out, const Tensor& t) {
  Append(out, t.op);
  Append(out, t.type);
  Append(out, t.ne);
  Append(out, t.nb);
  Append(out, t.data);
}

std::string Signature(absl::Span<const Tensor* const> nodes,
                      absl::Span<const void* const> extra) {
  std::string out;
  for (const void* p : extra) Append(out, p);
  for (const Tensor* node : nodes) {
    AppendTensor(out, *node);
    Append(out, node->op_params);
    for (const Tensor* src : node->src) {
      if (src == nullptr) {
        Append(out, static_cast<const void*>(nullptr));
        continue;
      }
      AppendTensor(out, *src);
    }
  }
  return out;
}

}  // namespace

CudaGraphCache::CudaGraphCache(CudaDevice& device) : device_(device) {}

void CudaGraphCache::Clear() {
  exec_.reset();
  signature_.clear();
  repeats_ = 0;
  capture_failed_ = false;
}

absl::Status CudaGraphCache::Run(cudaStream_t stream,
                                 absl::Span<const Tensor* const> nodes,
                                 absl::Span<const void* const> extra,
                                 absl::FunctionRef<absl::Status()> enqueue) {
  std::string signature = Signature(nodes, extra);
  if (signature != signature_) {
    if (repeats_ > 0) {
      spdlog::debug("CudaGraphCache: a graph of {} nodes replaces one run {} "
                    "times in a row",
                    nodes.size(), repeats_);
    }
    Clear();
    signature_ = std::move(signature);
  }
  ++repeats_;
  if (exec_) {
    return device_.Check(cudaGraphLaunch(exec_.get(), stream),
                         "cudaGraphLaunch", "CudaGraphCache");
  }
  if (capture_failed_ || repeats_ < kCaptureAfter) return enqueue();
  return Capture(stream, enqueue);
}

absl::Status CudaGraphCache::Capture(
    cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue) {
  constexpr std::string_view kWhere = "CudaGraphCache";
  TESSERA_RETURN_IF_ERROR(device_.Check(
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture", kWhere));
  const absl::Status queued = enqueue();
  cudaGraph_t raw_graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw_graph);
  const CudaGraphHandle graph(device_, raw_graph);
  cudaGraphExec_t exec = nullptr;
  cudaError_t instantiated = cudaErrorStreamCaptureInvalidated;
  if (queued.ok() && ended == cudaSuccess) {
    instantiated = cudaGraphInstantiate(&exec, graph.get(), 0);
  }
  CudaGraphExecHandle owned_exec(device_, exec);
  // A launch error inside the capture is the caller's failure; nothing ran.
  if (!queued.ok()) {
    device_.Check(ended, "cudaStreamEndCapture", kWhere).IgnoreError();
    return queued;
  }
  if (ended != cudaSuccess || instantiated != cudaSuccess) {
    const absl::Status s =
        ended != cudaSuccess
            ? device_.Check(ended, "cudaStreamEndCapture", kWhere)
            : device_.Check(instantiated, "cudaGraphInstantiate", kWhere);
    TESSERA_RETURN_IF_ERROR(device_.health());
    spdlog::warn("{}; computing this graph without capture",
                 std::string(s.message()));
    capture_failed_ = true;
    return enqueue();
  }
  exec_ = std::move(owned_exec);
  spdlog::debug("CudaGraphCache: captured a graph after {} identical runs",
                repeats_);
  return device_.Check(cudaGraphLaunch(exec_.get(), stream), "cudaGraphLaunch",
                       kWhere);
}

}  // namespace tessera
