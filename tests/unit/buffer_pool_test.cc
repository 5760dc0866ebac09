// The block pool under weft::Buffer (src/array/buffer_pool.hpp): large blocks are huge-page aligned, freed
// large blocks are reused for the next allocation of the same size (the owner's own first), the cap bounds
// what is kept, and smaller blocks freed on a worker thread do not fault their pages in again.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include <sys/resource.h>

#include "../support/replica_faults.hpp"
#include "array/buffer_pool.hpp"
#include "weft/memory.hpp"

namespace weft::detail {
namespace {
namespace buffer_pool_test {

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

TEST(BufferPool, AnOwnerGetsItsOwnFreedBlockBackFirst) {
  constexpr std::size_t kBytes = (std::size_t{1} << 20) + 64 * 5;  // an odd size no other test uses
  int device_a = 0, device_b = 0, device_c = 0;                     // owners: any distinct addresses
  std::byte* a = acquire_block(kBytes, &device_a);
  std::byte* b = acquire_block(kBytes, &device_b);
  ASSERT_NE(a, b);
  release_block(b, kBytes, &device_b);
  release_block(a, kBytes, &device_a);  // a is the newest
  // Each owner gets its own block back, the owner of the oldest asking first.
  std::byte* again_b = acquire_block(kBytes, &device_b);
  std::byte* again_a = acquire_block(kBytes, &device_a);
  EXPECT_EQ(again_b, b);
  EXPECT_EQ(again_a, a);
  // An owner with no block of its own takes the newest free one.
  release_block(again_a, kBytes, &device_a);
  release_block(again_b, kBytes, &device_b);
  std::byte* newest = acquire_block(kBytes, &device_c);
  EXPECT_EQ(newest, b);
  std::byte* rest = acquire_block(kBytes, &device_c);
  EXPECT_EQ(rest, a);
  release_block(newest, kBytes, &device_c);
  release_block(rest, kBytes, &device_c);
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

std::int64_t minor_faults_of_this_thread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Eight 96 KiB blocks (below the pool's 128 KiB: from malloc) allocated, written and freed in a loop on a
// thread other than main, as fiber workers do. With glibc's defaults freed blocks went back to the system
// (trimmed from the top of the thread's heap, or munmap'ed) and the next round faulted all their pages in
// again: most of such a loop's time (at 512 KiB, before the pool took those, ~1000 faults a round).
// weft::tune_process_malloc() sets malloc up to keep them, for a program that owns its process (weft's tools
// call it; weft alone leaves malloc as it found it: tests/inproc/process_state_test.cc). Unless GLIBC_TUNABLES
// or MALLOC_*_ tune it; then this test skips, as under sanitizers.
TEST(BufferPool, SmallBlocksFreedOnAWorkerThreadDoNotFaultTheirPagesInAgain) {
  if (WEFT_TEST_UNDER_SANITIZER) GTEST_SKIP() << "a sanitizer's allocator quarantines freed blocks";
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_"))
    GTEST_SKIP() << "malloc is tuned by the environment";
  ASSERT_TRUE(tune_process_malloc());
  constexpr std::size_t kBytes = std::size_t{96} << 10;
  constexpr int kBlocks = 8, kRounds = 50;
  std::int64_t faults = -1;
  std::thread worker([&] {
    auto round = [&](int value) {
      std::byte* blocks[kBlocks];
      for (auto& b : blocks) {
        b = acquire_block(kBytes);
        std::memset(b, value, kBytes);
      }
      for (auto* b : blocks) release_block(b, kBytes);
    };
    round(0);  // the first round faults its pages in
    const std::int64_t before = minor_faults_of_this_thread();
    for (int i = 1; i <= kRounds; ++i) round(i);
    faults = minor_faults_of_this_thread() - before;
  });
  worker.join();
  // Faulting the blocks in again would be 8 x 24 = 192 a round; allow a few per round for other causes.
  EXPECT_LT(faults, kRounds * 12) << "minor page faults over " << kRounds << " rounds";
}

}  // namespace buffer_pool_test
}  // namespace
}  // namespace weft::detail
