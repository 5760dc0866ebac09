// PopXL-style sessions (shared/spec/popxl-replication.md sections 1-6): replication factors, groupings,
// grouped variables and both retrieval modes, write_variable_data, remote buffers and remote_load /
// remote_store, replica-sharded buffers and their shard layout, the PopXL collectives on flattened tensors,
// host streams and their run() shapes, device memory capacity (the ZeRO point) and the error texts.
//
// Expected values are computed here from the spec's closed forms (group(r), first(g), shard k mod D, ...),
// not from the library. The randomized sweep against a naive reference is in session_property_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "weft/weft.hpp"

// RuntimeOptions and SessionOptions are meant for designated initializers, but some members have no
// default member initializer, so g++ -Wextra warns about every one left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace session_test {

// ---- helpers --------------------------------------------------------------------------------------------

std::int64_t Count(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// start, start + step, ... shaped `shape`.
Array Iota(const Shape& shape, DType dtype, double start = 0, double step = 1) {
  std::vector<double> v(static_cast<std::size_t>(Count(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return Array::from_doubles(v, shape, dtype);
}

void ExpectArray(const Array& actual, const Shape& shape, DType dtype, const std::vector<double>& values,
                 const std::string& what) {
  EXPECT_EQ(actual.shape(), shape) << what << ": shape " << shape_str(actual.shape());
  EXPECT_EQ(actual.dtype(), dtype) << what << ": dtype " << dtype_name(actual.dtype());
  if (actual.shape() != shape || actual.dtype() != dtype) return;
  EXPECT_EQ(actual.to_doubles(), values) << what << ": got " << to_string(actual);
}

// The exception of type E that f throws, as text; a test failure if it throws nothing or something else.
template <class E>
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}

void ExpectContains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

// The spec's closed forms for a (stride s, group size G) grouping of R replicas (section 1.3).
struct Grouping {
  int R, s, G;
  int num_groups() const { return R / G; }
  int group(int r) const { return (r % s) + s * (r / (s * G)); }
  int first(int g) const { return (g / s) * s * G + (g % s); }
  int member(int g, int k) const { return first(g) + k * s; }
  int rank(int r) const { return (r - first(group(r))) / s; }
};

// Row `row` (of `cols` elements) of a row-major value list.
std::vector<double> Row(const std::vector<double>& v, int row, std::int64_t cols) {
  return {v.begin() + row * cols, v.begin() + (row + 1) * cols};
}

// ---- replication factors and groupings ------------------------------------------------------------------

TEST(SessionTest, ReplicationFactorsInOneProcess) {
  Runtime rt({.device_count = 8});
  Session all({.runtime = &rt});
  EXPECT_EQ(all.replication_factor(), 8);
  EXPECT_EQ(all.instance_replication_factor(), 8);
  EXPECT_EQ(all.global_replica_offset(), 0);
  EXPECT_EQ(all.num_host_transfers(), 1);
  EXPECT_EQ(&all.runtime(), &rt);

  Session four({.replicas = 4, .num_host_transfers = 2, .runtime = &rt});
  EXPECT_EQ(four.replication_factor(), 4);
  EXPECT_EQ(four.instance_replication_factor(), 4);
  EXPECT_EQ(four.global_replica_offset(), 0);
  EXPECT_EQ(four.num_host_transfers(), 2);

  ExpectContains(ErrorOf<InvalidArgument>([&] { Session s({.replicas = 9, .runtime = &rt, .name = "big"}); }),
                 {"big", "9 replicas need as many devices", "the runtime has 8"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { Session s({.replicas = 2, .num_host_transfers = 0, .runtime = &rt}); }),
                 {"num_host_transfers must be >= 1, got 0"});
  // Issue 21, item 14: a negative count was taken as 0 (every device).
  ExpectContains(ErrorOf<InvalidArgument>([&] { Session s({.replicas = -1, .runtime = &rt, .name = "neg"}); }),
                 {"neg", "SessionOptions::replicas = -1 is not a number of replicas >= 1 (0 = every device)"});
}

// Spec section 1.3's table for R = 8, plus the defaults.
TEST(SessionTest, ReplicaGroupingMatchesTheSpecTable) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt});
  struct Case {
    int stride, size;
    std::vector<int> assignment;
  };
  const std::vector<Case> cases = {
      {1, 8, {0, 0, 0, 0, 0, 0, 0, 0}}, {1, 1, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, 2, {0, 0, 1, 1, 2, 2, 3, 3}},
      {2, 2, {0, 1, 0, 1, 2, 3, 2, 3}}, {1, 4, {0, 0, 0, 0, 1, 1, 1, 1}}, {2, 4, {0, 1, 0, 1, 0, 1, 0, 1}},
      {4, 2, {0, 1, 2, 3, 0, 1, 2, 3}}, {8, 1, {0, 1, 2, 3, 4, 5, 6, 7}}, {2, 0, {0, 1, 0, 1, 0, 1, 0, 1}},
  };
  for (const Case& c : cases) {
    const ReplicaGroups g = s.replica_grouping(c.stride, c.size);
    SCOPED_TRACE("stride " + std::to_string(c.stride) + " size " + std::to_string(c.size));
    EXPECT_EQ(g.num_replicas(), 8);
    EXPECT_EQ(g.assignment(), c.assignment);
    const int size = c.size == 0 ? 8 / c.stride : c.size;
    EXPECT_EQ(g.group_size(), size);
    EXPECT_EQ(g.num_groups(), 8 / size);
    // Members in increasing replica order.
    for (int group = 0; group < g.num_groups(); ++group) {
      std::vector<int> members;
      for (int r = 0; r < 8; ++r)
        if (c.assignment[r] == group) members.push_back(r);
      EXPECT_EQ(g.members(group), members);
    }
  }
  EXPECT_EQ(s.replica_grouping(), ReplicaGroups::all(8));
  EXPECT_THROW(s.replica_grouping(3, 2), InvalidArgument);  // 8 % 3 != 0
  EXPECT_THROW(s.replica_grouping(1, 9), InvalidArgument);
}

// ---- grouped on-device variables ---------------------------------------------------------------------------

