// pmap of a traced function (weft/jit.hpp): pmap(jit(f)) traces f(Replica&, Array...) once per signature
// and runs the program on every replica. Its results must be the hand-called pmap's, bit for bit, on 1-d and
// 2-d meshes with the collectives (psum, pmean, pmax, all_gather, psum_scatter, all_to_all, ppermute,
// axis_index) and broadcast inputs; f runs once however many calls; the replica's unknowns are errors.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace traced_pmap_test {

Array Iota(Shape shape, double scale = 1.0) {
  return (Array::arange(num_elements(shape)).reshape(shape) * scale + 0.5).astype(DType::f32);
}

void ExpectSameShards(const ShardedArray& got, const ShardedArray& want, const std::string& what) {
  ASSERT_EQ(got.shards().size(), want.shards().size()) << what;
  for (std::size_t i = 0; i < got.shards().size(); ++i) {
    const Array& g = got.shards()[i].data;
    const Array& w = want.shards()[i].data;
    EXPECT_EQ(got.shards()[i].device.id, want.shards()[i].device.id) << what;
    EXPECT_TRUE(g.identical(w)) << what << " shard " << i << ": traced " << g << ", hand-called " << w;
  }
}

void ExpectInvalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::ExpectThrowsWith<InvalidArgument>(f, parts);
}

TEST(TracedPmap, EqualsHandCalledPmapOn8Devices) {
  Runtime rt({.device_count = 8});
  const Permutation ring = {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 0}};
  auto body = [&ring](Replica& r, const Array& x) {
    const Array total = r.psum(x, "i");
    const Array gathered = r.all_gather(x * 2.0, "i", 0, true);
    const Array shifted = r.ppermute(x, "i", ring);
    const Array index = r.axis_index("i").astype(DType::f32);
    const Array scattered = r.psum_scatter(gathered, "i", 0, true);
    const Array largest = r.pmax(x, "i");
    return std::tuple{x / total + index, gathered.sum({0}), shifted - index, scattered * largest, r.pmean(x, "i")};
  };
  auto hand = pmap(body, {.axis = "i", .runtime = &rt});
  auto traced = pmap(jit(body), {.axis = "i", .runtime = &rt});
  const Array x = Iota({8, 3, 4}, 0.25);
  auto [a, b, c, d, e] = traced(x);
  auto [ha, hb, hc, hd, he] = hand(x);
  ExpectSameShards(a, ha, "x / psum + axis_index");
  ExpectSameShards(b, hb, "all_gather");
  ExpectSameShards(c, hc, "ppermute - axis_index");
  ExpectSameShards(d, hd, "psum_scatter * pmax");
  ExpectSameShards(e, he, "pmean");
  // The values themselves, independently: replica k's axis_index is k.
  EXPECT_EQ(c.shards()[3].data.to_doubles(), (x[2] - 3.0).to_doubles());
}

TEST(TracedPmap, TwoDimensionalMeshAndBroadcastInputs) {
  Runtime rt({.device_count = 4});
  auto body = [](Replica& r, const Array& x, const Array& w) {
    const Array rows = r.psum(matmul(x, w), "rows");
    const Array both = r.pmean(x, {"rows", "cols"});
    const Array moved = r.all_to_all(x, "cols", 0, 0, true);
    const Array index = r.axis_index({"cols", "rows"}).astype(DType::f32);
    return std::tuple{softmax(rows, -1) + index, both, moved};
  };
  const PmapOptions options{.mesh = {{"rows", 2}, {"cols", 2}}, .in_axes = {0, std::nullopt}, .runtime = &rt};
  auto hand = pmap(body, options);
  auto traced = pmap(jit(body), options);
  const Array x = Iota({2, 2, 4, 3}, 0.5);
  const Array w = Iota({3, 5}, -0.125);
  auto [a, b, c] = traced(x, w);
  auto [ha, hb, hc] = hand(x, w);
  ExpectSameShards(a, ha, "psum(matmul) softmax + axis_index");
  ExpectSameShards(b, hb, "pmean over both axes");
  ExpectSameShards(c, hc, "all_to_all");
}

TEST(TracedPmap, TracesOncePerSignature) {
  Runtime rt({.device_count = 8});
  std::atomic<int> calls{0};
  auto f = pmap(jit([&calls](Replica& r, const Array& x) {
                  ++calls;
                  return r.psum(x, "i");
                }),
                {.axis = "i", .runtime = &rt});
  const Array x = Iota({8, 4});
  ShardedArray y;
  for (int i = 0; i < 1000; ++i) y = f(x);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(y.shards()[5].data.to_doubles(), x.sum({0}).to_doubles());
  f(Iota({8, 2}));
  EXPECT_EQ(calls.load(), 2);
}

TEST(TracedPmap, ArrayOnlyFunctionsArePmappedToo) {
  Runtime rt({.device_count = 4});
  auto f = pmap(jit([](const Array& x) { return exp(x).sum(); }), {.axis = "i", .runtime = &rt});
  const Array x = Iota({4, 3}, 0.1);
  const ShardedArray y = f(x);
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(y.shards()[k].data.identical(exp(x[k]).sum()));
}

