#include "backend/assembly/device_spec.h"

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/meta/meta_device.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::vector<std::string> Names(const Registry& registry) {
  std::vector<std::string> names;
  for (Device* device : registry.devices()) names.push_back(device->name());
  return names;
}

TEST(RegistryTest, CpuSpecAddsOneDeviceWithTheThreads) {
  Registry registry;
  ASSERT_TRUE(AddDevices("cpu", 3, registry).ok());
  ASSERT_EQ(Names(registry), std::vector<std::string>{"cpu0"});
  auto* cpu = dynamic_cast<CpuDevice*>(registry.devices()[0]);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->n_threads(), 3);
  const DeviceProps props = cpu->Props();
  EXPECT_EQ(props.type, DeviceType::kCpu);
  EXPECT_TRUE(props.caps.async);
  EXPECT_TRUE(props.caps.events);
  EXPECT_FALSE(props.caps.host_buffer);
  EXPECT_GT(props.memory_total, 0u);
  EXPECT_EQ(DeviceTypeName(props.type), "cpu");
}

TEST(RegistryTest, CpuCountSpecAddsNumberedDevices) {
  Registry registry;
  ASSERT_TRUE(AddDevices("cpu:4", 1, registry).ok());
  EXPECT_EQ(Names(registry),
            (std::vector<std::string>{"cpu0", "cpu1", "cpu2", "cpu3"}));
  EXPECT_EQ(registry.OfType(DeviceType::kCpu).size(), 4u);
  EXPECT_TRUE(registry.OfType(DeviceType::kGpu).empty());
  // Each is its own device with its own memory accounting.
  EXPECT_NE(&registry.devices()[0]->buffer_type(),
            &registry.devices()[1]->buffer_type());
}

TEST(RegistryTest, ItemsCombineAndNumberingContinues) {
  Registry registry;
  ASSERT_TRUE(AddDevices(" cpu , cpu:2", 1, registry).ok());
  ASSERT_TRUE(AddDevices("cpu", 1, registry).ok());
  EXPECT_EQ(Names(registry),
            (std::vector<std::string>{"cpu0", "cpu1", "cpu2", "cpu3"}));
}

TEST(RegistryTest, CudaAndAllSpecs) {
  // "cuda" with no GPU backend or no GPU adds nothing and is not an error.
  Registry cuda;
  ASSERT_TRUE(AddDevices("cuda", 1, cuda).ok());
  EXPECT_TRUE(cuda.OfType(DeviceType::kCpu).empty());
  // "all" always includes one CPU device.
  Registry all;
  ASSERT_TRUE(AddDevices("all", 2, all).ok());
  ASSERT_EQ(all.OfType(DeviceType::kCpu).size(), 1u);
  EXPECT_EQ(all.OfType(DeviceType::kCpu)[0]->name(), "cpu0");
}

TEST(RegistryTest, BadSpecsAreInvalidAndAddNothing) {
  for (const char* spec :
       {"", "gpu", "CPU", "cpu:", "cpu:0", "cpu:-1", "cpu:x", "cpu:2x",
        "cpu: 2", "cpu:100000", "cpu,,cpu", "cpu,", "cpu:2,tpu"}) {
    Registry registry;
    const absl::Status status = AddDevices(spec, 1, registry);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << '"' << spec << "\": " << status;
    EXPECT_TRUE(registry.devices().empty()) << spec;
  }
  Registry registry;
  EXPECT_EQ(AddDevices("cpu", 0, registry).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.devices().empty());
}

TEST(RegistryTest, FindAndOfType) {
  Registry registry;
  ASSERT_TRUE(AddDevices("cpu:2", 1, registry).ok());
  absl::StatusOr<Device*> found = registry.Find("cpu1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, registry.devices()[1]);
  EXPECT_EQ(registry.Find("cpu2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Find("").status().code(), absl::StatusCode::kNotFound);
  const std::vector<Device*> cpus = registry.OfType(DeviceType::kCpu);
  ASSERT_EQ(cpus.size(), 2u);
  EXPECT_EQ(cpus[0]->name(), "cpu0");
  EXPECT_EQ(cpus[1]->name(), "cpu1");
  EXPECT_TRUE(registry.OfType(DeviceType::kRemote).empty());
}

TEST(RegistryTest, RejectsDuplicateNamesAndNull) {
  Registry registry;
  ASSERT_TRUE(
      registry.Add(std::make_unique<CpuDevice>(CpuDeviceOptions{.name = "x"}))
          .ok());
  EXPECT_EQ(
      registry.Add(std::make_unique<CpuDevice>(CpuDeviceOptions{.name = "x"}))
          .code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Add(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.devices().size(), 1u);

  // A spec colliding with a device added by hand: one CPU device exists,
  // so the next is numbered cpu1.
  Registry by_hand;
  ASSERT_TRUE(
      by_hand.Add(std::make_unique<CpuDevice>(CpuDeviceOptions{.name = "cpu1"}))
          .ok());
  EXPECT_EQ(AddDevices("cpu", 1, by_hand).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(RegistryTest, MetaSpecAddsMetaDeviceOverNamedMembers) {
  Registry registry;
  ASSERT_TRUE(AddDevices("tp0=meta(cpu0, cpu1), cpu:3, tp1=meta(cpu2,cpu1)", 1,
                         registry)
                  .ok());
  EXPECT_EQ(Names(registry),
            (std::vector<std::string>{"cpu0", "cpu1", "cpu2", "tp0", "tp1"}));
  auto* tp0 = dynamic_cast<MetaDevice*>(registry.Find("tp0").value());
  ASSERT_NE(tp0, nullptr);
  ASSERT_EQ(tp0->size(), 2);
  EXPECT_EQ(&tp0->member(0), registry.Find("cpu0").value());
  EXPECT_EQ(&tp0->member(1), registry.Find("cpu1").value());
  const DeviceProps props = registry.Find("tp1").value()->Props();
  EXPECT_EQ(props.type, DeviceType::kMeta);
  EXPECT_EQ(props.members, (std::vector<std::string>{"cpu2", "cpu1"}));
  EXPECT_TRUE(registry.Find("cpu0").value()->Props().members.empty());
}

TEST(RegistryTest, BadMetaSpecsAreInvalid) {
  struct Case {
    const char* spec;
    const char* words;
  };
  for (const Case& c : {
           Case{"cpu:2,tp0=meta(cpu0)", "1 members, want 2"},
           Case{"cpu:2,tp0=meta(cpu0,cpu0)", "cpu0 is listed twice"},
           Case{"cpu:2,tp0=meta(cpu0,cpu7)", "no device named \"cpu7\""},
           Case{"cpu:2,tp0=mesh(cpu0,cpu1)", "not meta(...)"},
           Case{"cpu:2,tp0=meta(cpu0,)", "member name is empty"},
           Case{"cpu:2,=meta(cpu0,cpu1)", "the name is not"},
           Case{"cpu:2,cpu0=meta(cpu0,cpu1)", "a device of that name exists"},
           Case{"cpu:4,tp0=meta(cpu0,cpu1),tp1=meta(tp0,cpu2)",
                "not all of one kind"},
       }) {
    SCOPED_TRACE(c.spec);
    Registry registry;
    absl::Status s = AddDevices(c.spec, 1, registry);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.words), std::string::npos) << s;
  }
  // A malformed meta item adds nothing.
  Registry registry;
  EXPECT_FALSE(AddDevices("cpu:2,tp0=meta(cpu0", 1, registry).ok());
  EXPECT_TRUE(registry.devices().empty());
}

}  // namespace
}  // namespace tessera