// Every replica holds its group's row; get_tensor_data in both modes before and after runs that change the
// values replica by replica.
TEST(SessionTest, GroupedVariableRowsAndRetrievalModes) {
  Runtime rt({.device_count = 8});
  const std::vector<std::pair<int, int>> groupings = {{1, 8}, {1, 1}, {1, 2}, {2, 2}, {1, 4}, {2, 4}, {4, 2}, {2, 1}};
  for (auto [stride, size] : groupings) {
    SCOPED_TRACE("grouping stride " + std::to_string(stride) + " size " + std::to_string(size));
    Session s({.replicas = 8, .runtime = &rt});
    const Grouping ref{8, size == 1 ? 1 : stride, size};
    const int NG = ref.num_groups();
    const Shape S = {3};
    const Shape host_shape = NG > 1 ? Shape{NG, 3} : S;
    const Array host = Iota(host_shape, DType::i32, 1);  // row g = 3g+1 .. 3g+3
    const std::vector<double> h = host.to_doubles();
    const ReplicaGroups g = s.replica_grouping(stride, size);

    Variable one = s.variable(host, g, Retrieval::one_per_group, "w_one");
    Variable all = s.variable(host, g, Retrieval::all_replicas, "w_all");
    EXPECT_EQ(one.name(), "w_one");
    EXPECT_EQ(one.shape(), S);
    EXPECT_EQ(one.shape_on_host(), host_shape);
    EXPECT_EQ(one.dtype(), DType::i32);
    EXPECT_EQ(one.grouping(), g);
    EXPECT_EQ(one.retrieval(), Retrieval::one_per_group);
    EXPECT_EQ(all.retrieval(), Retrieval::all_replicas);
    EXPECT_FALSE(one.remote());
    EXPECT_FALSE(one.sharded());

    // Before any run: the host values.
    ExpectArray(s.get_tensor_data(one), host_shape, DType::i32, h, "one_per_group before run");
    std::vector<double> rows;
    for (int r = 0; r < 8; ++r) {
      auto row = Row(h, ref.group(r), 3);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    ExpectArray(s.get_tensor_data(all), {8, 3}, DType::i32, rows, "all_replicas before run");

    // A run sees each replica's group row, then adds 100 * (replica + 1) on every replica.
    HostStream out = s.d2h_stream(S, DType::i32, "seen");
    auto program = [&](Replica& r) {
      r.host_store(out, r.value(one));
      const Array delta = Array::scalar(100.0 * (r.index() + 1), DType::i32);
      r.value(one) += delta;
      r.value(all) += delta;
    };
    auto outs = s.run(program);
    ExpectArray(outs.at(out), {8, 3}, DType::i32, rows, "value() per replica");

    for (int pass = 1; pass <= 2; ++pass) {
      std::vector<double> per_group, per_replica;
      for (int group = 0; group < NG; ++group)
        for (double x : Row(h, group, 3)) per_group.push_back(x + 100.0 * pass * (ref.first(group) + 1));
      for (int r = 0; r < 8; ++r)
        for (double x : Row(h, ref.group(r), 3)) per_replica.push_back(x + 100.0 * pass * (r + 1));
      ExpectArray(s.get_tensor_data(one), host_shape, DType::i32, per_group,
                  "one_per_group after run " + std::to_string(pass));
      ExpectArray(s.get_tensor_data(all), {8, 3}, DType::i32, per_replica,
                  "all_replicas after run " + std::to_string(pass));
      if (pass == 1) s.run(program);  // the devices keep their values between runs
    }
  }
}

TEST(SessionTest, VariableValidation) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt, .name = "vs"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.variable(Iota({3, 2}, DType::f32), s.replica_grouping(1, 2), Retrieval::one_per_group, "w"); }),
                 {"vs", "variable w", "(3, 2)", "leading dimension of 4", "[[0, 1], [2, 3], [4, 5], [6, 7]]"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.variable(Array::scalar(1), s.replica_grouping(1, 4)); }),
                 {"leading dimension of 2"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.variable(Iota({2}, DType::f32), ReplicaGroups::strided(4, 1, 2)); }),
                 {"is for 4 replicas, but the session has 8"});
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.variable(Iota({2, 2}, DType::f32), ReplicaGroups::from_lists(8, {{0, 1, 2}, {3, 4, 5, 6, 7}}, true));
                 }),
                 {"groups of equal size"});
  // One group: the host data is the per-replica shape, a leading 1 stays part of it (spec 2.1).
  Variable v = s.variable(Iota({1, 4}, DType::f32));
  EXPECT_EQ(v.shape(), (Shape{1, 4}));
  EXPECT_EQ(v.shape_on_host(), (Shape{1, 4}));
  EXPECT_EQ(v.name(), "variable_0");
}