TEST(TracedPmap, AxisIndexIsAnArrayTracedAndAlsoAnIntEagerly) {
  Runtime rt({.device_count = 4});
  // One spelling for both: the index as an int32 Array in arithmetic (f32 * i32 promotes to f32).
  auto body = [](Replica& r, const Array& x) { return x * r.axis_index("i") + r.axis_index("i") * 2.0; };
  const Array x = Iota({4, 3});
  const ShardedArray traced = pmap(jit(body), {.axis = "i", .runtime = &rt})(x);
  const ShardedArray hand = pmap(body, {.axis = "i", .runtime = &rt})(x);
  ExpectSameShards(traced, hand, "x * axis_index");
  EXPECT_EQ(traced.shards()[2].data.to_doubles(), (x[2] * 2.0 + 4.0).to_doubles());
  // Eagerly it is also an int, as before AxisIndex.
  auto as_int = pmap([](Replica& r, const Array& x) {
                       const int k = r.axis_index("i");
                       return x + static_cast<double>(k == 3 ? 100 : k);
                     },
                     {.axis = "i", .runtime = &rt});
  EXPECT_EQ(as_int(x).shards()[3].data.to_doubles(), (x[3] + 100.0).to_doubles());
}

// all_reduce over explicit groups records psum & co. over the mesh's axis with the groups as index groups:
// the hand-called results, bit for bit, with PopXL's strided groups (and Megatron's f and g).
TEST(TracedPmap, AllReduceOverReplicaGroupsIsTheHandCalledOne) {
  Runtime rt({.device_count = 8});
  const ReplicaGroups strided = ReplicaGroups::strided(8, 2, 4);  // {0,2,4,6}, {1,3,5,7}: across the rows
  auto body = [strided](Replica& r, const Array& x) {
    return std::tuple{r.all_reduce(x, strided), r.all_reduce(x, strided, ReduceOp::max),
                      r.all_reduce_identical_grad_inputs(x * 2.0, strided), r.all_reduce_identical_inputs(x, strided)};
  };
  const PmapOptions options{.axis = "i", .runtime = &rt};
  auto [a, b, c, d] = pmap(jit(body), options)(Iota({8, 3}, 0.5));
  auto [ha, hb, hc, hd] = pmap(body, options)(Iota({8, 3}, 0.5));
  ExpectSameShards(a, ha, "all_reduce sum");
  ExpectSameShards(b, hb, "all_reduce max");
  ExpectSameShards(c, hc, "all_reduce_identical_grad_inputs");
  ExpectSameShards(d, hd, "all_reduce_identical_inputs");
  ExpectSameShards(d, pmap([](const Array& x) { return x; }, options)(Iota({8, 3}, 0.5)), "f is the identity");
  ExpectInvalid([&] { pmap(jit(body), {.mesh = {{"rows", 2}, {"cols", 4}}, .runtime = &rt})(Iota({2, 4, 3})); },
                {"all_reduce over ReplicaGroups is traced on a 1-d mesh only", "this mesh has 2 axes"});
}

TEST(TracedPmap, TheReplicasUnknownsAreErrors) {
  Runtime rt({.device_count = 2});
  ExpectInvalid([&] { pmap(jit([](Replica& r, const Array& x) { return x * static_cast<float>(static_cast<int>(r.axis_index("i"))); }),
                           {.axis = "i", .runtime = &rt})(Iota({2, 3})); },
                {"Replica::axis_index", "converted to int in a traced pmap", "use it as an int32 Array"});
  ExpectInvalid([&] { pmap(jit([](Replica& r, const Array& x) { return x * static_cast<double>(r.index()); }),
                           {.axis = "i", .runtime = &rt})(Iota({2, 3})); },
                {"Replica::index", "the replica is traced"});
  ExpectInvalid([&] { pmap(jit([](Replica& r, const Array& x) { return r.all_gather(x, ReplicaGroups::all(2)); }),
                           {.axis = "i", .runtime = &rt})(Iota({2, 3})); },
                {"all_gather over ReplicaGroups", "not traced yet"});
  ExpectInvalid([&] { pmap(jit([](Replica& r, const Array& x) { return r.psum(x, "j"); }), {.axis = "i", .runtime = &rt})(Iota({2, 3})); },
                {"psum[axes=('j',)]", "unbound axis name: j (the mesh's axes are ('i'))"});
  // Known while tracing: the mesh and the axis sizes.
  auto sizes = pmap(jit([](Replica& r, const Array& x) { return x * static_cast<double>(r.axis_size("i") * r.num_replicas()); }),
                    {.axis = "i", .runtime = &rt});
  EXPECT_EQ(sizes(Iota({2, 1})).shards()[1].data.to_doubles(), (std::vector<double>{6.0}));
}

}  // namespace traced_pmap_test
}  // namespace
}  // namespace weft
