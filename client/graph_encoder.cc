#include "client/graph_encoder.h"

#include <optional>

#include "base/status_macros.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"

namespace tessera::client {

absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, Client& client,
                                         bool require_data) {
  return wire::ToProto(
      graph,
      [&](const Tensor& t) -> absl::StatusOr<std::optional<v1::TensorRef>> {
        if (t.data == nullptr) {
          if (require_data) return wire::EncodeError(t, "is not allocated");
          return std::nullopt;
        }
        auto* remote = dynamic_cast<RemoteBuffer*>(t.buffer);
        if (remote == nullptr || &remote->client() != &client) {
          return wire::EncodeError(
              t, "its data is not in a buffer of this client's session");
        }
        TESSERA_ASSIGN_OR_RETURN(v1::TensorRef ref, remote->RefOf(t));
        return ref;
      },
      [](const Tensor& t) -> absl::StatusOr<std::optional<SplitState>> {
        auto& device = static_cast<RemoteDevice&>(t.buffer->type().device());
        return device.SplitOf(t, *t.buffer);
      });
}

}  // namespace tessera::client