TEST(SessionTest, WriteVariableData) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .runtime = &rt});
  const Grouping ref{4, 1, 2};
  Variable v = s.variable(Iota({2, 3}, DType::f32), s.replica_grouping(1, 2), Retrieval::one_per_group, "w");
  Variable u = s.variable(Iota({3}, DType::f32), std::nullopt, Retrieval::all_replicas, "u");
  HostStream out = s.d2h_stream({3}, DType::f32);

  // Before the first run: the new value is what the devices get.
  const Array first = Iota({2, 3}, DType::f32, 10, 0.5);
  s.write_variable_data(v, first);
  ExpectArray(s.get_tensor_data(v), {2, 3}, DType::f32, first.to_doubles(), "written before run");
  auto outs = s.run([&](Replica& r) {
    r.host_store(out, r.value(v));
    r.value(v) += Array::scalar(r.index());
    r.value(u) += Array::scalar(r.index());
  });
  std::vector<double> rows;
  for (int r = 0; r < 4; ++r)
    for (double x : Row(first.to_doubles(), ref.group(r), 3)) rows.push_back(x);
  ExpectArray(outs.at(out), {4, 3}, DType::f32, rows, "devices got the written value");

  // After a run that changed the values: write replaces them on every replica of the group...
  const Array second = Iota({2, 3}, DType::f32, -7);
  s.write_variable_data(v, second);
  ExpectArray(s.get_tensor_data(v), {2, 3}, DType::f32, second.to_doubles(), "written after run");
  // ... and the other variables keep their newest (device) values.
  std::vector<double> u_rows;
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) u_rows.push_back(j + r);
  ExpectArray(s.get_tensor_data(u), {4, 3}, DType::f32, u_rows, "other variable after write");
  outs = s.run([&](Replica& r) { r.host_store(out, r.value(v)); });
  rows.clear();
  for (int r = 0; r < 4; ++r)
    for (double x : Row(second.to_doubles(), ref.group(r), 3)) rows.push_back(x);
  ExpectArray(outs.at(out), {4, 3}, DType::f32, rows, "devices got the second written value");

  ExpectContains(ErrorOf<InvalidArgument>([&] { s.write_variable_data(v, Iota({3}, DType::f32)); }),
                 {"write_variable_data(w)", "expected float32(2, 3) (shape_on_host)", "got float32(3,)"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.write_variable_data(v, Iota({2, 3}, DType::i32)); }),
                 {"write_variable_data(w)", "expected float32(2, 3)", "got int32(2, 3)"});
  Session other({.replicas = 4, .runtime = &rt});
  ExpectContains(ErrorOf<InvalidArgument>([&] { other.write_variable_data(v, second); }), {"belongs to another session"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { other.get_tensor_data(v); }), {"belongs to another session"});
}

// ---- remote buffers --------------------------------------------------------------------------------------

TEST(SessionTest, RemoteBufferEntriesLoadAndStore) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .runtime = &rt});
  const Grouping ref{4, 2, 2};  // {0, 2}, {1, 3}
  RemoteBuffer rb = s.remote_buffer({3}, DType::i32, 4);
  EXPECT_EQ(rb.shape(), (Shape{3}));
  EXPECT_EQ(rb.dtype(), DType::i32);
  EXPECT_EQ(rb.entries(), 4);
  EXPECT_EQ(rb.shard_over(), 0);
  EXPECT_TRUE(rb.meta_shape().empty());
  const Array host = Iota({2, 3}, DType::i32, 1);
  const std::vector<double> h = host.to_doubles();
  Variable rv = s.remote_variable(host, rb, 2, s.replica_grouping(2, 2), Retrieval::all_replicas, "rw");
  EXPECT_TRUE(rv.remote());
  EXPECT_FALSE(rv.sharded());
  EXPECT_EQ(rv.shape(), (Shape{3}));

  HostStream by_int = s.d2h_stream({3}, DType::i32), by_scalar = s.d2h_stream({3}, DType::i32),
             empty = s.d2h_stream({3}, DType::i32);
  auto outs = s.run([&](Replica& r) {
    const Array a = r.remote_load(rb, 2);
    r.host_store(by_int, a);
    r.host_store(by_scalar, r.remote_load(rb, Array::scalar(2, DType::i32)));
    r.host_store(empty, r.remote_load(rb, 0));  // entries start zeroed
    r.remote_store(rb, Array::scalar(3, DType::i32), a + 1000.0 * r.index());
    r.remote_store(rb, 2, a + 1.0);
  });
  std::vector<double> rows, plus1, plus1000;
  for (int r = 0; r < 4; ++r)
    for (double x : Row(h, ref.group(r), 3)) {
      rows.push_back(x);
      plus1.push_back(x + 1);
      plus1000.push_back(x + 1000.0 * r);
    }
  ExpectArray(outs.at(by_int), {4, 3}, DType::i32, rows, "remote_load(buffer, 2)");
  ExpectArray(outs.at(by_scalar), {4, 3}, DType::i32, rows, "remote_load(buffer, scalar 2)");
  ExpectArray(outs.at(empty), {4, 3}, DType::i32, std::vector<double>(12, 0.0), "untouched entry");
  // The variable's storage is entry 2: the store is what get_tensor_data reads.
  ExpectArray(s.get_tensor_data(rv), {4, 3}, DType::i32, plus1, "remote variable after remote_store");

  outs = s.run([&](Replica& r) {
    r.host_store(by_int, r.remote_load(rb, Array::scalar(3, DType::i64)));
    r.host_store(by_scalar, r.remote_load(rb, 2));
  });
  ExpectArray(outs.at(by_int), {4, 3}, DType::i32, plus1000, "entry 3 stored with a device-scalar entry");
  ExpectArray(outs.at(by_scalar), {4, 3}, DType::i32, plus1, "entry 2 kept between runs");

  // write_variable_data on a remote variable fills its entry on every replica (all_replicas, one group row
  // per group).
  s.write_variable_data(rv, Iota({2, 3}, DType::i32, 50));
  outs = s.run([&](Replica& r) { r.host_store(by_int, r.remote_load(rb, 2)); });
  rows.clear();
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) rows.push_back(50 + 3 * ref.group(r) + j);
  ExpectArray(outs.at(by_int), {4, 3}, DType::i32, rows, "entry 2 after write_variable_data");
}

