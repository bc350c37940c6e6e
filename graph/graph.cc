#include "graph/graph.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

// Iterative depth-first search (graphs from the wire may be deep):
//   1. Each stack frame holds a tensor and the next dependency to visit:
//      src[0..kMaxSrc-1], then view_src.
//   2. A dependency already in the graph or finished in this call is skipped;
//      one still on the stack closes a cycle.
//   3. A tensor is finished (appended to `order`) after all its
//      dependencies, so `order` lists sources first.
//   4. Only when the whole expansion succeeds is `order` committed, so an
//      error leaves the graph unchanged.
absl::Status Graph::Expand(Tensor* t) {
  if (t == nullptr) {
    return absl::InvalidArgumentError("[Graph::Expand] tensor is null");
  }
  if (visited_.contains(t)) return absl::OkStatus();

  struct Frame {
    Tensor* tensor;
    int next;  // 0..kMaxSrc-1: src[next]; kMaxSrc: view_src; then done
  };
  const size_t existing = nodes_.size() + leafs_.size();
  std::vector<Frame> stack;
  std::vector<Tensor*> order;
  absl::flat_hash_set<const Tensor*> on_stack;
  absl::flat_hash_set<const Tensor*> done;

  auto push = [&](Tensor* x) -> absl::Status {
    if (existing + order.size() + stack.size() + 1 > max_nodes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("[Graph::Expand] expanding ", Describe(*t),
                       " needs more than ", max_nodes_, " nodes and leafs"));
    }
    stack.push_back({x, 0});
    on_stack.insert(x);
    return absl::OkStatus();
  };

  if (absl::Status s = push(t); !s.ok()) return s;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next > kMaxSrc) {
      on_stack.erase(f.tensor);
      done.insert(f.tensor);
      order.push_back(f.tensor);
      stack.pop_back();
      continue;
    }
    Tensor* dep = f.next < kMaxSrc ? f.tensor->src[f.next] : f.tensor->view_src;
    ++f.next;
    if (dep == nullptr || visited_.contains(dep) || done.contains(dep)) {
      continue;
    }
    if (on_stack.contains(dep)) {
      return absl::InvalidArgumentError(
          absl::StrCat("[Graph::Expand] cycle through ", Describe(*dep), " (",
                       std::string(OpName(dep->op)), ")"));
    }
    if (absl::Status s = push(dep); !s.ok()) return s;
  }

  for (Tensor* x : order) {
    visited_.insert(x);
    if (x->op == Op::kNone) {
      leafs_.push_back(x);
    } else {
      nodes_.push_back(x);
    }
  }
  return absl::OkStatus();
}

void Graph::Clear() {
  nodes_.clear();
  leafs_.clear();
  visited_.clear();
}

bool IsViewOp(Op op) {
  switch (op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return true;
    default:
      return false;
  }
}

}  // namespace tessera
