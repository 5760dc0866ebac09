// Reliability R16: a seeded random sequence of collectives over random groups, every result checked against
// a sequential reference computed independently in the test. Sizes cross the split-work threshold, so both
// the one-barrier and the two-barrier paths, and the reuse of rendezvous slots, run back to back. Also run
// under ThreadSanitizer by ./test.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <weft/weft.hpp>

namespace {
namespace stress_test {

using weft::Array;
using weft::DType;
using weft::Replica;

// Input of replica r at step s: small integers, so float sums are exact whatever the order.
float input_value(int replica, int step, std::int64_t i) { return static_cast<float>((replica * 7 + step * 3 + i) % 23 - 11); }

struct Step {
  int kind;                       // 0 psum, 1 pmax, 2 all_gather (tiled), 3 psum_scatter (tiled), 4 ppermute
  std::vector<std::string> axes;  // over the (2, 4) mesh {a, b}
  std::int64_t size;              // elements per replica (a multiple of the largest group, 8, for the scatter)
  int shift;                      // ppermute: destination = (source + shift) mod group size
};

// The members of replica r's group for `axes` on the row-major (2, 4) mesh, in group order.
std::vector<int> group_of(int r, const std::vector<std::string>& axes) {
  const int a = r / 4, b = r % 4;
  std::vector<int> members;
  if (axes.size() == 2) {
    for (int x = 0; x < 2; ++x)
      for (int y = 0; y < 4; ++y) members.push_back(axes[0] == "a" ? x * 4 + y : y * 4 + x);
    if (axes[0] == "b") {  // order: b outer, a inner
      members.clear();
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 2; ++x) members.push_back(x * 4 + y);
    }
  } else if (axes[0] == "a") {
    for (int x = 0; x < 2; ++x) members.push_back(x * 4 + b);
  } else {
    for (int y = 0; y < 4; ++y) members.push_back(a * 4 + y);
  }
  return members;
}

std::vector<float> expected(const Step& st, int step, int r) {
  const std::vector<int> g = group_of(r, st.axes);
  const int n = static_cast<int>(g.size());
  const int k = static_cast<int>(std::find(g.begin(), g.end(), r) - g.begin());
  std::vector<float> out;
  switch (st.kind) {
    case 0:
    case 1:
      for (std::int64_t i = 0; i < st.size; ++i) {
        float acc = input_value(g[0], step, i);
        for (int m = 1; m < n; ++m) {
          const float v = input_value(g[m], step, i);
          acc = st.kind == 0 ? acc + v : std::max(acc, v);
        }
        out.push_back(acc);
      }
      break;
    case 2:
      for (int m = 0; m < n; ++m)
        for (std::int64_t i = 0; i < st.size; ++i) out.push_back(input_value(g[m], step, i));
      break;
    case 3: {
      const std::int64_t chunk = st.size / n;
      for (std::int64_t i = k * chunk; i < (k + 1) * chunk; ++i) {
        float acc = 0;
        for (int m = 0; m < n; ++m) acc += input_value(g[m], step, i);
        out.push_back(acc);
      }
      break;
    }
    case 4: {
      const int source = g[((k - st.shift) % n + n) % n];
      for (std::int64_t i = 0; i < st.size; ++i) out.push_back(input_value(source, step, i));
      break;
    }
  }
  return out;
}

// WEFT_STRESS_SEED / WEFT_STRESS_STEPS (test-only) try other sequences: a failure prints the seed, and
// `WEFT_STRESS_SEED=<it> ctest -R inproc_stress_test` (or the binary with --gtest_repeat) replays it.
std::uint64_t stress_setting(const char* name, std::uint64_t fallback, std::uint64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || value > max)
    throw std::invalid_argument(std::string(name) + "=" + text + " is not an integer in [0, " + std::to_string(max) + "]");
  return value;
}

TEST(Stress, RandomCollectiveSequenceMatchesASequentialReference) {
#if defined(__SANITIZE_THREAD__)
  const int default_steps = 120;
#else
  const int default_steps = 1000;
#endif
  const std::uint64_t seed = stress_setting("WEFT_STRESS_SEED", 20261130, 0xFFFFFFFFull);
  const int steps = static_cast<int>(stress_setting("WEFT_STRESS_STEPS", default_steps, 100000));
  std::cout << "stress: seed " << seed << ", " << steps << " steps\n";
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  const std::vector<std::vector<std::string>> axis_choices = {{"a"}, {"b"}, {"a", "b"}, {"b", "a"}};
  const std::vector<std::int64_t> sizes = {8, 16, 104, 1024, 70000};  // multiples of 8; 70000 floats: past the split threshold
  std::vector<Step> plan;
  for (int s = 0; s < steps; ++s) {
    Step st{static_cast<int>(rng() % 5), axis_choices[rng() % axis_choices.size()], sizes[rng() % sizes.size()],
            static_cast<int>(rng() % 3) + 1};
    plan.push_back(st);
  }
  weft::Runtime rt({.device_count = 8});
  std::atomic<int> wrong{0};
  std::atomic<int> first_bad_step{-1};
  auto program = weft::pmap(
      [&](Replica& r, const Array&) {
        for (int s = 0; s < steps; ++s) {
          const Step& st = plan[s];
          std::vector<float> in(static_cast<std::size_t>(st.size));
          for (std::int64_t i = 0; i < st.size; ++i) in[i] = input_value(r.index(), s, i);
          const Array x = Array::from_vector(in);
          const int n = static_cast<int>(group_of(r.index(), st.axes).size());
          weft::Permutation perm;
          for (int k = 0; k < n; ++k) perm.emplace_back(k, (k + st.shift) % n);
          Array y;
          switch (st.kind) {
            case 0: y = r.psum(x, st.axes); break;
            case 1: y = r.pmax(x, st.axes); break;
            case 2: y = r.all_gather(x, st.axes, 0, true); break;
            case 3: y = r.psum_scatter(x, st.axes, 0, true); break;
            default: y = r.ppermute(x, st.axes, perm); break;
          }
          const std::vector<float> want = expected(st, s, r.index());
          const std::vector<float> got = y.to_vector<float>();
          if (got != want) {
            ++wrong;
            int none = -1;
            first_bad_step.compare_exchange_strong(none, s);
          }
        }
        return Array::zeros({1});
      },
      {.mesh = {{"a", 2}, {"b", 4}}, .runtime = &rt});
  program(Array::zeros({2, 4, 1}));
  EXPECT_EQ(wrong.load(), 0) << "WEFT_STRESS_SEED=" << seed << " WEFT_STRESS_STEPS=" << steps << ": first wrong step "
                             << first_bad_step.load();
}

}  // namespace stress_test
}  // namespace
