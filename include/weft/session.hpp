// PopXL-style replicated state: a Session owns the replicas of a program (a C++ function run once per
// replica on each run()), its variables (one value per replica group), remote buffers (host memory, apart
// from device memory), replica-sharded variables and host streams, and moves weights to and from the host.
//
//   Runtime rt({.device_count = 8});
//   Session s({.replicas = 8, .runtime = &rt});
//   ReplicaGroups g = s.replica_grouping(/*stride=*/2, /*group_size=*/4);   // groups {0,2,4,6} {1,3,5,7}
//   RemoteBuffer buf = s.replica_sharded_buffer({2, 16}, DType::i32, g, /*shard_over=*/2);
//   Array w_host = Array::arange(32, DType::i32).reshape({2, 16});          // one row per group
//   Variable w = s.remote_replica_sharded_variable(w_host, buf, 0, g, Retrieval::all_replicas);
//   HostStream out = s.d2h_stream({16}, DType::i32);
//   auto outs = s.run([&](Replica& r) {
//     Array shard = r.remote_load(buf, 0);                                    // 8 of the group's 16 values
//     r.host_store(out, r.gather_shards(shard, s.replica_grouping(2, 2), buf.meta_shape()));
//     r.remote_store(buf, 0, shard + 2);
//   });
//   Array final_w = s.get_tensor_data(w);   // (replicas, 16): replica i holds its group's row + 2
// (tests/package/session_example.cc compiles and runs this example; keep the two identical.)
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "weft/array.hpp"
#include "weft/groups.hpp"
#include "weft/program.hpp"
#include "weft/replica.hpp"
#include "weft/runtime.hpp"

namespace weft {

// How get_tensor_data returns a grouped variable: one row per group (read from the group's first replica)
// or one row per replica in global replica order.
enum class Retrieval { one_per_group, all_replicas };
// "one_per_group" / "all_replicas"; anything else is an InvalidArgument naming the value.
Retrieval retrieval_from_name(std::string_view name);
const char* retrieval_name(Retrieval retrieval);

namespace detail {
struct SessionState;
struct VariableState;
struct RemoteBufferState;
struct HostStreamState;
}  // namespace detail

class Variable {
 public:
  const std::string& name() const;
  const Shape& shape() const;          // per replica (unsharded)
  Shape shape_on_host() const;         // (num_groups, *shape) when there are several groups, else shape
  DType dtype() const;
  const ReplicaGroups& grouping() const;
  Retrieval retrieval() const;
  bool remote() const;
  bool sharded() const;
  std::shared_ptr<detail::VariableState> state;
};

class RemoteBuffer {
 public:
  const Shape& shape() const;       // one entry on one replica (a shard for replica-sharded buffers)
  DType dtype() const;
  int entries() const;
  const Shape& meta_shape() const;  // replica-sharded buffers: the whole (per-group) tensor's shape
  int shard_over() const;           // 0 for a plain remote buffer
  std::shared_ptr<detail::RemoteBufferState> state;
};

class HostStream {
 public:
  const std::string& name() const;
  const Shape& shape() const;
  DType dtype() const;
  bool host_to_device() const;
  std::shared_ptr<detail::HostStreamState> state;
  bool operator<(const HostStream& other) const { return state < other.state; }
};

// What a traced program's session effects name: each handle by the name its equations give it.
struct ProgramHandles {
  std::map<std::string, Variable> variables;
  std::map<std::string, RemoteBuffer> buffers;
  std::map<std::string, HostStream> streams;
};

struct SessionOptions {
  int replicas = 0;             // 0 = every device of the runtime; negative is an InvalidArgument
  int num_host_transfers = 1;   // host_load / host_store calls per stream per run()
  Runtime* runtime = nullptr;   // default Runtime::current()
  std::string name = "session";
  bool replica_threads = false; // each replica needs an OS thread (PmapOptions::replica_threads)
  bool shared_products = false; // the replicas run the same traced programs (PmapOptions::shared_products)
};

class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int replication_factor() const;           // global replicas
  int instance_replication_factor() const;  // replicas of this process
  int global_replica_offset() const;        // global index of this process's first replica
  Runtime& runtime() const;

  // PopXL's ir.replica_grouping(stride, group_size): group_size 0 = replication_factor / stride.
  ReplicaGroups replica_grouping(int stride = 1, int group_size = 0) const;

  // ---- state ------------------------------------------------------------------------------------------
  // On-device variable. `host` has a leading dimension of size num_groups when there are several groups.
  Variable variable(const Array& host, std::optional<ReplicaGroups> grouping = std::nullopt,
                    Retrieval retrieval = Retrieval::one_per_group, std::string name = "");
  RemoteBuffer remote_buffer(Shape entry_shape, DType dtype, int entries = 1);
  Variable remote_variable(const Array& host, const RemoteBuffer& buffer, int entry = 0,
                           std::optional<ReplicaGroups> grouping = std::nullopt,
                           Retrieval retrieval = Retrieval::one_per_group, std::string name = "");
  // `shape` includes the group dimension when the grouping has several groups; shard_over 0 = group size.
  RemoteBuffer replica_sharded_buffer(Shape shape, DType dtype, std::optional<ReplicaGroups> grouping = std::nullopt,
                                      int shard_over = 0, int entries = 1);
  Variable remote_replica_sharded_variable(const Array& host, const RemoteBuffer& buffer, int entry = 0,
                                           std::optional<ReplicaGroups> grouping = std::nullopt,
                                           Retrieval retrieval = Retrieval::one_per_group, std::string name = "");
  // On-device replica-sharded variable: each replica holds only its shard (Replica::value gives it).
  Variable replica_sharded_variable(const Array& host, std::optional<ReplicaGroups> grouping = std::nullopt,
                                    int shard_over = 0, Retrieval retrieval = Retrieval::one_per_group,
                                    std::string name = "");
  HostStream h2d_stream(Shape shape, DType dtype, std::string name = "");
  HostStream d2h_stream(Shape shape, DType dtype, std::string name = "");
  int num_host_transfers() const;

  // ---- running ----------------------------------------------------------------------------------------
  // Runs `program` once per replica. `inputs` holds each h2d stream's data shaped
  // (num_host_transfers if > 1) + (local replicas if > 1) + stream shape; the result holds each d2h stream
  // the program wrote, shaped the same way (a stream it did not write is absent; one that some replica wrote
  // fewer than num_host_transfers times is an InvalidArgument naming it and the replica: rows nobody wrote
  // are never returned). Weights go to the devices before the first run.
  std::map<HostStream, Array> run(const std::function<void(Replica&)>& program,
                                  const std::map<HostStream, Array>& inputs = {});
  // The same for a traced program (weft/program.hpp; weft.popxl records one): every replica runs it in C++,
  // its session effects (host_load[stream='x'], remote_load[buffer=...], variable_read / variable_update
  // [variable=...]) naming the handles by the names `handles` gives them. The program takes no inputs.
  std::map<HostStream, Array> run(const Program& program, const ProgramHandles& handles,
                                  const std::map<HostStream, Array>& inputs = {});

  void weights_from_host();
  void weights_to_host();
  // One value per group ((num_groups, *shape), or shape for one group) or one per replica ((replicas, *shape)).
  Array get_tensor_data(const Variable& variable);
  // Replaces the variable's host value (shape_on_host) and, once weights are on the devices, uploads it.
  void write_variable_data(const Variable& variable, const Array& host);

  std::shared_ptr<detail::SessionState> state;
};

}  // namespace weft
