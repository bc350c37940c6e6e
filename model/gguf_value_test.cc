#include "model/gguf_value.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(GgufValueTest, AlternativesFollowTheFileFormat) {
  EXPECT_EQ(TypeOf(GgufValue(uint8_t{1})), GgufValueType::kUint8);
  EXPECT_EQ(TypeOf(GgufValue(int16_t{1})), GgufValueType::kInt16);
  EXPECT_EQ(TypeOf(GgufValue(1.0f)), GgufValueType::kFloat32);
  EXPECT_EQ(TypeOf(GgufValue(true)), GgufValueType::kBool);
  EXPECT_EQ(TypeOf(GgufValue(std::string("x"))), GgufValueType::kString);
  EXPECT_EQ(TypeOf(GgufValue(GgufArray(std::vector<float>{}))),
            GgufValueType::kArray);
  EXPECT_EQ(TypeOf(GgufValue(uint64_t{1})), GgufValueType::kUint64);
  EXPECT_EQ(TypeOf(GgufValue(1.0)), GgufValueType::kFloat64);
  EXPECT_EQ(GgufTypeOf<int64_t>::value, GgufValueType::kInt64);
}

TEST(GgufValueTest, ArrayElementTypes) {
  EXPECT_EQ(ElementTypeOf(GgufArray(std::vector<bool>{true})),
            GgufValueType::kBool);
  EXPECT_EQ(ElementTypeOf(GgufArray(std::vector<std::string>{"a", "b"})),
            GgufValueType::kString);
  EXPECT_EQ(ElementTypeOf(GgufArray(std::vector<uint64_t>{})),
            GgufValueType::kUint64);
  EXPECT_EQ(ElementTypeOf(GgufArray(std::vector<double>{})),
            GgufValueType::kFloat64);
  EXPECT_EQ(ArrayLength(GgufArray(std::vector<std::string>{"a", "b"})), 2u);
}

TEST(GgufValueTest, NamesAndSizes) {
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kUint32), "uint32");
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kFloat64), "float64");
  EXPECT_EQ(GgufValueTypeName(static_cast<GgufValueType>(13)), "invalid");
  EXPECT_EQ(GgufValueTypeSize(GgufValueType::kBool), 1u);
  EXPECT_EQ(GgufValueTypeSize(GgufValueType::kInt64), 8u);
  EXPECT_EQ(GgufValueTypeSize(GgufValueType::kString), 0u);
  EXPECT_FALSE(IsValidGgufValueType(13));
  EXPECT_TRUE(IsValidGgufValueType(12));
}

}  // namespace
}  // namespace tessera
