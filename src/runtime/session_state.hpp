// Session internals: the state behind Variable, RemoteBuffer and HostStream handles, shared by the session
// (session.cc), the replica's view of it inside Session::run (session_replica.cc) and checkpoints.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/group_cache.hpp"
#include "runtime/internal.hpp"
#include "weft/session.hpp"

namespace weft::detail {

struct SessionState;

struct RemoteBufferState {
  const SessionState* owner = nullptr;
  int id = 0;
  Shape shape;       // one entry on one replica
  DType dtype = DType::f32;
  int entries = 1;
  Shape meta_shape;  // replica-sharded: the per-group tensor's shape
  int shard_over = 0;
  std::vector<std::vector<Array>> data;  // [replica][entry], host memory
};

struct VariableState {
  const SessionState* owner = nullptr;
  std::string name;
  Shape shape;  // per replica, unsharded
  DType dtype = DType::f32;
  ReplicaGroups grouping;
  Retrieval retrieval = Retrieval::one_per_group;
  Array host;  // shape_on_host: one row per group when there are several groups
  std::shared_ptr<RemoteBufferState> buffer;  // remote variables
  int entry = 0;
  int shard_over = 0;         // replica-sharded variables: shards per copy, else 0
  std::vector<Array> values;  // on-device variables: per replica (a shard when sharded)
};

struct HostStreamState {
  const SessionState* owner = nullptr;
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  bool h2d = true;
};

struct SessionState {
  Runtime* runtime = nullptr;
  SessionOptions options;
  int replicas = 0;              // global
  std::vector<Device> devices;   // per global replica
  std::vector<int> local_replicas;  // global indices of this process's replicas (contiguous)
  bool is_local(int replica) const { return devices[replica].process_index == runtime->process_index(); }
  Mesh mesh;
  GroupCache groups;
  std::vector<std::shared_ptr<VariableState>> variables;
  std::vector<std::shared_ptr<RemoteBufferState>> buffers;
  std::vector<std::shared_ptr<HostStreamState>> streams;
  bool weights_on_device = false;
  bool host_stale = false;  // devices hold newer values than the variables' host copies

  // During run(): per stream, per replica, the number of transfers made; inputs and outputs.
  struct RunIO {
    const Array* input = nullptr;  // h2d
    Array output;                  // d2h, written in place by the replicas
    std::byte* output_bytes = nullptr;
    std::vector<int> transfers;    // per replica
  };
  std::map<const HostStreamState*, RunIO> io;
};

}  // namespace weft::detail