TEST(SessionTest, RemoteBufferErrors) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .runtime = &rt, .name = "rs"});
  RemoteBuffer rb = s.remote_buffer({3}, DType::i32, 4);  // buffer 1
  RemoteBuffer second = s.remote_buffer({2}, DType::f32);  // buffer 2
  EXPECT_EQ(second.entries(), 1);
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_buffer({3}, DType::i32, 0); }), {"entries >= 1, got 0"});

  auto run_error = [&](const std::function<void(Replica&)>& program) { return ErrorOf<InvalidArgument>([&] { s.run(program); }); };
  ExpectContains(run_error([&](Replica& r) { r.remote_load(rb, 4); }),
                 {"(CpuDevice(id=",  // whichever replica fails first is named
                  " failed: remote_load: entry 4 is out of range for remote buffer 1 with 4 entries"});
  ExpectContains(run_error([&](Replica& r) { r.remote_load(rb, -1); }), {"entry -1 is out of range for remote buffer 1"});
  ExpectContains(run_error([&](Replica& r) { r.remote_load(second, Array::scalar(1, DType::i32)); }),
                 {"remote_load: entry 1 is out of range for remote buffer 2 with 1 entries"});
  ExpectContains(run_error([&](Replica& r) { r.remote_store(rb, 4, Iota({3}, DType::i32)); }),
                 {"remote_store: entry 4 is out of range for remote buffer 1 with 4 entries"});
  ExpectContains(run_error([&](Replica& r) { r.remote_store(rb, 0, Iota({4}, DType::i32)); }),
                 {"remote_store: remote buffer 1 holds int32(3,) entries, got int32(4,)"});
  ExpectContains(run_error([&](Replica& r) { r.remote_store(rb, 0, Iota({3}, DType::f32)); }),
                 {"remote buffer 1 holds int32(3,) entries, got float32(3,)"});
  ExpectContains(run_error([&](Replica& r) { r.remote_load(rb, Array::scalar(1.5, DType::f32)); }),
                 {"the entry must be an integer scalar, got float32()"});
  ExpectContains(run_error([&](Replica& r) { r.remote_load(rb, Iota({2}, DType::i32)); }),
                 {"the entry must be an integer scalar, got int32(2,)"});

  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_variable(Iota({3}, DType::i32), rb, 4, std::nullopt, Retrieval::one_per_group, "rv"); }),
                 {"variable rv: entry 4 is out of range for remote buffer 1 with 4 entries"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_variable(Iota({4}, DType::i32), rb, 0, std::nullopt, Retrieval::one_per_group, "rv"); }),
                 {"variable rv is int32(4,) per replica but remote buffer 1 holds int32(3,) entries"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_variable(Iota({3}, DType::f32), rb); }), {"float32(3,) per replica"});
  Variable rv = s.remote_variable(Iota({3}, DType::i32), rb, 1, std::nullopt, Retrieval::one_per_group, "rv");
  ExpectContains(run_error([&](Replica& r) { r.value(rv); }), {"value(rv): the variable lives in remote buffer 1; read it with remote_load"});
  Session other({.replicas = 4, .runtime = &rt});
  ExpectContains(ErrorOf<InvalidArgument>([&] { other.remote_variable(Iota({3}, DType::i32), rb); }), {"belongs to another session"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { other.run([&](Replica& r) { r.remote_load(rb, 0); }); }),
                 {"remote_load: this remote buffer belongs to another session"});
  // Still usable after the failed runs.
  HostStream out = s.d2h_stream({3}, DType::i32);
  auto outs = s.run([&](Replica& r) { r.host_store(out, r.remote_load(rb, 1)); });
  ExpectArray(outs.at(out), {4, 3}, DType::i32, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, "after errors");
}

// A device-scalar entry is range-checked as the integer it is, not after narrowing to int: entry 2^32 + 1
// must not load entry 1. The entry "must be an integer scalar", and bool is not an integer in weft.
TEST(SessionTest, DeviceScalarEntryIsRangeCheckedWithoutNarrowing) {
  Runtime rt({.device_count = 2});
  Session s({.replicas = 2, .runtime = &rt});
  RemoteBuffer rb = s.remote_buffer({1}, DType::i32, 2);
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.run([&](Replica& r) { r.remote_load(rb, Array::scalar(4294967297.0, DType::i64)); });
                 }),
                 {"remote_load: entry 4294967297 is out of range for remote buffer 1 with 2 entries"});
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.run([&](Replica& r) { r.remote_store(rb, Array::scalar(-4294967295.0, DType::i64), Iota({1}, DType::i32)); });
                 }),
                 {"remote_store: entry -4294967295 is out of range for remote buffer 1 with 2 entries"});
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.run([&](Replica& r) { r.remote_load(rb, Array::scalar(1, DType::boolean)); });
                 }),
                 {"the entry must be an integer scalar, got bool()"});
}

// After a run that fails part-way the devices keep what the replicas did before the failure; get_tensor_data
// must show the devices' values (as it does once any later run has completed), not the pre-run host copy.
TEST(SessionTest, GetTensorDataAfterAFailedRunShowsTheDevices) {
  Runtime rt({.device_count = 2});
  Session s({.replicas = 2, .runtime = &rt});
  Variable one = s.variable(Iota({2}, DType::f32), std::nullopt, Retrieval::one_per_group, "one");
  Variable all = s.variable(Iota({2}, DType::f32), std::nullopt, Retrieval::all_replicas, "all");
  auto add = [&](Replica& r, double x) {
    r.value(one) += Array::scalar(x);
    r.value(all) += Array::scalar(x);
  };
  s.run([&](Replica& r) { add(r, 1); });
  ExpectArray(s.get_tensor_data(one), {2}, DType::f32, {1, 2}, "one_per_group after the first run");
  EXPECT_THROW(s.run([&](Replica& r) {
    add(r, 10);
    throw InvalidArgument("stop");
  }),
               InvalidArgument);
  const Array one_after_failure = s.get_tensor_data(one), all_after_failure = s.get_tensor_data(all);
  s.run([](Replica&) {});
  ExpectArray(s.get_tensor_data(one), {2}, DType::f32, {11, 12}, "one_per_group after a later no-op run");
  ExpectArray(s.get_tensor_data(all), {2, 2}, DType::f32, {11, 12, 11, 12}, "all_replicas after a later no-op run");
  ExpectArray(one_after_failure, {2}, DType::f32, {11, 12}, "one_per_group right after the failed run");
  ExpectArray(all_after_failure, {2, 2}, DType::f32, {11, 12, 11, 12}, "all_replicas right after the failed run");
}

