// pmap semantics against closed-form values (shared/spec/jax-pmap.md sections 2-4 and the notebook's cells
// in section 7): mapping, in_axes / out_axes, multiple outputs, nested meshes, devices=, the error texts,
// preparation caching, zero-copy chaining and sharded-array placement.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

// RuntimeOptions and PmapOptions are meant to be filled with designated initializers, but members without a
// default member initializer (RuntimeOptions::log_level, trace_path; PmapOptions::mesh, devices, in_axes,
// out_axes) make g++ -Wextra warn about every one left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace pmap_test {

using Values = std::vector<double>;

// float32 arithmetic, as the replicas compute it, widened for comparisons.
double F(float v) { return static_cast<double>(v); }

// arange(n) reshaped, float32.
Array Iota(Shape shape, DType dtype = DType::f32) { return Array::arange(num_elements(shape), dtype).reshape(shape); }

void ExpectInvalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::ExpectThrowsWith<InvalidArgument>(f, parts);
}

std::vector<int> DeviceIds(const ShardedArray& a) {
  std::vector<int> ids;
  for (const Shard& s : a.shards()) ids.push_back(s.device.id);
  return ids;
}

// ---------------------------------------------------------------------------------------------------
// 1-d pmap and the reductions (spec 3.3 examples, 4 devices, x = arange(4)).

