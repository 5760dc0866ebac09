// Writing in place into a buffer other threads have read and let go of. Replicas share buffers (a psum's
// result, a broadcast input, a donated argument): when the last holder writes into one in place
// (Array::mutable_bytes's copy-on-write, the fused loops' reuse of dying inputs), the others' reads must
// happen before its writes. "I hold the only reference" alone does not order them (use_count() is a relaxed
// load), so the ThreadSanitizer tier runs this file: it reports the race when the check does not
// synchronise with the other holders' drops (src/array/sole_reference.hpp). The Release tier checks the
// values and that the write really went in place.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "weft/weft.hpp"

namespace weft {
namespace {
namespace buffer_sharing_test {

std::vector<float> Ramp(std::size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.5f);
  return v;
}

TEST(BufferSharing, LastHolderWritesInPlaceAfterTheOtherThreadsRead) {
  constexpr std::size_t kElements = 4096;
  constexpr int kReaders = 4;
  const std::vector<float> values = Ramp(kElements);
  for (int round = 0; round < 20; ++round) {
    Array shared = Array::from_vector(values, {static_cast<std::int64_t>(kElements)});
    const std::byte* original = shared.bytes();
    std::vector<double> sums(kReaders, 0.0);
    std::vector<std::thread> readers;
    for (int t = 0; t < kReaders; ++t) {
      readers.emplace_back([mine = shared, &sums, t]() mutable {
        const float* data = reinterpret_cast<const float*>(mine.bytes());
        sums[static_cast<std::size_t>(t)] = std::accumulate(data, data + kElements, 0.0);
        mine = Array();  // lets go of the buffer before the thread ends: no join orders the write below
      });
    }
    // Wait (without synchronising: the count's load is relaxed) until every reader has let go.
    while (shared.buffer().use_count() != 1) std::this_thread::yield();
    float* out = reinterpret_cast<float*>(shared.mutable_bytes());
    EXPECT_EQ(reinterpret_cast<const std::byte*>(out), original) << "the only holder writes in place, no copy";
    for (std::size_t i = 0; i < kElements; ++i) out[i] = -1.0f;
    for (auto& r : readers) r.join();
    const double expected = std::accumulate(values.begin(), values.end(), 0.0);
    for (int t = 0; t < kReaders; ++t) EXPECT_EQ(sums[static_cast<std::size_t>(t)], expected) << "reader " << t;
    EXPECT_EQ(shared.to_doubles()[kElements - 1], -1.0);
  }
}

TEST(BufferSharing, AnotherHolderMakesTheWriteCopy) {
  const std::vector<float> values = Ramp(16);
  Array a = Array::from_vector(values, {16});
  const Array b = a;
  float* out = reinterpret_cast<float*>(a.mutable_bytes());
  EXPECT_NE(reinterpret_cast<const std::byte*>(out), b.bytes());
  out[0] = 7.0f;
  EXPECT_EQ(b.to_doubles()[0], 0.5) << "the other holder's data is unchanged";
  EXPECT_EQ(a.to_doubles()[0], 7.0);
}

}  // namespace buffer_sharing_test
}  // namespace
}  // namespace weft