// A variable whose upload runs out of device memory on one replica must not keep the other replicas'
// copies charged (its handle is never returned, so nothing could free them before the session ends).
TEST(SessionTest, FailedVariableUploadHoldsNoDeviceMemory) {
  Runtime rt({.device_count = 4, .device_memory = 1024});
  Session s({.replicas = 4, .runtime = &rt});
  Variable a = s.variable(Iota({4}, DType::f32));
  s.run([&](Replica& r) { r.value(a) += Array::scalar(1); });  // weights are on the devices now
  std::vector<std::int64_t> before;
  for (const Device& d : rt.devices()) before.push_back(rt.memory_in_use(d));
  auto last = rt.memory_account(rt.devices()[3]);
  last->charge(800);  // something else on device 3: the new variable fits on devices 0-2 only
  ExpectContains(ErrorOf<OutOfMemoryError>([&] { s.variable(Iota({150}, DType::f32)); }),
                 {"CpuDevice(id=3, process=0)", "asked 600 bytes"});
  last->release(800);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(rt.memory_in_use(rt.devices()[i]), before[static_cast<std::size_t>(i)]) << rt.devices()[i];
  ExpectArray(s.get_tensor_data(a), {4}, DType::f32, {1, 2, 3, 4}, "the other variable");
  EXPECT_NO_THROW(s.weights_from_host()) << "the failed variable must not be part of the session";
  ExpectArray(s.get_tensor_data(a), {4}, DType::f32, {1, 2, 3, 4}, "after weights_from_host");
}

// ---- host streams ------------------------------------------------------------------------------------------

TEST(SessionTest, HostStreamShapes) {
  Runtime rt({.device_count = 4});
  struct Case {
    int replicas, transfers;
    Shape io;
  };
  const std::vector<Case> cases = {{1, 1, {2}}, {4, 1, {4, 2}}, {1, 3, {3, 2}}, {4, 3, {3, 4, 2}}, {2, 2, {2, 2, 2}}};
  for (const Case& c : cases) {
    SCOPED_TRACE("replicas " + std::to_string(c.replicas) + " transfers " + std::to_string(c.transfers));
    Session s({.replicas = c.replicas, .num_host_transfers = c.transfers, .runtime = &rt});
    HostStream in = s.h2d_stream({2}, DType::i32, "x");
    HostStream out = s.d2h_stream({2}, DType::i32, "y");
    HostStream idx = s.d2h_stream({}, DType::i32, "idx");
    EXPECT_EQ(in.name(), "x");
    EXPECT_TRUE(in.host_to_device());
    EXPECT_FALSE(out.host_to_device());
    EXPECT_EQ(out.shape(), (Shape{2}));
    EXPECT_EQ(out.dtype(), DType::i32);
    const Array input = Iota(c.io, DType::i32, 1);
    auto outs = s.run(
        [&](Replica& r) {
          for (int t = 0; t < c.transfers; ++t) {
            r.host_store(out, r.host_load(in) * 10.0 + static_cast<double>(t));
            r.host_store(idx, Array::scalar(r.index(), DType::i32));
          }
        },
        {{in, input}});
    ASSERT_EQ(outs.size(), 2u);
    // Layout: (transfer, replica, element), size-1 dimensions omitted.
    std::vector<double> expected, expected_idx;
    const std::vector<double> x = input.to_doubles();
    for (int t = 0; t < c.transfers; ++t)
      for (int r = 0; r < c.replicas; ++r) {
        expected_idx.push_back(r);
        for (int j = 0; j < 2; ++j) expected.push_back(x[(t * c.replicas + r) * 2 + j] * 10 + t);
      }
    ExpectArray(outs.at(out), c.io, DType::i32, expected, "y");
    Shape idx_shape(c.io.begin(), c.io.end() - 1);
    ExpectArray(outs.at(idx), idx_shape, DType::i32, expected_idx, "idx");
  }
}

TEST(SessionTest, HostStreamErrors) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .num_host_transfers = 3, .runtime = &rt, .name = "hs"});
  HostStream in = s.h2d_stream({2}, DType::i32, "x");
  HostStream out = s.d2h_stream({2}, DType::i32, "y");
  const Array good = Iota({3, 4, 2}, DType::i32);
  auto noop = [](Replica&) {};
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run(noop); }),
                 {"hs: run(): no input for host-to-device stream x (expected int32(3, 4, 2))"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run(noop, {{in, Iota({4, 2}, DType::i32)}}); }),
                 {"input for stream x is int32(4, 2), expected int32(3, 4, 2)",
                  "(num_host_transfers if > 1) + (replicas if > 1) + stream shape"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run(noop, {{in, Iota({3, 4, 2}, DType::f32)}}); }),
                 {"input for stream x is float32(3, 4, 2), expected int32(3, 4, 2)"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run(noop, {{in, good}, {out, good}}); }),
                 {"input given for y, a device-to-host stream"});
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.run([&](Replica& r) {
                     for (int t = 0; t < 4; ++t) r.host_load(in);
                   }, {{in, good}});
                 }),
                 {"host_load(x) called 4 times in one run, but num_host_transfers is 3"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run([&](Replica& r) { r.host_store(out, Iota({3}, DType::i32)); }, {{in, good}}); }),
                 {"host_store(y): the stream carries int32(2,), got int32(3,)"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run([&](Replica& r) { r.host_load(out); }, {{in, good}}); }),
                 {"host_load(y): a device-to-host stream"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run([&](Replica& r) { r.host_store(in, Iota({2}, DType::i32)); }, {{in, good}}); }),
                 {"host_store(x): a host-to-device stream"});
  Session other({.replicas = 4, .runtime = &rt});
  HostStream foreign = other.h2d_stream({2}, DType::i32);
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run(noop, {{in, good}, {foreign, Iota({4, 2}, DType::i32)}}); }),
                 {"belongs to another session"});
  // Fewer transfers than num_host_transfers are an error, never rows of zeros (issue 8, item 10).
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.run([&](Replica& r) { r.host_store(out, r.host_load(in)); }, {{in, good}}); }),
                 {"hs: run(): replica 0 (CpuDevice(id=0, process=0)) wrote 1 of 3 transfers of device-to-host stream y"});
}

// ---- device memory: the ZeRO point ----------------------------------------------------------------------

