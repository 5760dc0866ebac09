// The block pool under weft::Buffer (src/core/buffer_pool.hpp): large blocks are huge-page aligned, freed
// large blocks are reused for the next allocation of the same size, small ones never are, and the cap
// bounds what is kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/buffer_pool.hpp"

namespace weft::detail {
namespace {

std::uintptr_t address(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(BufferPool, LargeBlocksAreHugePageAlignedAndSmallOnes64ByteAligned) {
  constexpr std::size_t kLarge = std::size_t{6} << 20, kSmall = 4096;
  std::byte* large = acquire_block(kLarge);
  std::byte* small = acquire_block(kSmall);
  EXPECT_EQ(address(large) % (std::size_t{2} << 20), 0u);
  EXPECT_EQ(address(small) % 64, 0u);
  std::memset(large, 1, kLarge);  // the whole block is usable
  release_block(large, kLarge);
  release_block(small, kSmall);
}

TEST(BufferPool, AFreedLargeBlockServesTheNextAllocationOfItsSize) {
  constexpr std::size_t kBytes = (std::size_t{3} << 20) + 64 * 7;  // an odd size no other test uses
  std::byte* first = acquire_block(kBytes);
  release_block(first, kBytes);
  std::byte* second = acquire_block(kBytes);
  EXPECT_EQ(first, second);
  // A different size does not take it.
  std::byte* other = acquire_block(kBytes + 64);
  EXPECT_NE(other, second);
  release_block(other, kBytes + 64);
  release_block(second, kBytes);
}

TEST(BufferPool, CapacityScalesWithMemoryWithinItsBounds) {
  EXPECT_GE(block_pool_capacity(), std::size_t{256} << 20);
  EXPECT_LE(block_pool_capacity(), std::size_t{2} << 30);
}

TEST(BufferPool, BlocksBeyondTheCapGoBackToTheSystem) {
  // Three blocks of more than a third of the cap cannot all be kept: releasing them caches exactly two.
  const std::size_t bytes = (block_pool_capacity() / 3 + (std::size_t{1} << 20)) / 64 * 64;
  const std::size_t before = block_pool_cached();
  ASSERT_LE(before + 2 * bytes, block_pool_capacity()) << "an earlier test left too much cached";
  std::byte* blocks[3];
  for (auto& b : blocks) b = acquire_block(bytes);
  for (auto* b : blocks) release_block(b, bytes);
  EXPECT_EQ(block_pool_cached(), before + 2 * bytes);
  // Both cached blocks serve the next two acquisitions of that size.
  std::byte* again[2];
  for (auto& b : again) b = acquire_block(bytes);
  EXPECT_EQ(block_pool_cached(), before);
  for (auto* b : again) release_block(b, bytes);
}

}  // namespace
}  // namespace weft::detail
