// The example at the top of include/weft/session.hpp, compiled and run (issue 10, item 1: it did not
// compile). The lines between the markers are the header's example without its "//   " prefix, and
// tests/package/doc_example.cmake (ctest package_session_example_in_sync) fails when the two differ, so the
// comment cannot drift from code that builds. After the example, the values are checked: exit 1 if wrong.
#include <cstdint>
#include <iostream>
#include <weft/weft.hpp>

using namespace weft;

int main() {
  // ---- begin: the example of include/weft/session.hpp ----
  Runtime rt({.device_count = 8});
  Session s({.replicas = 8, .runtime = &rt});
  ReplicaGroups g = s.replica_grouping(/*stride=*/2, /*group_size=*/4);   // groups {0,2,4,6} {1,3,5,7}
  RemoteBuffer buf = s.replica_sharded_buffer({2, 16}, DType::i32, g, /*shard_over=*/2);
  Array w_host = Array::arange(32, DType::i32).reshape({2, 16});          // one row per group
  Variable w = s.remote_replica_sharded_variable(w_host, buf, 0, g, Retrieval::all_replicas);
  HostStream out = s.d2h_stream({16}, DType::i32);
  auto outs = s.run([&](Replica& r) {
    Array shard = r.remote_load(buf, 0);                                    // 8 of the group's 16 values
    r.host_store(out, r.gather_shards(shard, s.replica_grouping(2, 2), buf.meta_shape()));
    r.remote_store(buf, 0, shard + 2);
  });
  Array final_w = s.get_tensor_data(w);   // (replicas, 16): replica i holds its group's row + 2
  // ---- end ----

  int wrong = 0;
  const Array& gathered = outs.at(out);  // (local replicas, 16): each replica's whole group row
  if (gathered.shape() != Shape{8, 16} || final_w.shape() != Shape{8, 16}) {
    std::cerr << "shapes: outs " << shape_str(gathered.shape()) << ", final_w " << shape_str(final_w.shape())
              << "; expected (8, 16) both\n";
    return 1;
  }
  const auto before = gathered.to_vector<std::int32_t>();
  const auto after = final_w.to_vector<std::int32_t>();
  for (int replica = 0; replica < 8; ++replica)
    for (int k = 0; k < 16; ++k) {
      const std::int32_t row_value = (replica % 2) * 16 + k;  // stride 2: replica i is in group i % 2
      if (before[replica * 16 + k] != row_value || after[replica * 16 + k] != row_value + 2) ++wrong;
    }
  std::cout << "session example: " << (wrong ? "WRONG" : "ok") << " (" << wrong << " wrong elements)\n";
  return wrong ? 1 : 0;
}
