// The op conformance suite over tensor-parallel meta devices: every case of
// AllCases() whose ops all have a split rule (backend/meta/tp_plan.h) runs
// on a meta device of 2 and of 4 CPU members (one thread each, the host
// communicator) with its inputs in each split state they can take (split
// along axis 0..3 as evenly as the extent allows with a non-empty slice per
// member, whole blocks for quantized types, PARTIAL for F32/F16/BF16
// inputs, and MIRRORED over 2 members) against the reference kernels.
// Cases with an op that has no rule are left out (the device does not
// support them; a scheduler places them elsewhere); every layout of the
// others must compute and match.

#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backend/comm/host_communicator.h"
#include "backend/cpu/cpu_registry.h"
#include "backend/meta/meta_device.h"
#include "backend/meta/split_state.h"
#include "backend/meta/tp_plan.h"
#include "backend/registry.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "tests/conformance/cases.h"
#include "tests/conformance/runner.h"

namespace tessera::conformance {
namespace {

// The state every input of a run is asked to take; an input it does not
// fit stays MIRRORED.
constexpr SplitAxis kInputStates[] = {
    SplitAxis::kMirrored, SplitAxis::kAxis0, SplitAxis::kAxis1,
    SplitAxis::kAxis2,    SplitAxis::kAxis3, SplitAxis::kPartial,
};
constexpr int kMemberCounts[] = {2, 4};

// `want` for `t` over `n` members when it fits, else nullopt.
std::optional<SplitState> StateFor(const Tensor& t, SplitAxis want, int n) {
  SplitState state;
  if (want == SplitAxis::kMirrored || want == SplitAxis::kPartial) {
    state.axis = want;
  } else {
    const int axis = static_cast<int>(want);
    // Every member gets a non-empty slice.
    if (t.ne[axis] < n || t.NumElements() == 0 || !t.IsContiguous()) {
      return std::nullopt;
    }
    absl::StatusOr<SplitState> even = SplitState::Even(
        axis, t.ne[axis], n, axis == 0 ? Traits(t.type).block_size : 1);
    if (!even.ok()) return std::nullopt;
    state = *std::move(even);
  }
  if (!ValidateSplit(state, t, n).ok()) return std::nullopt;
  return state;
}

// A meta device over `n` CPU members whose inputs take `want`.
struct MetaOver {
  Registry registry;
  std::unique_ptr<MetaDevice> meta;

  MetaOver(int n, SplitAxis want) {
    EXPECT_TRUE(AddCpuDevices(n, 1, registry).ok());
    std::vector<Device*> members(registry.devices().begin(),
                                 registry.devices().end());
    auto comm = HostCommunicator::Create(members);
    EXPECT_TRUE(comm.ok()) << comm.status();
    meta = MetaDevice::Create(
               absl::StrCat("tp", n), members, *std::move(comm),
               [want, n](const Tensor& t) {
                 return StateFor(t, want, n).value_or(SplitState::Mirrored());
               })
               .value();
  }
};

// Whether every op of `op_case` has a split rule, and whether any of its
// inputs takes `want` over `n` members (else the run would repeat the
// MIRRORED one). Also collects the case's ops.
struct CaseInfo {
  bool all_ruled = true;
  bool takes_state = false;
  std::vector<Op> ops;
};
CaseInfo Inspect(const OpCase& op_case, SplitAxis want, int n) {
  CaseInfo info;
  Context ctx;
  absl::StatusOr<Tensor*> out = op_case.build(ctx);
  Graph graph;
  if (!out.ok() || !graph.Expand(*out).ok()) return {.all_ruled = false};
  for (const Tensor* node : graph.nodes()) {
    info.all_ruled = info.all_ruled && HasSplitRule(*node);
    info.ops.push_back(node->op);
  }
  for (const Tensor* leaf : graph.leafs()) {
    std::optional<SplitState> s = StateFor(*leaf, want, n);
    info.takes_state = info.takes_state || (s.has_value() && s->axis == want);
  }
  return info;
}

struct Param {
  int n;
  SplitAxis state;
  const OpCase* op_case;
  uint32_t seed;
};

const std::vector<OpCase>& Cases() {
  static const std::vector<OpCase>* const cases =
      new std::vector<OpCase>(AllCases());
  return *cases;
}

std::vector<Param> Params() {
  std::vector<Param> params;
  const std::vector<OpCase>& cases = Cases();
  for (int n : kMemberCounts) {
    for (SplitAxis state : kInputStates) {
      for (size_t c = 0; c < cases.size(); ++c) {
        const CaseInfo info = Inspect(cases[c], state, n);
        if (!info.all_ruled) continue;
        if (state != SplitAxis::kMirrored && !info.takes_state) continue;
        // Whole inputs over 4 members take the rules' paths they take
        // over 2.
        if (state == SplitAxis::kMirrored && n != kMemberCounts[0]) continue;
        params.push_back({n, state, &cases[c], static_cast<uint32_t>(c)});
      }
    }
  }
  return params;
}

// The meta device of `n` members whose inputs take `state`; one per pair,
// built on first use, never destroyed.
MetaDevice& DeviceFor(int n, SplitAxis state) {
  static auto* const devices = [] {
    auto* d = new std::vector<std::unique_ptr<MetaOver>>;
    for (int count : kMemberCounts) {
      for (SplitAxis s : kInputStates) {
        d->push_back(std::make_unique<MetaOver>(count, s));
      }
    }
    return d;
  }();
  size_t i = 0;
  while (kMemberCounts[i / std::size(kInputStates)] != n ||
         kInputStates[i % std::size(kInputStates)] != state) {
    ++i;
  }
  return *(*devices)[i]->meta;
}

class MetaConformanceTest : public testing::TestWithParam<Param> {};

TEST_P(MetaConformanceTest, MatchesReference) {
  const Param& p = GetParam();
  const absl::Status status =
      RunCase(*p.op_case, DeviceFor(p.n, p.state), p.seed);
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(MetaConformance, MetaConformanceTest,
                         testing::ValuesIn(Params()),
                         [](const testing::TestParamInfo<Param>& info) {
                           return absl::StrCat(
                               "tp", info.param.n, "_",
                               std::string(SplitAxisName(info.param.state)),
                               "_", SanitizedName(info.param.op_case->name));
                         });

// Every op with a split rule is in some case that runs over members with
// an input split along an axis, and some ops run with PARTIAL inputs.
TEST(MetaConformanceCoverageTest, EveryOpWithARuleRuns) {
  absl::flat_hash_set<Op> split;
  int partial_runs = 0;
  for (const Param& p : Params()) {
    if (p.state == SplitAxis::kPartial) ++partial_runs;
    if (p.state == SplitAxis::kMirrored || p.state == SplitAxis::kPartial) {
      continue;
    }
    for (Op op : Inspect(*p.op_case, p.state, p.n).ops) split.insert(op);
  }
  for (int op = 0; op < kOpCount; ++op) {
    Tensor node;
    node.op = static_cast<Op>(op);
    if (node.op == Op::kNone || !HasSplitRule(node)) continue;
    EXPECT_TRUE(split.contains(node.op)) << OpName(node.op);
  }
  EXPECT_GT(partial_runs, 0);
}

}  // namespace
}  // namespace tessera::conformance