TEST(SessionTest, DeviceMemoryCapacityAndRemoteBuffers) {
  Runtime rt({.device_count = 4, .device_memory = 1024});
  const Array big = Iota({384}, DType::f32, 1);  // 1.5 KiB per replica
  {
    Session s({.replicas = 4, .runtime = &rt});
    Variable v = s.variable(big);
    ExpectContains(ErrorOf<OutOfMemoryError>([&] { s.run([](Replica&) {}); }),
                   {"device memory exhausted on CpuDevice(id=0, process=0)", "asked 1536 bytes", "1024 bytes free of 1024"});
  }
  for (const Device& d : rt.devices()) EXPECT_EQ(rt.memory_in_use(d), 0) << d;

  // The same data in a remote buffer lives in host memory.
  Session s({.replicas = 4, .runtime = &rt});
  RemoteBuffer rb = s.remote_buffer({384}, DType::f32);
  Variable rv = s.remote_variable(big, rb);
  // Sharded over the 4 replicas each replica loads a quarter (384 bytes), which fits, with room for the
  // temporary of an update.
  RemoteBuffer sb = s.replica_sharded_buffer({384}, DType::f32);
  EXPECT_EQ(sb.shape(), (Shape{96}));
  Variable sv = s.remote_replica_sharded_variable(big, sb, 0, std::nullopt, Retrieval::one_per_group, "zero");
  HostStream out = s.d2h_stream({96}, DType::f32);
  auto outs = s.run([&](Replica& r) {
    Array shard = r.remote_load(sb, 0);
    r.host_store(out, shard);
    r.remote_store(sb, 0, shard + 1.0);
  });
  ExpectArray(outs.at(out), {4, 96}, DType::f32, big.to_doubles(), "shards of the remote weight");
  ExpectArray(s.get_tensor_data(rv), {384}, DType::f32, big.to_doubles(), "remote weight");
  ExpectArray(s.get_tensor_data(sv), {384}, DType::f32, (big + 1.0).to_doubles(), "sharded remote weight");
  for (const Device& d : rt.devices()) EXPECT_EQ(rt.memory_in_use(d), 0) << d;
  // Loading the whole weight onto a device does not fit.
  ExpectContains(ErrorOf<OutOfMemoryError>([&] { s.run([&](Replica& r) { r.remote_load(rb, 0); }); }),
                 {"device memory exhausted on CpuDevice(id=", "asked 1536 bytes"});

  // An on-device replica-sharded variable charges each device its shard only.
  Session on_device({.replicas = 4, .runtime = &rt});
  Variable w = on_device.replica_sharded_variable(big);
  EXPECT_TRUE(w.sharded());
  EXPECT_FALSE(w.remote());
  on_device.run([&](Replica& r) { r.value(w) += Array::scalar(2); });
  for (const Device& d : rt.devices()) EXPECT_EQ(rt.memory_in_use(d), 384) << d;
  ExpectArray(on_device.get_tensor_data(w), {384}, DType::f32, (big + 2.0).to_doubles(), "on-device sharded");
}

// Replacing a variable's value on the devices (write_variable_data, weights_from_host) overwrites the copy
// that is there: a variable that takes more than half of a device's memory can still be written.
TEST(SessionTest, RewritingAVariableNeedsNoSecondDeviceCopy) {
  Runtime rt({.device_count = 2, .device_memory = 1024});
  Session s({.replicas = 2, .runtime = &rt});
  Variable a = s.variable(Array::zeros({150}), std::nullopt, Retrieval::one_per_group, "a");  // 600 bytes
  HostStream out = s.d2h_stream({150}, DType::f32);
  s.run([](Replica&) {});
  EXPECT_NO_THROW(s.write_variable_data(a, Iota({150}, DType::f32)));
  EXPECT_NO_THROW(s.weights_from_host());
  for (const Device& d : rt.devices()) EXPECT_EQ(rt.memory_in_use(d), 600) << d;
  auto outs = s.run([&](Replica& r) { r.host_store(out, r.value(a)); });
  std::vector<double> expected = Iota({150}, DType::f32).to_doubles();
  expected.insert(expected.end(), expected.begin(), expected.end());
  ExpectArray(outs.at(out), {2, 150}, DType::f32, expected, "devices after write_variable_data");
}

// ---- names ---------------------------------------------------------------------------------------------

TEST(SessionTest, RetrievalAndReduceOpNames) {
  EXPECT_EQ(retrieval_from_name("one_per_group"), Retrieval::one_per_group);
  EXPECT_EQ(retrieval_from_name("all_replicas"), Retrieval::all_replicas);
  EXPECT_STREQ(retrieval_name(Retrieval::one_per_group), "one_per_group");
  EXPECT_STREQ(retrieval_name(Retrieval::all_replicas), "all_replicas");
  for (const char* bad : {"all", "", "One_per_group", "all_reduce_replicas"})
    ExpectContains(ErrorOf<InvalidArgument>([&] { retrieval_from_name(bad); }),
                   {std::string("invalid retrieval_mode \"") + bad + "\"", "use one_per_group or all_replicas"});
  EXPECT_EQ(reduce_op_from_name("add"), ReduceOp::sum);
  EXPECT_EQ(reduce_op_from_name("mean"), ReduceOp::mean);
  EXPECT_EQ(reduce_op_from_name("mul"), ReduceOp::prod);  // a true product, not PopXL's mean
  EXPECT_EQ(reduce_op_from_name("min"), ReduceOp::min);
  EXPECT_EQ(reduce_op_from_name("max"), ReduceOp::max);
  ExpectContains(ErrorOf<InvalidArgument>([] { reduce_op_from_name("square_add"); }), {"\"square_add\""});
}

// ---- replica-sharded buffers and variables -------------------------------------------------------------

