// A pmap whose arguments are all broadcast is refused, as jax.pmap refuses it (issue 10, item 1): the
// message must say why and show the idioms, and both idioms it shows must run and give every replica the
// whole value.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include <weft/weft.hpp>

#include "../support/errors.hpp"

namespace {
namespace broadcast_only_test {

using namespace weft;
using weft::testing::ErrorOf;
using weft::testing::ExpectContains;

TEST(BroadcastOnly, RefusedWithTheIdiom) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](Replica& r, const Array& x) { return r.psum(x, "i"); },
                {.axis = "i", .in_axes = {std::nullopt}, .runtime = &rt});
  ExpectContains(ErrorOf<InvalidArgument>([&] { f(Array::arange(3)); }),
                 {"pmap must have at least one non-None value in in_axes", "nothing gives the number of replicas",
                  "jax.pmap refuses this too", "device_put_replicated(x, devices)",
                  "in_axes {0, std::nullopt} and f(Array::arange(N), x)"});
}

TEST(BroadcastOnly, ReplicatedCopyIdiom) {
  Runtime rt({.device_count = 4});
  const Array x = Array::arange(3);  // [0, 1, 2]
  auto f = pmap([](Replica& r, const Array& v) { return r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  const std::vector<Device> devices = rt.local_devices();
  const Array y = f(device_put_replicated(x, devices, rt)).to_host();
  ASSERT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 4, 8, 0, 4, 8, 0, 4, 8, 0, 4, 8}));
}

TEST(BroadcastOnly, DummyAxisIdiom) {
  Runtime rt({.device_count = 4});
  const Array x = Array::arange(3);
  auto f = pmap([](Replica& r, const Array&, const Array& v) { return r.psum(v, "i"); },
                {.axis = "i", .in_axes = {0, std::nullopt}, .runtime = &rt});
  const Array y = f(Array::arange(4), x).to_host();
  ASSERT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 4, 8, 0, 4, 8, 0, 4, 8, 0, 4, 8}));
}

}  // namespace broadcast_only_test
}  // namespace
