#include "model/ggml_type.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(GgmlTypeTest, TesseraTypesMapBothWays) {
  for (int i = 0; i < kTypeCount; ++i) {
    const Type type = static_cast<Type>(i);
    const int32_t id = GgmlTypeFromTessera(type);
    absl::StatusOr<Type> back = TesseraTypeFromGgml(id);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, type);
    // The layouts agree with tessera's own.
    const GgmlTypeLayout* layout = FindGgmlTypeLayout(id);
    ASSERT_NE(layout, nullptr);
    EXPECT_EQ(layout->block_size, Traits(type).block_size);
    EXPECT_EQ(layout->type_size, Traits(type).type_size);
    EXPECT_EQ(std::string(layout->name), std::string(Traits(type).name));
  }
}

TEST(GgmlTypeTest, IdsAreGgmls) {
  EXPECT_EQ(GgmlTypeFromTessera(Type::kF32), 0);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kF16), 1);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ4_0), 2);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ8_0), 8);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kI32), 26);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kBF16), 30);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ4_K), 12);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ5_K), 13);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ6_K), 14);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ4_1), 3);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ5_0), 6);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ5_1), 7);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ2_K), 10);
  EXPECT_EQ(GgmlTypeFromTessera(Type::kQ3_K), 11);
  EXPECT_EQ(*TesseraTypeFromGgml(kGgmlQ4_K), Type::kQ4_K);
  EXPECT_EQ(*TesseraTypeFromGgml(kGgmlQ5_K), Type::kQ5_K);
  EXPECT_EQ(*TesseraTypeFromGgml(kGgmlQ6_K), Type::kQ6_K);
  EXPECT_EQ(FindGgmlTypeLayout(kGgmlQ4_K)->type_size, 144u);
  EXPECT_EQ(FindGgmlTypeLayout(kGgmlQ5_K)->type_size, 176u);
  EXPECT_EQ(FindGgmlTypeLayout(kGgmlQ6_K)->type_size, 210u);
  EXPECT_EQ(FindGgmlTypeLayout(kGgmlQ6_K)->block_size, 256);
}

TEST(GgmlTypeTest, UnknownTypesAreReportedByNumber) {
  EXPECT_EQ(FindGgmlTypeLayout(99), nullptr);
  EXPECT_EQ(FindGgmlTypeLayout(-1), nullptr);
  EXPECT_EQ(GgmlTypeName(99), "ggml type 99");
  EXPECT_EQ(GgmlTypeName(kGgmlQ4_K), "q4_K (12)");
  constexpr int32_t kGgmlQ8_1 = 9;  // a type tessera does not have
  absl::StatusOr<Type> q81 = TesseraTypeFromGgml(kGgmlQ8_1);
  EXPECT_EQ(q81.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(q81.status().message(), "q8_1 (9) has no tessera type");
  EXPECT_EQ(TesseraTypeFromGgml(99).status().message(),
            "ggml type 99 has no tessera type");
}

TEST(GgmlTypeTest, NumBytes) {
  const std::vector<int64_t> ne = {64, 3};
  EXPECT_EQ(*GgmlNumBytes(kGgmlF32, ne), 64u * 3 * 4);
  EXPECT_EQ(*GgmlNumBytes(kGgmlQ8_0, ne), 2u * 3 * 34);
  EXPECT_EQ(*GgmlNumBytes(kGgmlF16, std::vector<int64_t>{}), 2u);
  // A scalar of a block type is not a whole block.
  EXPECT_FALSE(GgmlNumBytes(kGgmlQ4_0, std::vector<int64_t>{}).ok());
}

TEST(GgmlTypeTest, NumBytesRefusesBadShapes) {
  EXPECT_FALSE(GgmlNumBytes(kGgmlQ8_0, std::vector<int64_t>{33}).ok());
  EXPECT_FALSE(GgmlNumBytes(kGgmlF32, std::vector<int64_t>{-1}).ok());
  const int64_t big = int64_t{1} << 40;
  EXPECT_FALSE(GgmlNumBytes(kGgmlF32, std::vector<int64_t>{big, big}).ok());
  EXPECT_FALSE(GgmlNumBytes(99, std::vector<int64_t>{big, big}).ok());
  // Elements fit in int64, bytes do not.
  EXPECT_FALSE(
      GgmlNumBytes(kGgmlF32, std::vector<int64_t>{int64_t{1} << 62}).ok());
  // Unknown layouts have no size.
  EXPECT_EQ(*GgmlNumBytes(99, std::vector<int64_t>{5}), std::nullopt);
  // Zero elements are fine.
  EXPECT_EQ(*GgmlNumBytes(kGgmlF32, std::vector<int64_t>{0, big, big}), 0u);
}

}  // namespace
}  // namespace tessera
