#ifndef TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_
#define TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_

// GraphDefs and Compute requests written field by field, as a client of the
// protocol alone would.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/tessera.pb.h"

namespace tessera::testing {

inline constexpr int32_t kRawF32 = 0;
inline constexpr int32_t kRawOpNone = 0;
inline constexpr int32_t kRawOpAdd = 4;
inline constexpr int32_t kRawOpMulMat = 19;

// Appends an F32 tensor `id` (named "t<id>") with `op`, sources and shape.
inline v1::TensorDef* AddF32Tensor(v1::GraphDef& g, uint32_t id, int32_t op,
                                   const std::vector<int64_t>& src,
                                   const std::vector<int64_t>& ne) {
  v1::TensorDef* t = g.add_tensors();
  t->set_id(id);
  t->set_type(kRawF32);
  for (int64_t n : ne) t->add_ne(n);
  t->set_op(op);
  for (int64_t s : src) t->add_src(s);
  t->set_name(absl::StrCat("t", id));
  return t;
}

// A Compute of `g` with every leaf given inline as zeros, asking for tensor
// `output`.
inline v1::ComputeRequest WithZeroInputs(const std::string& session,
                                         const v1::GraphDef& g,
                                         uint32_t output) {
  v1::ComputeRequest request;
  request.set_session(session);
  *request.mutable_graph() = g;
  for (const v1::TensorDef& t : g.tensors()) {
    if (t.op() != kRawOpNone) continue;
    int64_t n = 1;
    for (int64_t d : t.ne()) n *= d;
    v1::TensorData* in = request.add_inputs();
    in->set_id(t.id());
    in->set_data(std::string(4 * n, '\0'));
  }
  request.add_outputs(output);
  return request;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_
