#include "tests/conformance/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "backend/stream.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "backend/alloc/graph_allocator.h"
#include "graph/reference.h"
#include "graph/tensor.h"
#include "backend/alloc/tensor_allocator.h"
#include "graph/type.h"
#include "base/status_macros.h"

namespace tessera::conformance {

double Nmse(absl::Span<const double> actual,
            absl::Span<const double> expected) {
  if (actual.size() != expected.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double err = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (!std::isfinite(a) || !std::isfinite(e)) {
      const bool same = (std::isnan(a) && std::isnan(e)) || a == e;
      if (!same) return std::numeric_limits<double>::infinity();
      continue;
    }
    err += (a - e) * (a - e);
    norm += e * e;
  }
  return norm == 0.0 ? err : err / norm;
}

namespace {

// A case built in its own Context and expanded into a Graph.
struct BuiltCase {
  Context ctx;
  Graph graph;
  Tensor* out = nullptr;
};

absl::Status BuildCase(const OpCase& op_case, BuiltCase& built) {
  absl::StatusOr<Tensor*> out = op_case.build(built.ctx);
  if (!out.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[RunCase] ", op_case.name,
                     " does not build: ", out.status().message()));
  }
  built.out = *out;
  if (absl::Status s = built.graph.Expand(built.out); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[RunCase] ", op_case.name, " does not expand: ", s.message()));
  }
  return absl::OkStatus();
}

// Whether the two builds of a case have the same structure, so that leaf i
// of one is leaf i of the other.
absl::Status CheckSameStructure(const OpCase& op_case, const Graph& a,
                                const Graph& b) {
  bool same = a.leafs().size() == b.leafs().size() &&
              a.nodes().size() == b.nodes().size();
  for (size_t i = 0; same && i < a.leafs().size(); ++i) {
    same = a.leafs()[i]->type == b.leafs()[i]->type &&
           SameShape(*a.leafs()[i], *b.leafs()[i]);
  }
  for (size_t i = 0; same && i < a.nodes().size(); ++i) {
    same = a.nodes()[i]->op == b.nodes()[i]->op;
  }
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[RunCase] ", op_case.name, " builds two different graphs"));
  }
  return absl::OkStatus();
}

// How an I32 or I64 leaf is used, which decides its values.
enum class IndexUse { kData, kGetRows, kSetRows, kPositions };

IndexUse FindIndexUse(const Tensor& leaf, const Graph& graph, int64_t& n_rows) {
  for (const Tensor* node : graph.nodes()) {
    if (node->src[1] != &leaf) continue;
    switch (node->op) {
      case Op::kGetRows:
        n_rows = node->src[0]->ne[1];
        return IndexUse::kGetRows;
      case Op::kSetRows:
        n_rows = node->ne[1];
        return IndexUse::kSetRows;
      case Op::kRope:
        return IndexUse::kPositions;
      default:
        break;
    }
  }
  return IndexUse::kData;
}

// The bytes of a (contiguous) leaf: floats uniform in the case's range
// converted to the leaf's type; I32 values by their use.
absl::StatusOr<std::vector<uint8_t>> LeafData(const OpCase& op_case,
                                              const Tensor& leaf,
                                              const Graph& graph,
                                              std::mt19937& rng) {
  if (!leaf.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("[RunCase] ", op_case.name,
                                                   ": leaf ", Describe(leaf),
                                                   " is not contiguous"));
  }
  const int64_t n = leaf.NumElements();
  std::vector<uint8_t> bytes(leaf.NumBytes());
  if (n == 0) return bytes;
  if (leaf.type == Type::kI32 || leaf.type == Type::kI64) {
    std::vector<int32_t> values(n);
    int64_t n_rows = 0;
    switch (FindIndexUse(leaf, graph, n_rows)) {
      case IndexUse::kGetRows: {
        std::uniform_int_distribution<int32_t> dist(0, n_rows - 1);
        for (int32_t& v : values) v = dist(rng);
        break;
      }
      case IndexUse::kSetRows: {
        // Distinct within each row of indices, so that the result does not
        // depend on the order in which rows are written.
        const int64_t per_row = leaf.ne[0];
        if (per_row > n_rows) {
          return absl::InvalidArgumentError(absl::StrCat(
              "[RunCase] ", op_case.name, ": ", per_row,
              " distinct SET_ROWS indices do not fit in ", n_rows, " rows"));
        }
        std::vector<int32_t> perm(n_rows);
        for (int64_t r = 0; r < n / per_row; ++r) {
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          std::copy(perm.begin(), perm.begin() + per_row,
                    values.begin() + r * per_row);
        }
        break;
      }
      case IndexUse::kPositions: {
        std::uniform_int_distribution<int32_t> dist(0, 1023);
        for (int32_t& v : values) v = dist(rng);
        break;
      }
      case IndexUse::kData: {
        std::uniform_int_distribution<int32_t> dist(-1000, 1000);
        for (int32_t& v : values) v = dist(rng);
        break;
      }
    }
    if (leaf.type == Type::kI64) {
      const std::vector<int64_t> wide(values.begin(), values.end());
      std::memcpy(bytes.data(), wide.data(), bytes.size());
    } else {
      std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    return bytes;
  }
  std::uniform_real_distribution<float> dist(op_case.input_min,
                                             op_case.input_max);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  RowFromFloat(leaf.type, values.data(), bytes.data(), n);
  return bytes;
}