TEST(Pmap1d, PsumPmeanAndTheirQuotients) {
  Runtime rt({.device_count = 4});
  const Array x = Array::arange(4);
  auto psum = pmap([](Replica& r, const Array& v) { return r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto normalize = pmap([](Replica& r, const Array& v) { return v / r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto pmean = pmap([](Replica& r, const Array& v) { return r.pmean(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto by_mean = pmap([](Replica& r, const Array& v) { return v / r.pmean(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto grouped = pmap([](Replica& r, const Array& v) { return r.psum(v, "i", {{0, 1}, {2, 3}}); },
                      {.axis = "i", .runtime = &rt});

  const ShardedArray s = psum(x);
  EXPECT_EQ(s.shape(), (Shape{4}));
  EXPECT_EQ(s.dtype(), DType::f32);
  EXPECT_EQ(DeviceIds(s), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(s.to_host().to_doubles(), (Values{6, 6, 6, 6}));
  EXPECT_EQ(normalize(x).to_host().to_doubles(), (Values{0, F(1.0f / 6.0f), F(2.0f / 6.0f), 0.5}));
  EXPECT_EQ(pmean(x).to_host().to_doubles(), (Values{1.5, 1.5, 1.5, 1.5}));
  EXPECT_EQ(by_mean(x).to_host().to_doubles(), (Values{0, F(1.0f / 1.5f), F(2.0f / 1.5f), 2}));
  EXPECT_EQ(grouped(x).to_host().to_doubles(), (Values{1, 1, 5, 5}));
}

TEST(Pmap1d, AxisIndexSizeAndReplicaIdentity) {
  Runtime rt({.device_count = 4});
  auto ids = pmap(
      [](Replica& r, const Array&) {
        return std::tuple{Array::scalar(r.axis_index("i"), DType::i32), Array::scalar(r.axis_size("i"), DType::i32),
                          Array::scalar(r.index(), DType::i32), Array::scalar(r.device().id, DType::i32),
                          Array::scalar(r.num_replicas(), DType::i32)};
      },
      {.axis = "i", .runtime = &rt});
  auto [index, size, replica, device, count] = ids(Array::zeros({4}));
  EXPECT_EQ(index.dtype(), DType::i32);
  EXPECT_EQ(index.to_host().to_doubles(), (Values{0, 1, 2, 3}));
  EXPECT_EQ(size.to_host().to_doubles(), (Values{4, 4, 4, 4}));
  EXPECT_EQ(replica.to_host().to_doubles(), (Values{0, 1, 2, 3}));
  EXPECT_EQ(device.to_host().to_doubles(), (Values{0, 1, 2, 3}));
  EXPECT_EQ(count.to_host().to_doubles(), (Values{4, 4, 4, 4}));
}

TEST(Pmap1d, NotebookSquareWithoutReplicaContext) {
  Runtime rt({.device_count = 4});
  auto square = pmap([](const Array& v) { return v * v; }, {.runtime = &rt});
  const Array data = Iota({4, 3});
  const ShardedArray out = square(data);
  EXPECT_EQ(out.shape(), (Shape{4, 3}));
  Values want;
  for (int i = 0; i < 12; ++i) want.push_back(i * i);
  EXPECT_EQ(out.to_host().to_doubles(), want);
  // Rank-reducing: each shard holds one row.
  for (const Shard& s : out.shards()) EXPECT_EQ(s.data.shape(), (Shape{3}));
  EXPECT_EQ(out.to_host().dtype(), DType::f32);
}

// ---------------------------------------------------------------------------------------------------
// in_axes / out_axes (spec 2.4)

TEST(PmapAxes, BroadcastArgumentReachesEveryReplicaWhole) {
  Runtime rt({.device_count = 4});
  auto add = pmap([](const Array& x, const Array& y) { return x + y; },
                  {.axis = "i", .in_axes = {0, std::nullopt}, .runtime = &rt});
  const ShardedArray out = add(Array::arange(4), Array::from_list<float>({10, 20, 30}));
  EXPECT_EQ(out.shape(), (Shape{4, 3}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{10, 20, 30, 11, 21, 31, 12, 22, 32, 13, 23, 33}));
}

TEST(PmapAxes, InAxesOneMapsColumns) {
  Runtime rt({.device_count = 4});
  const Array x = Iota({3, 4});  // column i goes to replica i
  auto ident = pmap([](Replica& r, const Array& c) { return c + static_cast<float>(0 * r.index()); },
                    {.axis = "i", .in_axes = {1}, .runtime = &rt});
  const ShardedArray t = ident(x);
  EXPECT_EQ(t.shape(), (Shape{4, 3}));  // out_axes 0: the transpose
  EXPECT_EQ(t.to_host().to_doubles(), (Values{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(t[2].to_doubles(), (Values{2, 6, 10}));

  auto round_trip = pmap([](const Array& c) { return c; }, {.axis = "i", .in_axes = {1}, .out_axes = {1}, .runtime = &rt});
  const ShardedArray same = round_trip(x);
  EXPECT_EQ(same.shape(), (Shape{3, 4}));
  EXPECT_EQ(same.mapped_axis(), 1);
  EXPECT_EQ(same.to_host().to_doubles(), x.to_doubles());
}

TEST(PmapAxes, OutAxesNoneIsReplicated) {
  Runtime rt({.device_count = 4});
  auto total = pmap([](Replica& r, const Array& v) { return r.psum(v, "i"); },
                    {.axis = "i", .out_axes = {std::nullopt}, .runtime = &rt});
  const ShardedArray out = total(Iota({4, 2}));
  EXPECT_TRUE(out.replicated());
  EXPECT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{12, 16}));
  EXPECT_EQ(DeviceIds(out), (std::vector<int>{0, 1, 2, 3}));
  for (const Shard& s : out.shards()) EXPECT_EQ(s.data.to_doubles(), (Values{12, 16}));
}

TEST(PmapAxes, OutAxesOneInsertsTheMappedAxisSecond) {
  Runtime rt({.device_count = 4});
  auto twice = pmap([](const Array& v) { return v * 2.0; }, {.axis = "i", .out_axes = {1}, .runtime = &rt});
  const ShardedArray out = twice(Iota({4, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 4}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{0, 4, 8, 12, 2, 6, 10, 14}));
}

TEST(PmapAxes, MultipleOutputsAsTupleAndVector) {
  Runtime rt({.device_count = 4});
  auto both = pmap([](Replica& r, const Array& v) { return std::tuple{v * 2.0, r.psum(v, "i")}; },
                   {.axis = "i", .out_axes = {0, std::nullopt}, .runtime = &rt});
  auto [doubled, sum] = both(Array::arange(4));
  EXPECT_EQ(doubled.to_host().to_doubles(), (Values{0, 2, 4, 6}));
  EXPECT_TRUE(sum.replicated());
  EXPECT_EQ(sum.to_host().to_doubles(), (Values{6}));

  auto list = pmap([](Replica& r, const Array& v) { return std::vector<Array>{v, r.pmax(v, "i"), r.pmin(v, "i")}; },
                   {.axis = "i", .runtime = &rt});
  const std::vector<ShardedArray> outs = list(Array::arange(4));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[1].to_host().to_doubles(), (Values{3, 3, 3, 3}));
  EXPECT_EQ(outs[2].to_host().to_doubles(), (Values{0, 0, 0, 0}));
}

// Negative axes count from the end, as in JAX: in_axes a of a rank-n argument is axis n + a; out_axes a of a
// rank-n output is axis n + 1 + a of the result (which has the mapped axis too). Issue 21, item 4: -1 meant
// "broadcast" before.
TEST(PmapAxes, NegativeInAxesCountFromTheEnd) {
  Runtime rt({.device_count = 4});
  const Array x = Iota({3, 4});
  auto last = pmap([](const Array& c) { return c; }, {.axis = "i", .in_axes = {-1}, .runtime = &rt});
  const ShardedArray t = last(x);  // as in_axes {1}: column i goes to replica i
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(t.to_host().to_doubles(), (Values{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto first = pmap([](const Array& a, const Array& b) { return a + b; },
                    {.axis = "i", .in_axes = {-2, std::nullopt}, .runtime = &rt});
  const ShardedArray u = first(Iota({4, 2}), Array::from_list<float>({10, 20}));  // -2 of rank 2 is axis 0
  EXPECT_EQ(u.to_host().to_doubles(), (Values{10, 21, 12, 23, 14, 25, 16, 27}));
}

TEST(PmapAxes, NegativeOutAxesCountFromTheEndOfTheResult) {
  Runtime rt({.device_count = 4});
  auto twice = pmap([](const Array& v) { return v * 2.0; }, {.axis = "i", .out_axes = {-1}, .runtime = &rt});
  const ShardedArray out = twice(Iota({4, 2}));  // as out_axes {1}
  EXPECT_EQ(out.shape(), (Shape{2, 4}));
  EXPECT_EQ(out.mapped_axis(), 1);
  EXPECT_EQ(out.to_host().to_doubles(), (Values{0, 4, 8, 12, 2, 6, 10, 14}));
  auto front = pmap([](const Array& v) { return v * 2.0; }, {.axis = "i", .out_axes = {-2}, .runtime = &rt});
  EXPECT_EQ(front(Iota({4, 2})).mapped_axis(), 0);
}

TEST(PmapAxes, OutOfRangeNegativeAxesNameTheArgument) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](const Array& a, const Array& b) { return a + b; }, {.axis = "i", .in_axes = {0, -3}, .runtime = &rt});
  ExpectInvalid([&] { f(Iota({4, 3}), Iota({3, 4})); },
                {"pmap was requested to map its argument 1 along axis -3, which implies that its rank should be at "
                 "least 3, but is only 2 (its shape is (3, 4))"});
  auto g = pmap([](const Array& v) { return v; }, {.axis = "i", .out_axes = {-3}, .runtime = &rt});
  ExpectInvalid([&] { g(Iota({4, 2})); },
                {"out_axes[0] = -3 is out of range for an output of rank 1", "an axis in [-2, 1]"});
}

// ---------------------------------------------------------------------------------------------------
// Nested meshes (spec 2.8, notebook cell 19)

TEST(PmapMesh, NotebookRowColAndDoublyNormalised) {
  Runtime rt({.device_count = 4});
  auto normalize = pmap(
      [](Replica& r, const Array& x) {
        return std::tuple{x / r.psum(x, "rows"), x / r.psum(x, "cols"), x / r.psum(x, {"rows", "cols"})};
      },
      {.mesh = {{"rows", 2}, {"cols", 2}}, .runtime = &rt});
  auto [by_row, by_col, doubly] = normalize(Iota({2, 2}));
  EXPECT_EQ(by_row.shape(), (Shape{2, 2}));
  EXPECT_EQ(by_row.to_host().to_doubles(), (Values{0, 0.25, 1, 0.75}));
  EXPECT_EQ(by_col.to_host().to_doubles(), (Values{0, 1, F(2.0f / 5.0f), F(3.0f / 5.0f)}));
  EXPECT_EQ(doubly.to_host().to_doubles(), (Values{0, F(1.0f / 6.0f), F(2.0f / 6.0f), 0.5}));
  EXPECT_EQ(DeviceIds(by_row), (std::vector<int>{0, 1, 2, 3}));
}

TEST(PmapMesh, AxisIndexIsRowMajorOverTheNesting) {
  Runtime rt({.device_count = 8});
  auto coords = pmap(
      [](Replica& r, const Array&) {
        return std::tuple{Array::scalar(r.axis_index("rows"), DType::i32), Array::scalar(r.axis_index("cols"), DType::i32),
                          Array::scalar(r.index(), DType::i32), Array::scalar(r.axis_index({"cols", "rows"}), DType::i32),
                          Array::scalar(r.axis_size({"rows", "cols"}), DType::i32)};
      },
      {.mesh = {{"rows", 4}, {"cols", 2}}, .runtime = &rt});
  auto [rows, cols, index, swapped, size] = coords(Array::zeros({4, 2}));
  EXPECT_EQ(rows.shape(), (Shape{4, 2}));
  EXPECT_EQ(rows.to_host().to_doubles(), (Values{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(cols.to_host().to_doubles(), (Values{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(index.to_host().to_doubles(), (Values{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(swapped.to_host().to_doubles(), (Values{0, 4, 1, 5, 2, 6, 3, 7}));  // cols most significant
  EXPECT_EQ(size.to_host().to_doubles(), Values(8, 8));
}

TEST(PmapMesh, BroadcastArgumentWithMesh) {
  Runtime rt({.device_count = 4});
  auto shift = pmap([](const Array& x, const Array& b) { return x + b; },
                    {.mesh = {{"rows", 2}, {"cols", 2}}, .in_axes = {0, std::nullopt}, .runtime = &rt});
  const ShardedArray out = shift(Iota({2, 2, 3}), Array::from_list<float>({100, 200, 300}));
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{100, 201, 302, 103, 204, 305, 106, 207, 308, 109, 210, 311}));
}

// ---------------------------------------------------------------------------------------------------
// devices= (spec 2.6, notebook cells 25 and 26)

TEST(PmapDevices, SubsetsRunOnTheGivenDevicesWithLocalReplicaIds) {
  Runtime rt({.device_count = 4});
  std::mutex m;
  std::vector<std::pair<int, int>> seen;  // (replica index, device id) of normalize1
  auto normalize0 = pmap([](Replica& r, const Array& x) { return x / r.psum(x, "i"); },
                         {.axis = "i", .devices = {rt.device(0), rt.device(1)}, .runtime = &rt});
  auto normalize1 = pmap(
      [&](Replica& r, const Array& x) {
        {
          std::lock_guard lock(m);
          seen.emplace_back(r.index(), r.device().id);
        }
        return x / r.pmean(x, "i");
      },
      {.axis = "i", .devices = {rt.device(2), rt.device(3)}, .runtime = &rt});
  const Array data = Iota({4, 3});
  const ShardedArray a = normalize0(data.slice(0, 2));
  const ShardedArray b = normalize1(device_put_sharded({data[2], data[3]}, {rt.device(2), rt.device(3)}, rt));
  EXPECT_EQ(DeviceIds(a), (std::vector<int>{0, 1}));
  EXPECT_EQ(DeviceIds(b), (std::vector<int>{2, 3}));
  EXPECT_EQ(a.to_host().to_doubles(), (Values{0, F(1.0f / 5.0f), F(2.0f / 7.0f), 1, F(4.0f / 5.0f), F(5.0f / 7.0f)}));
  EXPECT_EQ(b.to_host().to_doubles(), (Values{F(6.0f / 7.5f), F(7.0f / 8.5f), F(8.0f / 9.5f), F(9.0f / 7.5f),
                                              F(10.0f / 8.5f), F(11.0f / 9.5f)}));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(a[1].device(), 1);
  EXPECT_EQ(b[0].device(), 2);
}

TEST(PmapDevices, ExplicitDeviceOrderIsKept) {
  Runtime rt({.device_count = 4});
  auto where = pmap([](Replica& r, const Array& x) { return x + static_cast<float>(r.device().id); },
                    {.axis = "i", .devices = {rt.device(3), rt.device(1), rt.device(0)}, .runtime = &rt});
  const ShardedArray out = where(Array::zeros({3}));
  EXPECT_EQ(DeviceIds(out), (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{3, 1, 0}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].device(), out.shards()[i].device.id);
}

// ---------------------------------------------------------------------------------------------------
// Errors (spec 2.4, 2.6, 2.7)

TEST(PmapErrors, MappedSizeLargerThanTheDeviceCount) {
  Runtime rt({.device_count = 4});
  auto square = pmap([](const Array& v) { return v * v; }, {.runtime = &rt});
  ExpectInvalid([&] { square(Array::zeros({5, 3})); },
                {"compiling computation that requires 5 logical devices, but only 4 devices are available "
                 "(num_replicas=5, num_partitions=1)"});
  auto nested = pmap([](const Array& v) { return v; }, {.mesh = {{"a", 3}, {"b", 2}}, .runtime = &rt});
  ExpectInvalid([&] { nested(Array::zeros({3, 2})); }, {"requires 6 logical devices", "{a: 3, b: 2}"});
}

TEST(PmapErrors, LeadingAxisMustEqualTheNumberOfDevicesPassed) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](const Array& v) { return v; }, {.devices = {rt.device(0), rt.device(1)}, .runtime = &rt});
  ExpectInvalid([&] { f(Array::zeros({3})); },
                {"Leading axis size of input to pmapped function must equal the number of local devices passed to "
                 "pmap. Got axis_size=3, num_local_devices=2.",
                 "CpuDevice(id=0, process=0), CpuDevice(id=1, process=0)"});
  auto twice = pmap([](const Array& v) { return v; }, {.devices = {rt.device(1), rt.device(1)}, .runtime = &rt});
  ExpectInvalid([&] { twice(Array::zeros({2})); }, {"CpuDevice(id=1, process=0) appears twice"});
  auto unknown = pmap([](const Array& v) { return v; }, {.devices = {rt.device(0), Device{9}}, .runtime = &rt});
  ExpectInvalid([&] { unknown(Array::zeros({2})); }, {"no device with id 9"});
}

TEST(PmapErrors, InconsistentMappedSizes) {
  Runtime rt({.device_count = 4});
  auto add = pmap([](const Array& x, const Array& y) { return x + y; }, {.runtime = &rt});
  ExpectInvalid([&] { add(Array::zeros({4}), Array::zeros({3, 2})); },
                {"pmap got inconsistent sizes for array axes to be mapped:",
                 "argument 0 of shape (4,) has size 4 along axis 0", "argument 1 of shape (3, 2) has size 3 along axis 0"});
}

TEST(PmapErrors, MeshShapeMismatch) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](const Array& v) { return v; }, {.mesh = {{"rows", 2}, {"cols", 2}}, .runtime = &rt});
  ExpectInvalid([&] { f(Array::zeros({4})); },
                {"argument 0 has shape (4,); its leading dimensions must equal the mesh shape (2, 2)"});
  ExpectInvalid([&] { f(Array::zeros({2, 3})); }, {"argument 0 has shape (2, 3)", "mesh shape (2, 2)"});
}

TEST(PmapErrors, InAxesProblems) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](const Array& v) { return v; }, {.in_axes = {1}, .runtime = &rt});
  ExpectInvalid([&] { f(Array::zeros({4})); },
                {"pmap was requested to map its argument 0 along axis 1, which implies that its rank should be at "
                 "least 2, but is only 1 (its shape is (4,))"});
  auto none = pmap([](const Array& v) { return v; }, {.in_axes = {std::nullopt}, .runtime = &rt});
  ExpectInvalid([&] { none(Array::zeros({4})); }, {"pmap must have at least one non-None value in in_axes"});
  auto count = pmap([](const Array& v) { return v; }, {.in_axes = {0, 0}, .runtime = &rt});
  ExpectInvalid([&] { count(Array::zeros({4})); }, {"in_axes has 2 entries but the function was called with 1"});
  ExpectInvalid([] { pmap([](const Array& v) { return v; }, {.axis = "i", .mesh = {{"a", 2}}})(Array::zeros({2})); },
                {"either axis", "or mesh"});
}

TEST(PmapErrors, ReplicasMustReturnTheSameStructure) {
  Runtime rt({.device_count = 4});
  auto ragged = pmap([](Replica& r, const Array& v) { return r.index() == 2 ? v.slice(0, 1) : v; }, {.runtime = &rt});
  ExpectInvalid([&] { ragged(Iota({4, 2})); }, {"output 0 of replica 2", "float32(1,)", "replica 0", "float32(2,)"});
  auto out_axes = pmap([](const Array& v) { return v; }, {.out_axes = {3}, .runtime = &rt});
  ExpectInvalid([&] { out_axes(Iota({4, 2})); }, {"out_axes[0] = 3 is out of range for an output of rank 1"});
}

// ---------------------------------------------------------------------------------------------------
// Preparation caching and data movement statistics (spec 2.9, 4.1)

TEST(PmapStats, SameSignaturePreparesOnce) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](Replica& r, const Array& v) { return v / r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  rt.reset_stats();
  f(Iota({4, 3}));
  EXPECT_EQ(rt.stats().preparations, 1u);
  EXPECT_EQ(rt.stats().executions, 1u);
  f(Iota({4, 3}) + 1.0);
  EXPECT_EQ(rt.stats().preparations, 1u) << "same shapes and dtype: nothing is prepared again";
  EXPECT_EQ(rt.stats().executions, 2u);
  f(Iota({2, 3}));
  EXPECT_EQ(rt.stats().preparations, 2u) << "a different shape prepares again";
  f(Iota({4, 3}, DType::f64));
  EXPECT_EQ(rt.stats().preparations, 3u) << "a different dtype prepares again";
  f(Iota({4, 3}));
  f(Iota({2, 3}));
  EXPECT_EQ(rt.stats().preparations, 3u);
  EXPECT_EQ(rt.stats().executions, 6u);
  EXPECT_EQ(rt.stats().collectives, 6u) << "six calls of one psum each: one round each, whatever the replica count";
}

TEST(PmapStats, ChainingOnDeviceResidentResultsCopiesNothing) {
  Runtime rt({.device_count = 4});
  auto square = pmap([](const Array& v) { return v * v; }, {.runtime = &rt});
  auto normalize = pmap([](Replica& r, const Array& v) { return v / r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  const Array data = Iota({4, 3});
  rt.reset_stats();
  const ShardedArray squared = square(data);
  EXPECT_EQ(rt.stats().bytes_host_to_device, data.nbytes());
  EXPECT_EQ(rt.stats().bytes_device_to_host, 0u);
  const ShardedArray fourth = square(squared);
  const ShardedArray normalized = normalize(fourth);
  EXPECT_EQ(rt.stats().bytes_host_to_device, data.nbytes()) << "device-resident inputs are reused, not copied";
  EXPECT_EQ(rt.stats().bytes_device_to_host, 0u);
  const Array host = fourth.to_host();
  EXPECT_EQ(rt.stats().bytes_device_to_host, host.nbytes());
  Values want;
  for (int i = 0; i < 12; ++i) want.push_back(static_cast<double>(i) * i * i * i);
  EXPECT_EQ(host.to_doubles(), want);
  // The shards of a chained result are on the same devices, and reading one row copies nothing.
  EXPECT_EQ(DeviceIds(normalized), (std::vector<int>{0, 1, 2, 3}));
  const std::uint64_t before = rt.stats().bytes_device_to_host;
  EXPECT_EQ(fourth[3].to_doubles(), (Values{6561, 10000, 14641}));
  EXPECT_EQ(rt.stats().bytes_device_to_host, before);
}

TEST(PmapStats, ShardsOnOtherDevicesAreMovedAndCounted) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](Replica& r, const Array& v) { return r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  const ShardedArray on_2_3 = device_put_sharded({Array::arange(3), Array::arange(3) + 1.0}, {rt.device(2), rt.device(3)}, rt);
  rt.reset_stats();
  const ShardedArray out = f(on_2_3);  // default devices 0 and 1: the shards must move
  EXPECT_EQ(DeviceIds(out), (std::vector<int>{0, 1}));
  EXPECT_EQ(out.to_host().to_doubles(), (Values{1, 3, 5, 1, 3, 5}));
  EXPECT_GT(rt.stats().bytes_host_to_device, 0u);
}

// ---------------------------------------------------------------------------------------------------
// device_put family and sharded-array indexing (spec 4.1, 4.2; notebook cells 13-15)

TEST(DevicePut, CommitsToTheDeviceAndCountsBytes) {
  Runtime rt({.device_count = 4});
  rt.reset_stats();
  const Array a = Array::arange(3);
  const std::int64_t before = rt.memory_in_use(rt.device(2));
  const Array b = device_put(a, rt.device(2), rt);
  EXPECT_EQ(b.device(), 2);
  EXPECT_EQ(b.to_doubles(), (Values{0, 1, 2}));
  EXPECT_EQ(rt.stats().bytes_host_to_device, a.nbytes());
  EXPECT_GE(rt.memory_in_use(rt.device(2)) - before, static_cast<std::int64_t>(a.nbytes()));
  const Array again = device_put(b, rt.device(2), rt);
  EXPECT_TRUE(again.shares_buffer_with(b)) << "already there: no copy";
  EXPECT_EQ(rt.stats().bytes_host_to_device, a.nbytes());
  const Array moved = device_put(b, rt.device(1), rt);
  EXPECT_EQ(moved.device(), 1);
  EXPECT_FALSE(moved.shares_buffer_with(b));
  EXPECT_EQ(moved.to_doubles(), (Values{0, 1, 2}));
  ExpectInvalid([&] { device_put(a, Device{7}, rt); }, {"no device with id 7"});
}

TEST(DevicePut, ShardedAndReplicated) {
  Runtime rt({.device_count = 4});
  const Array data = Iota({4, 3});
  const ShardedArray s = device_put_sharded({data[2], data[3]}, {rt.device(2), rt.device(3)}, rt);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(DeviceIds(s), (std::vector<int>{2, 3}));
  EXPECT_EQ(s.to_host().to_doubles(), (Values{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(s[1].device(), 3);

  const ShardedArray r = device_put_replicated(Array::from_list<float>({1, 2}), {rt.device(0), rt.device(1), rt.device(3)}, rt);
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(DeviceIds(r), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(r.to_host().to_doubles(), (Values{1, 2, 1, 2, 1, 2}));
  for (const Shard& sh : r.shards()) EXPECT_EQ(sh.data.device(), sh.device.id);

  ExpectInvalid([&] { device_put_sharded({data[0], data[1]}, {rt.device(0), rt.device(1), rt.device(2)}, rt); },
                {"len(shards) = 2 must equal len(devices) = 3."});
  ExpectInvalid([&] { device_put_sharded({data[0], data[1].slice(0, 2)}, {rt.device(0), rt.device(1)}, rt); },
                {"must have consistent shape and dtype, but got float32(3,) and float32(2,)"});
  ExpectInvalid([&] { device_put_sharded({data[0], data[1].astype(DType::i32)}, {rt.device(0), rt.device(1)}, rt); },
                {"must have consistent shape and dtype", "int32"});
}

TEST(ShardedArrays, IndexReturnsTheShardOnItsDeviceAndSliceReadsBack) {
  Runtime rt({.device_count = 4});
  auto fourth = pmap([](const Array& v) { return v * v * v * v; }, {.runtime = &rt});
  const ShardedArray out = fourth(Iota({4, 3}));
  const Array row = out[1];
  EXPECT_EQ(row.device(), 1);
  EXPECT_TRUE(row.shares_buffer_with(out.shards()[1].data)) << "out[i] is the shard itself, zero copy";
  EXPECT_EQ(row.to_doubles(), (Values{81, 256, 625}));
  EXPECT_EQ(out[-1].device(), 3);
  EXPECT_EQ(out[-1].to_doubles(), (Values{6561, 10000, 14641}));
  // Notebook cell 14: row 1 committed to device 3.
  const Array on3 = device_put(out[1], rt.device(3), rt);
  EXPECT_EQ(on3.device(), 3);
  EXPECT_EQ(on3.to_doubles(), (Values{81, 256, 625}));
  // Notebook cell 15: a slice keeps the leading axis.
  const Array first = out.slice(0, 1);
  EXPECT_EQ(first.shape(), (Shape{1, 3}));
  EXPECT_EQ(first.to_doubles(), (Values{0, 1, 16}));
  EXPECT_EQ(first.device(), -1);
  EXPECT_EQ(out.slice(1, 3).to_doubles(), (Values{81, 256, 625, 1296, 2401, 4096}));
  EXPECT_EQ(out.slice(2, 10).shape(), (Shape{2, 3})) << "slices clamp like numpy";
  ExpectInvalid([&] { (void)out[4]; }, {"index 4 is out of bounds for axis 0 with size 4"});
  ExpectInvalid([&] { (void)out[-5]; }, {"out of bounds"});
}

}  // namespace pmap_test
}  // namespace
}  // namespace weft
