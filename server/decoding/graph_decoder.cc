#include "server/decoding/graph_decoder.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/node_checks.h"
#include "graph/ops.h"
#include "server/decoding/split_tensor.h"

namespace tessera::server {

absl::StatusOr<Tensor*> DecodedGraph::Find(uint32_t id,
                                           absl::string_view what) const {
  auto it = by_id.find(id);
  if (it == by_id.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the graph has no tensor with id ", id));
  }
  return it->second;
}

// The codec maps the structure; the hooks resolve data refs against the
// session (keeping the buffers alive) and run ValidateNode. Their errors
// get the tensor's name from the codec.
absl::StatusOr<std::unique_ptr<DecodedGraph>> DecodeGraph(
    const v1::GraphDef& def, const BufferResolver& resolve,
    const DecodeLimits& limits) {
  auto out = std::make_unique<DecodedGraph>();
  wire::GraphHooks hooks;
  hooks.place_data = [&](Tensor& t, const v1::TensorRef& ref,
                         size_t bytes) -> absl::Status {
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = resolve(ref.buffer());
    if (!buffer.ok()) {
      return absl::Status(buffer.status().code(),
                          absl::StrCat("data: ", buffer.status().message()));
    }
    const uint64_t size = (*buffer)->size();
    if (ref.offset() > size || bytes > size - ref.offset()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data of ", bytes, " bytes at offset ", ref.offset(),
                       " is outside buffer ", ref.buffer(), " of ", size,
                       " bytes"));
    }
    if (const size_t align = TypeAlignment(t.type); ref.offset() % align != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data at offset ", ref.offset(), " of buffer ",
                       ref.buffer(), " is not a multiple of ", align,
                       ", the alignment of ",
                       std::string(TypeName(t.type))));
    }
    t.buffer = buffer->get();
    t.data = static_cast<char*>((*buffer)->base()) + ref.offset();
    out->buffers.push_back(*std::move(buffer));
    return absl::OkStatus();
  };
  hooks.place_split = PlaceSplit;
  hooks.validate = [](const Tensor& t) -> absl::Status {
    absl::Status s = ValidateNode(t);
    if (s.ok()) s = CheckNodeShape(t, "");
    if (s.ok()) s = CheckAlignment(t);
    if (!s.ok()) return absl::InvalidArgumentError(s.message());
    return absl::OkStatus();
  };
  TESSERA_ASSIGN_OR_RETURN(wire::DecodedGraphDef decoded,
                           wire::FromProto(def, limits, hooks, *out->ctx));
  out->graph = std::move(decoded.graph);
  out->by_id = std::move(decoded.by_id);
  out->inputs = std::move(decoded.inputs);
  out->members = std::move(decoded.members);
  return out;
}

}  // namespace tessera::server