// The values of `t` as doubles in logical order; `base` is t's first byte.
std::vector<double> Values(const Tensor& t, const uint8_t* base) {
  std::vector<double> out;
  out.reserve(t.NumElements());
  std::vector<float> row(t.ne[0]);
  const bool block = Traits(t.type).is_quantized;
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
        const uint8_t* r = base + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
        if (block) {
          RowToFloat(t.type, r, row.data(), t.ne[0]);
          out.insert(out.end(), row.begin(), row.end());
          continue;
        }
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
          const uint8_t* e = r + i0 * t.nb[0];
          if (t.type == Type::kI32) {
            int32_t v;
            std::memcpy(&v, e, sizeof(v));
            out.push_back(v);
          } else {
            float v;
            RowToFloat(t.type, e, &v, 1);
            out.push_back(v);
          }
        }
      }
    }
  }
  return out;
}

// Host memory for every tensor of a graph: views alias their source.
class HostStorage {
 public:
  void Place(Tensor& t) {
    if (t.view_src != nullptr) {
      t.data = static_cast<uint8_t*>(t.view_src->data) + t.view_offs;
      return;
    }
    // One spare byte so that empty tensors still get a distinct address.
    blocks_.push_back(std::make_unique<uint8_t[]>(t.NumBytes() + 1));
    t.data = blocks_.back().get();
  }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
};

absl::StatusOr<std::vector<double>> ComputeReference(
    const OpCase& op_case, BuiltCase& ref,
    const std::vector<std::vector<uint8_t>>& leaf_data, HostStorage& storage) {
  for (size_t i = 0; i < ref.graph.leafs().size(); ++i) {
    Tensor& leaf = *ref.graph.leafs()[i];
    storage.Place(leaf);
    if (!leaf_data[i].empty()) {
      std::memcpy(leaf.data, leaf_data[i].data(), leaf_data[i].size());
    }
  }
  for (Tensor* node : ref.graph.nodes()) storage.Place(*node);
  for (Tensor* node : ref.graph.nodes()) {
    if (absl::Status s = ReferenceCompute(*node, 0, 1); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("[RunCase] ", op_case.name, ": reference fails on ",
                       Describe(*node), ": ", s.message()));
    }
  }
  std::vector<double> values =
      Values(*ref.out, static_cast<const uint8_t*>(ref.out->data));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("[RunCase] ", op_case.name,
                       ": reference output is not finite at element ", i));
    }
  }
  return values;
}

absl::Status DeviceError(const OpCase& op_case, const Device& device,
                         const char* step, const absl::Status& s) {
  return absl::InternalError(absl::StrCat("[RunCase] ", op_case.name, " on ",
                                          device.name(), ": ", step, ": ",
                                          s.ToString()));
}

