#include "proto/tensor_data_codec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera::wire {

absl::Status ToProto(absl::Span<const TensorInput> inputs,
                     const EncodedGraph& graph,
                     google::protobuf::RepeatedPtrField<v1::TensorData>& out) {
  for (const TensorInput& in : inputs) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t id, graph.IdOf(in.tensor));
    v1::TensorData* data = out.Add();
    data->set_id(id);
    data->set_data(in.data, in.size);
  }
  return absl::OkStatus();
}

absl::Status FromProto(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& results,
    absl::Span<const TensorOutput> outputs) {
  if (static_cast<size_t>(results.size()) != outputs.size()) {
    return absl::DataLossError(absl::StrCat(
        "got ", results.size(), " outputs, asked for ", outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& data = results[i].data();
    if (data.size() != outputs[i].size) {
      return absl::DataLossError(absl::StrCat(
          "output '", outputs[i].tensor->name, "' has ", data.size(),
          " bytes, expected ", outputs[i].size));
    }
    std::copy(data.begin(), data.end(), static_cast<char*>(outputs[i].data));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorSource> FromProto(const v1::TensorData& data) {
  TensorSource out{.id = data.id()};
  switch (data.source_case()) {
    case v1::TensorData::kData:
      out.is_inline = true;
      out.bytes = data.data();
      return out;
    case v1::TensorData::kRef:
      out.buffer = data.ref().buffer();
      out.offset = data.ref().offset();
      return out;
    default:
      return absl::InvalidArgumentError("neither data nor ref");
  }
}

std::string& AppendOutput(
    uint32_t id, size_t bytes,
    google::protobuf::RepeatedPtrField<v1::TensorData>& outputs) {
  v1::TensorData* out = outputs.Add();
  out->set_id(id);
  std::string* data = out->mutable_data();
  data->resize(bytes);
  return *data;
}

}  // namespace tessera::wire