TEST(SessionTest, ReplicaShardedBufferValidation) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt, .name = "rts"});
  const ReplicaGroups g = s.replica_grouping(1, 4);  // 2 groups of 4
  for (int bad : {3, 8, -1})
    ExpectContains(ErrorOf<InvalidArgument>([&] { s.replica_sharded_buffer({2, 5}, DType::i32, g, bad); }),
                   {"rts: replica_sharded_buffer: shard_over " + std::to_string(bad), "must divide the group size 4"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.replica_sharded_buffer({3, 5}, DType::i32, g, 2); }),
                 {"shape (3, 5) must start with the number of groups 2"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.replica_sharded_buffer({}, DType::i32, g); }),
                 {"must start with the number of groups 2"});

  RemoteBuffer b = s.replica_sharded_buffer({2, 5}, DType::i32, g, 2, 3);
  EXPECT_EQ(b.shape(), (Shape{3}));  // ceil(5 / 2)
  EXPECT_EQ(b.meta_shape(), (Shape{5}));
  EXPECT_EQ(b.shard_over(), 2);
  EXPECT_EQ(b.entries(), 3);
  RemoteBuffer d = s.replica_sharded_buffer({2, 5}, DType::i32, g);
  EXPECT_EQ(d.shard_over(), 4);
  EXPECT_EQ(d.shape(), (Shape{2}));
  RemoteBuffer one = s.replica_sharded_buffer({5}, DType::f32);
  EXPECT_EQ(one.shard_over(), 8);
  EXPECT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(one.meta_shape(), (Shape{5}));

  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.remote_replica_sharded_variable(Iota({2, 6}, DType::i32), b, 0, g, Retrieval::one_per_group, "w");
                 }),
                 {"variable w is int32(6,) per group but replica-sharded buffer", "was made for int32(5,)"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_replica_sharded_variable(Iota({2, 5}, DType::f32), b, 0, g); }),
                 {"float32(5,) per group"});
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.remote_replica_sharded_variable(Iota({2, 5}, DType::i32), b, 3, g, Retrieval::one_per_group, "w");
                 }),
                 {"variable w: entry 3 is out of range for remote buffer 1 with 3 entries"});
  RemoteBuffer plain = s.remote_buffer({5}, DType::i32);
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_replica_sharded_variable(Iota({2, 5}, DType::i32), plain, 0, g); }),
                 {"is not replica-sharded; make it with replica_sharded_buffer"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.remote_variable(Iota({2, 5}, DType::i32), b, 0, g); }),
                 {"is replica-sharded; use remote_replica_sharded_variable"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { s.replica_sharded_variable(Iota({2, 5}, DType::i32), g, 3); }),
                 {"shard_over 3 must divide the group size 4"});

  Session single({.replicas = 1, .runtime = &rt});
  ExpectContains(ErrorOf<InvalidArgument>([&] { single.replica_sharded_variable(Iota({4}, DType::i32)); }),
                 {"needs more than one replica, the session has 1"});
}

// docs/popxl/distributed.rst "Using shard_over": w = [1, 2], 4 replicas, shard_over 2 -> [1], [2], [1], [2].
TEST(SessionTest, ShardOverDocExample) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .runtime = &rt});
  Variable w = s.replica_sharded_variable(Array::from_list<float>({1, 2}), std::nullopt, 2);
  HostStream out = s.d2h_stream({1}, DType::f32), full = s.d2h_stream({2}, DType::f32);
  auto outs = s.run([&](Replica& r) {
    r.host_store(out, r.value(w));
    r.host_store(full, r.gather_shards(r.value(w), s.replica_grouping(1, 2), {2}));
  });
  ExpectArray(outs.at(out), {4, 1}, DType::f32, {1, 2, 1, 2}, "shards");
  ExpectArray(outs.at(full), {4, 2}, DType::f32, {1, 2, 1, 2, 1, 2, 1, 2}, "gathered");
}

// 30 elements over 4 replicas: shards of ceil(30 / 4) = 8 in natural order, the last one zero-padded.
TEST(SessionTest, ShardPaddingAndRoundTrip) {
  Runtime rt({.device_count = 4});
  Session s({.replicas = 4, .runtime = &rt});
  const Array host = Iota({5, 6}, DType::i32, 1);
  Variable w = s.replica_sharded_variable(host, std::nullopt, 0, Retrieval::all_replicas, "w");
  EXPECT_EQ(w.shape(), (Shape{5, 6}));
  HostStream out = s.d2h_stream({8}, DType::i32), full = s.d2h_stream({5, 6}, DType::i32);
  auto outs = s.run([&](Replica& r) {
    r.host_store(out, r.value(w));
    r.host_store(full, r.gather_shards(r.value(w), s.replica_grouping(), {5, 6}));
  });
  std::vector<double> shards;
  for (int i = 0; i < 32; ++i) shards.push_back(i < 30 ? i + 1 : 0);
  ExpectArray(outs.at(out), {4, 8}, DType::i32, shards, "shards");
  std::vector<double> gathered;
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 30; ++i) gathered.push_back(i + 1);
  ExpectArray(outs.at(full), {4, 5, 6}, DType::i32, gathered, "gathered");
  // all_replicas for a sharded variable: every replica's row is its group's full value.
  ExpectArray(s.get_tensor_data(w), {4, 5, 6}, DType::i32, gathered, "round trip");
  // write_variable_data re-shards.
  s.write_variable_data(w, Iota({5, 6}, DType::i32, 100));
  outs = s.run([&](Replica& r) { r.host_store(out, r.value(w)); });
  shards.clear();
  for (int i = 0; i < 32; ++i) shards.push_back(i < 30 ? i + 100 : 0);
  ExpectArray(outs.at(out), {4, 8}, DType::i32, shards, "shards after write");
}

