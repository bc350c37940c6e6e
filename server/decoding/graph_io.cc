#include "server/decoding/graph_io.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "base/status_macros.h"
#include "proto/tensor_data_codec.h"

namespace tessera::server {
namespace {

absl::Status Invalid(absl::string_view what, int i, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, "[", i, "]: ", problem));
}

}  // namespace

absl::StatusOr<std::vector<Tensor*>> CheckInputs(
    const DecodedGraph& graph,
    const google::protobuf::RepeatedPtrField<v1::TensorData>& inputs,
    const BufferResolver& resolve, bool require_all, size_t max_inline_bytes) {
  std::vector<Tensor*> tensors;
  absl::flat_hash_set<const Tensor*> given;
  for (int i = 0; i < inputs.size(); ++i) {
    const v1::TensorData& in = inputs[i];
    auto it = graph.by_id.find(in.id());
    if (it == graph.by_id.end()) {
      return Invalid("inputs", i,
                     absl::StrCat("the graph has no tensor with id ", in.id()));
    }
    Tensor* t = it->second;
    if (!t->HasFlag(kFlagInput) || !graph.InGraph(t)) {
      return Invalid("inputs", i,
                     absl::StrCat("tensor ", in.id(), " (\"", t->name,
                                  "\") is not an input of the graph (a leaf "
                                  "without data that a node uses)"));
    }
    if (!given.insert(t).second) {
      return Invalid("inputs", i,
                     absl::StrCat("tensor ", in.id(), " is given twice"));
    }
    const size_t bytes = t->NumBytes();
    absl::StatusOr<wire::TensorSource> source = wire::FromProto(in);
    if (!source.ok()) return Invalid("inputs", i, source.status().message());
    if (source->is_inline) {
      if (source->bytes.size() > max_inline_bytes) {
        return Invalid(
            "inputs", i,
            absl::StrCat(source->bytes.size(), " inline bytes exceed ",
                         max_inline_bytes,
                         " (max_chunk_bytes); write larger inputs into a "
                         "buffer and give a ref"));
      }
      if (source->bytes.size() != bytes) {
        return Invalid("inputs", i,
                       absl::StrCat("tensor ", in.id(), " (\"", t->name,
                                    "\") needs ", bytes, " bytes, got ",
                                    source->bytes.size()));
      }
    } else {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = resolve(source->buffer);
      if (!buffer.ok()) {
        return absl::Status(
            buffer.status().code(),
            absl::StrCat("inputs[", i, "]: ", buffer.status().message()));
      }
      const uint64_t size = (*buffer)->size();
      if (source->offset > size || bytes > size - source->offset) {
        return Invalid("inputs", i,
                       absl::StrCat(bytes, " bytes at offset ", source->offset,
                                    " are outside buffer ", source->buffer,
                                    " of ", size, " bytes"));
      }
    }
    tensors.push_back(t);
  }
  if (require_all) {
    for (Tensor* t : graph.inputs) {
      if (!given.contains(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inputs: input tensor \"", t->name, "\" ", Describe(*t),
            " has no data: give it in inputs or place it in a buffer"));
      }
    }
  }
  return tensors;
}

absl::Status WriteInputs(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& inputs,
    const std::vector<Tensor*>& tensors, const BufferResolver& resolve) {
  std::vector<char> staging;
  for (int i = 0; i < inputs.size(); ++i) {
    Tensor& t = *tensors[i];
    const size_t bytes = t.NumBytes();
    if (t.buffer == nullptr) {
      return absl::InternalError(
          absl::StrCat("inputs[", i, "]: tensor \"", t.name,
                       "\" was not allocated"));
    }
    TESSERA_ASSIGN_OR_RETURN(wire::TensorSource source,
                             wire::FromProto(inputs[i]));
    const void* data = source.bytes.data();
    if (!source.is_inline) {
      TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> src,
                               resolve(source.buffer));
      if (src->type().is_host()) {
        data = static_cast<const char*>(src->base()) + source.offset;
      } else {
        staging.resize(bytes);
        TESSERA_RETURN_IF_ERROR(src->Read(source.offset, staging.data(), bytes));
        data = staging.data();
      }
    }
    TESSERA_RETURN_IF_ERROR(t.buffer->SetTensor(t, data, 0, bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor*>> CheckOutputs(
    const DecodedGraph& graph,
    const google::protobuf::RepeatedField<uint32_t>& ids,
    const std::function<absl::Status(const Tensor&)>& readable,
    size_t max_bytes) {
  std::vector<Tensor*> tensors;
  size_t total = 0;
  for (int i = 0; i < ids.size(); ++i) {
    auto it = graph.by_id.find(ids[i]);
    if (it == graph.by_id.end()) {
      return Invalid("outputs", i,
                     absl::StrCat("the graph has no tensor with id ", ids[i]));
    }
    Tensor* t = it->second;
    if (!graph.InGraph(t)) {
      return Invalid("outputs", i,
                     absl::StrCat("tensor ", ids[i], " (\"", t->name,
                                  "\") is not computed by the graph"));
    }
    if (absl::Status s = readable(*t); !s.ok()) {
      return Invalid("outputs", i, s.message());
    }
    const size_t bytes = t->NumBytes();
    if (bytes > max_bytes - total) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "outputs: more than the server's max_message_bytes ", max_bytes,
          " (outputs[", i, "] brings the total to ", total + bytes,
          "); read large results through a buffer instead"));
    }
    total += bytes;
    tensors.push_back(t);
  }
  return tensors;
}

absl::Status ReadOutputs(
    Scheduler& sched, const google::protobuf::RepeatedField<uint32_t>& ids,
    const std::vector<Tensor*>& tensors,
    google::protobuf::RepeatedPtrField<v1::TensorData>& outputs) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string& data =
        wire::AppendOutput(ids[i], tensors[i]->NumBytes(), outputs);
    TESSERA_RETURN_IF_ERROR(
        sched.GetTensorAsync(*tensors[i], data.data(), 0, data.size()));
  }
  return absl::OkStatus();
}

}  // namespace tessera::server
