#ifndef TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_
#define TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_

// GraphDefs written field by field, as a client of the protocol alone would.

#include <cstdint>
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

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_RAW_GRAPH_H_