// The session.hpp example, with a grouping of 2 groups of 4, shard_over 2 and a gather over the shard domain
// (stride 2, size 2).
TEST(SessionTest, GroupedRemoteShardedVariable) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt});
  const ReplicaGroups g = s.replica_grouping(2, 4);  // {0,2,4,6}, {1,3,5,7}
  const Grouping ref{8, 2, 4};
  RemoteBuffer buf = s.replica_sharded_buffer({2, 16}, DType::i32, g, 2);
  EXPECT_EQ(buf.shape(), (Shape{8}));
  EXPECT_EQ(buf.meta_shape(), (Shape{16}));
  const Array host = Iota({2, 16}, DType::i32, 1);  // row g = 16g+1 .. 16g+16
  Variable w = s.remote_replica_sharded_variable(host, buf, 0, g, Retrieval::all_replicas, "w");
  EXPECT_TRUE(w.sharded());
  EXPECT_TRUE(w.remote());
  HostStream shard_out = s.d2h_stream({8}, DType::i32), full_out = s.d2h_stream({16}, DType::i32);
  auto outs = s.run([&](Replica& r) {
    Array shard = r.remote_load(buf, 0);
    r.host_store(shard_out, shard);
    r.host_store(full_out, r.gather_shards(shard, s.replica_grouping(2, 2), buf.meta_shape()));
    r.remote_store(buf, 0, shard + 2.0);
  });
  std::vector<double> shards, full, updated;
  for (int r = 0; r < 8; ++r) {
    const int group = ref.group(r), k = ref.rank(r) % 2;
    for (int j = 0; j < 8; ++j) shards.push_back(16 * group + 8 * k + j + 1);
    for (int j = 0; j < 16; ++j) {
      full.push_back(16 * group + j + 1);
      updated.push_back(16 * group + j + 3);
    }
  }
  ExpectArray(outs.at(shard_out), {8, 8}, DType::i32, shards, "member k holds shard k mod 2");
  ExpectArray(outs.at(full_out), {8, 16}, DType::i32, full, "gathered over the shard domain");
  ExpectArray(s.get_tensor_data(w), {8, 16}, DType::i32, updated, "all_replicas after the update");

  // The header's variant with the default shard_over (= group size 4): shards of 4 do not make a (16,)
  // tensor from 2 members.
  RemoteBuffer wide = s.replica_sharded_buffer({2, 16}, DType::i32, g);
  EXPECT_EQ(wide.shard_over(), 4);
  ExpectContains(ErrorOf<InvalidArgument>([&] {
                   s.run([&](Replica& r) { r.gather_shards(r.remote_load(wide, 0), s.replica_grouping(2, 2), wide.meta_shape()); });
                 }),
                 {"gather_shards: 2 shards of 4 elements cannot hold a tensor of shape (16,)"});
}

// ---- PopXL collectives on flattened tensors -----------------------------------------------------------

// tests/integration/popxl/test_replica_grouping.py: 8 one-element replicas, only member 0 of each group gets
// the group's reduction, the other members get the zero padding. "mul" is a true product.
TEST(SessionTest, ReplicatedReduceScatterOneElement) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt});
  const ReplicaGroups g = s.replica_grouping(2, 2);  // {0,2}, {1,3}, {4,6}, {5,7}
  const Grouping ref{8, 2, 2};
  const std::vector<const char*> ops = {"add", "mean", "mul", "min", "max"};
  std::vector<HostStream> outs_rs, outs_ar;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    outs_rs.push_back(s.d2h_stream({1}, DType::f32, std::string("rs_") + ops[i]));
    outs_ar.push_back(s.d2h_stream({1}, DType::f32, std::string("ar_") + ops[i]));
  }
  auto outs = s.run([&](Replica& r) {
    const Array x = Array::full({1}, r.index() + 1.0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      r.host_store(outs_rs[i], r.replicated_reduce_scatter(x, g, reduce_op_from_name(ops[i])));
      r.host_store(outs_ar[i], r.all_reduce(x, g, reduce_op_from_name(ops[i])));
    }
  });
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::vector<double> rs, ar;
    for (int r = 0; r < 8; ++r) {
      const int group = ref.group(r);
      const double a = ref.member(group, 0) + 1, b = ref.member(group, 1) + 1;
      const std::string op = ops[i];
      const double v = op == "add" ? a + b : op == "mean" ? (a + b) / 2 : op == "mul" ? a * b : op == "min" ? a : b;
      ar.push_back(v);
      rs.push_back(ref.rank(r) == 0 ? v : 0);
    }
    ExpectArray(outs.at(outs_rs[i]), {8, 1}, DType::f32, rs, std::string("replicated_reduce_scatter ") + ops[i]);
    ExpectArray(outs.at(outs_ar[i]), {8, 1}, DType::f32, ar, std::string("all_reduce ") + ops[i]);
  }
}

// A (2, 3) tensor over groups of 4: flattened, padded to 8, chunks of 2; replica_sharded_slice takes the
// same chunk of the replica's own value; gather_shards is the inverse.
TEST(SessionTest, ReduceScatterSliceAndGatherShards) {
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt});
  const ReplicaGroups g = s.replica_grouping(1, 4);
  const Grouping ref{8, 1, 4};
  HostStream rs = s.d2h_stream({2}, DType::i32), slice = s.d2h_stream({2}, DType::i32),
             back = s.d2h_stream({2, 3}, DType::i32), gathered = s.d2h_stream({4, 2, 3}, DType::i32);
  auto outs = s.run([&](Replica& r) {
    const Array x = Iota({2, 3}, DType::i32, 10.0 * r.index());
    r.host_store(rs, r.replicated_reduce_scatter(x, g));
    const Array mine = r.replica_sharded_slice(x, g);
    r.host_store(slice, mine);
    r.host_store(back, r.gather_shards(mine, g, {2, 3}));
    r.host_store(gathered, r.all_gather(x, g));
  });
  std::vector<double> e_rs, e_slice, e_back, e_gathered;
  for (int r = 0; r < 8; ++r) {
    const int group = ref.group(r), k = ref.rank(r);
    for (int j = 0; j < 2; ++j) {
      const int e = 2 * k + j;
      double sum = 0;
      for (int m = 0; m < 4; ++m) sum += e < 6 ? 10.0 * ref.member(group, m) + e : 0;
      e_rs.push_back(sum);
      e_slice.push_back(e < 6 ? 10.0 * r + e : 0);
    }
    for (int m = 0; m < 4; ++m) {
      const int src = ref.member(group, m);
      for (int e = 0; e < 6; ++e) {
        if (m == 0) e_back.push_back(10.0 * (ref.member(group, e / 2)) + e);
        e_gathered.push_back(10.0 * src + e);
      }
    }
  }
  ExpectArray(outs.at(rs), {8, 2}, DType::i32, e_rs, "replicated_reduce_scatter add");
  ExpectArray(outs.at(slice), {8, 2}, DType::i32, e_slice, "replica_sharded_slice");
  ExpectArray(outs.at(back), {8, 2, 3}, DType::i32, e_back, "gather_shards of the slices");
  ExpectArray(outs.at(gathered), {8, 4, 2, 3}, DType::i32, e_gathered, "all_gather in member order");
}

}  // namespace session_test
}  // namespace
}  // namespace weft
