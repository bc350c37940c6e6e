// The op conformance suite: every case of AllCases() on every device that
// backend/assembly/device_spec.h's AddDevices creates for the specs below, against the
// reference kernels. A new device type is covered by adding it to
// AddDevices (and, if it needs a spec of its own, to kSpecs).

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/simd_level.h"
#include "backend/device.h"
#include "backend/assembly/device_spec.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"
#include "tests/conformance/cases.h"
#include "tests/conformance/runner.h"

namespace tessera::conformance {
namespace {

struct Spec {
  const char* spec;
  int cpu_threads;
};
// One CPU device with 2 threads (rows of each op split over threads), four
// CPU devices with 1 thread each, and every GPU (none here is not an error).
constexpr Spec kSpecs[] = {{"cpu", 2}, {"cpu:4", 1}, {"cuda", 1}};

// The devices of all specs, each in the registry of its own spec (the specs'
// device names overlap), then one 2-thread CPU device per SIMD level this
// machine supports, so that every kernel path is tested, not only the best.
// Built on first use, never destroyed.
struct Suite {
  std::vector<std::unique_ptr<Registry>> registries;
  std::vector<std::string> labels;  // one per registry
  std::vector<absl::Status> errors;  // one per spec
  std::vector<OpCase> cases;
};

const Suite& GetSuite() {
  static const Suite* const suite = [] {
    auto* s = new Suite;
    for (const Spec& spec : kSpecs) {
      auto registry = std::make_unique<Registry>();
      s->errors.push_back(AddDevices(spec.spec, spec.cpu_threads, *registry));
      s->registries.push_back(std::move(registry));
      s->labels.push_back(SanitizedName(spec.spec));
    }
    for (SimdLevel level : SupportedSimdLevels()) {
      auto registry = std::make_unique<Registry>();
      CpuDeviceOptions options;
      options.name = "cpu0";
      options.n_threads = 2;
      options.max_simd = level;
      s->errors.push_back(
          registry->Add(std::make_unique<CpuDevice>(std::move(options))));
      s->registries.push_back(std::move(registry));
      s->labels.push_back(absl::StrCat("simd_", std::string(SimdLevelName(level))));
    }
    s->cases = AllCases();
    return s;
  }();
  return *suite;
}

struct Param {
  std::string label;  // spec and device: "cpu_4_cpu2"
  Device* device;
  const OpCase* op_case;
  uint32_t seed;
};

// Every case on every device; a spec with several devices of one kind (cpu:4)
// spreads the cases over them round-robin, so each device runs a quarter and
// every case runs once per spec.
std::vector<Param> Params() {
  const Suite& suite = GetSuite();
  std::vector<Param> params;
  for (size_t s = 0; s < suite.registries.size(); ++s) {
    absl::Span<Device* const> devices = suite.registries[s]->devices();
    if (devices.empty()) continue;
    for (size_t c = 0; c < suite.cases.size(); ++c) {
      Device* device = devices[c % devices.size()];
      params.push_back(Param{
          absl::StrCat(suite.labels[s], "_", device->name()),
          device, &suite.cases[c], static_cast<uint32_t>(c)});
    }
  }
  return params;
}

class ConformanceTest : public testing::TestWithParam<Param> {};

TEST_P(ConformanceTest, MatchesReference) {
  const Param& p = GetParam();
  const absl::Status status = RunCase(*p.op_case, *p.device, p.seed);
  if (absl::IsUnimplemented(status)) GTEST_SKIP() << status.message();
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Conformance, ConformanceTest,
                         testing::ValuesIn(Params()),
                         [](const testing::TestParamInfo<Param>& info) {
                           return absl::StrCat(
                               info.param.label, "_",
                               SanitizedName(info.param.op_case->name));
                         });

TEST(ConformanceDevicesTest, SpecsAddDevices) {
  const Suite& suite = GetSuite();
  for (size_t s = 0; s < suite.errors.size(); ++s) {
    EXPECT_TRUE(suite.errors[s].ok())
        << suite.labels[s] << ": " << suite.errors[s];
  }
  EXPECT_EQ(suite.registries[0]->devices().size(), 1u);
  EXPECT_EQ(suite.registries[1]->devices().size(), 4u);
}

// Each SIMD level's device runs that level's kernels.
TEST(ConformanceDevicesTest, SimdDevicesUseTheirLevel) {
  const Suite& suite = GetSuite();
  const std::vector<SimdLevel> levels = SupportedSimdLevels();
  ASSERT_EQ(suite.registries.size(), std::size(kSpecs) + levels.size());
  for (size_t i = 0; i < levels.size(); ++i) {
    const Registry& registry = *suite.registries[std::size(kSpecs) + i];
    ASSERT_EQ(registry.devices().size(), 1u);
    const auto* cpu = dynamic_cast<const CpuDevice*>(registry.devices()[0]);
    ASSERT_NE(cpu, nullptr);
    EXPECT_EQ(cpu->simd_level(), levels[i]);
  }
}

TEST(ConformanceCasesTest, EveryCaseBuilds) {
  for (const OpCase& c : AllCases()) {
    Context ctx;
    absl::StatusOr<Tensor*> out = c.build(ctx);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    Graph graph;
    EXPECT_TRUE(graph.Expand(*out).ok()) << c.name;
  }
}

TEST(ConformanceCasesTest, NamesAreUnique) {
  absl::flat_hash_set<std::string> names;
  for (const OpCase& c : AllCases()) {
    const std::string name = SanitizedName(c.name);
    EXPECT_FALSE(name.empty()) << c.name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate case " << name;
  }
}

// A new op, unary op or GLU op without a case fails here.
TEST(ConformanceCasesTest, EveryOpHasACase) {
  absl::flat_hash_set<int> ops;
  absl::flat_hash_set<int> unary_ops;
  absl::flat_hash_set<int> glu_ops;
  for (const OpCase& c : AllCases()) {
    Context ctx;
    absl::StatusOr<Tensor*> out = c.build(ctx);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    Graph graph;
    ASSERT_TRUE(graph.Expand(*out).ok()) << c.name;
    for (const Tensor* leaf : graph.leafs())
      ops.insert(static_cast<int>(leaf->op));
    for (const Tensor* node : graph.nodes()) {
      ops.insert(static_cast<int>(node->op));
      if (node->op == Op::kUnary) unary_ops.insert(node->op_params[0]);
      if (node->op == Op::kGlu) glu_ops.insert(node->op_params[0]);
    }
  }
  for (int op = 0; op < kOpCount; ++op) {
    EXPECT_TRUE(ops.contains(op))
        << "no case for " << OpName(static_cast<Op>(op));
  }
  for (int op = 0; op < kUnaryOpCount; ++op) {
    EXPECT_TRUE(unary_ops.contains(op))
        << "no case for " << UnaryOpName(static_cast<UnaryOp>(op));
  }
  for (int op = 0; op < kGluOpCount; ++op) {
    EXPECT_TRUE(glu_ops.contains(op))
        << "no case for " << GluOpName(static_cast<GluOp>(op));
  }
}

}  // namespace
}  // namespace tessera::conformance
