#include "proto/device_codec.h"

#include "gtest/gtest.h"

namespace tessera::wire {
namespace {

TEST(DeviceCodecTest, DeviceRoundTrip) {
  DeviceDescription device;
  device.props = {.name = "cuda1",
                  .description = "NVIDIA H100",
                  .type = DeviceType::kGpu,
                  .memory_free = 1 << 20,
                  .memory_total = 2 << 20,
                  .caps = {.async = true,
                           .events = true,
                           .host_buffer = true,
                           .buffer_from_host_ptr = false}};
  device.buffer_types = {
      {.name = "CUDA1", .alignment = 256, .max_size = 1 << 30},
      {.name = "CUDA_Host", .alignment = 64, .max_size = 1 << 20,
       .is_host = true}};
  absl::StatusOr<DeviceDescription> back = FromProto(ToProto(device));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->props.name, device.props.name);
  EXPECT_EQ(back->props.description, device.props.description);
  EXPECT_EQ(back->props.type, device.props.type);
  EXPECT_EQ(back->props.memory_free, device.props.memory_free);
  EXPECT_EQ(back->props.memory_total, device.props.memory_total);
  EXPECT_TRUE(back->props.caps.async);
  EXPECT_TRUE(back->props.caps.events);
  EXPECT_TRUE(back->props.caps.host_buffer);
  EXPECT_FALSE(back->props.caps.buffer_from_host_ptr);
  EXPECT_EQ(back->buffer_types, device.buffer_types);
  EXPECT_TRUE(back->props.members.empty());
}

TEST(DeviceCodecTest, MetaDeviceMembersRoundTrip) {
  DeviceDescription device;
  device.props = {.name = "tp0",
                  .type = DeviceType::kMeta,
                  .members = {"cpu0", "cpu1"}};
  absl::StatusOr<DeviceDescription> back = FromProto(ToProto(device));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->props.type, DeviceType::kMeta);
  EXPECT_EQ(back->props.members, (std::vector<std::string>{"cpu0", "cpu1"}));
}

TEST(DeviceCodecTest, TypesRoundTrip) {
  for (DeviceType type :
       {DeviceType::kCpu, DeviceType::kGpu, DeviceType::kRemote,
        DeviceType::kMeta}) {
    EXPECT_EQ(FromProto(ToProto(type)).value(), type);
  }
}

TEST(DeviceCodecTest, WireValuesAreStable) {
  EXPECT_EQ(ToProto(DeviceType::kCpu), 1);
  EXPECT_EQ(ToProto(DeviceType::kGpu), 2);
  EXPECT_EQ(ToProto(DeviceType::kRemote), 3);
  EXPECT_EQ(ToProto(DeviceType::kMeta), 4);
}

TEST(DeviceCodecTest, UnknownTypeIsInvalid) {
  v1::DeviceInfo info;
  info.set_name("x0");
  absl::StatusOr<DeviceDescription> device = FromProto(info);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device.status().message(), "device x0: type: unknown value 0");
}

}  // namespace
}  // namespace tessera::wire