absl::StatusOr<std::vector<double>> ComputeOnDevice(
    const OpCase& op_case, Device& device, BuiltCase& dev,
    const std::vector<std::vector<uint8_t>>& leaf_data) {
  for (Tensor* leaf : dev.graph.leafs()) leaf->flags |= kFlagInput;
  dev.out->flags |= kFlagOutput;
  absl::StatusOr<std::unique_ptr<Buffer>> leaf_buffer =
      AllocTensors(device.buffer_type(), dev.graph.leafs());
  if (!leaf_buffer.ok()) {
    return DeviceError(op_case, device, "allocating leafs",
                       leaf_buffer.status());
  }
  GraphAllocator allocator({&device.buffer_type()});
  if (absl::Status s = allocator.Alloc(dev.graph); !s.ok()) {
    return DeviceError(op_case, device, "allocating nodes", s);
  }
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream();
  if (!stream.ok()) {
    return DeviceError(op_case, device, "creating a stream", stream.status());
  }
  // Queue everything, then synchronize once whatever happened, so that no
  // queued transfer outlives the memory it points to.
  std::vector<uint8_t> out_bytes(dev.out->NumBytes());
  absl::Status queued = absl::OkStatus();
  for (size_t i = 0; i < dev.graph.leafs().size() && queued.ok(); ++i) {
    if (leaf_data[i].empty()) continue;
    queued = (*stream)->SetTensorAsync(
        *dev.graph.leafs()[i], leaf_data[i].data(), 0, leaf_data[i].size());
  }
  if (queued.ok()) queued = (*stream)->ComputeAsync(dev.graph);
  if (queued.ok() && !out_bytes.empty()) {
    queued = (*stream)->GetTensorAsync(*dev.out, out_bytes.data(), 0,
                                       out_bytes.size());
  }
  const absl::Status done = (*stream)->Synchronize();
  if (!queued.ok()) return DeviceError(op_case, device, "queueing", queued);
  if (!done.ok()) return DeviceError(op_case, device, "computing", done);
  return Values(*dev.out, out_bytes.data());
}

absl::Status Compare(const OpCase& op_case, const Device& device,
                     const Tensor& out, const std::vector<double>& actual,
                     const std::vector<double>& expected) {
  const std::string where =
      absl::StrCat("[RunCase] ", op_case.name, " on ", device.name(), ": ");
  if (actual.size() != expected.size()) {
    return absl::InternalError(absl::StrCat(
        where, actual.size(), " values, expected ", expected.size()));
  }
  if (out.type == Type::kI32) {
    for (size_t i = 0; i < actual.size(); ++i) {
      if (actual[i] != expected[i]) {
        return absl::InternalError(absl::StrCat(where, "element ", i, " is ",
                                                actual[i], ", expected ",
                                                expected[i]));
      }
    }
    return absl::OkStatus();
  }
  const double nmse = Nmse(actual, expected);
  if (nmse <= op_case.max_nmse) return absl::OkStatus();
  size_t worst = 0;
  double worst_err = -1.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::isfinite(actual[i])
                           ? std::abs(actual[i] - expected[i])
                           : std::numeric_limits<double>::infinity();
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
  }
  return absl::InternalError(
      absl::StrCat(where, "NMSE ", nmse, " > bound ", op_case.max_nmse,
                   "; worst element ", worst, " of ", actual.size(), ": ",
                   actual[worst], ", expected ", expected[worst]));
}

}  // namespace

absl::Status RunCase(const OpCase& op_case, Device& device, uint32_t seed) {
  BuiltCase dev;
  BuiltCase ref;
  TESSERA_RETURN_IF_ERROR(BuildCase(op_case, dev));
  TESSERA_RETURN_IF_ERROR(BuildCase(op_case, ref));
  TESSERA_RETURN_IF_ERROR(CheckSameStructure(op_case, dev.graph, ref.graph));

  for (const Tensor* node : dev.graph.nodes()) {
    if (!IsViewOp(node->op) && !device.SupportsOp(*node)) {
      return absl::UnimplementedError(
          absl::StrCat("[RunCase] ", device.name(), " does not support ",
                       std::string(OpName(node->op)), " ", Describe(*node)));
    }
  }

  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> leaf_data;
  for (const Tensor* leaf : ref.graph.leafs()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                          LeafData(op_case, *leaf, ref.graph, rng));
    leaf_data.push_back(std::move(bytes));
  }

  HostStorage storage;
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> expected,
                        ComputeReference(op_case, ref, leaf_data, storage));
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> actual,
                        ComputeOnDevice(op_case, device, dev, leaf_data));
  return Compare(op_case, device, *dev.out, actual, expected);
}

}  // namespace tessera::conformance
