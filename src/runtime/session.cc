// PopXL-style sessions: variables with one value per replica group, remote buffers in host memory,
// replica-sharded variables, host streams. Layout rules follow PopXL (docs/popxl.md):
//  - host data of a grouped variable has a leading dimension of num_groups when there are several groups;
//  - a replica-sharded tensor is flattened, zero-padded to shard_over * ceil(n / shard_over) elements and
//    cut into shard_over shards; group member k holds shard k mod shard_over;
//  - one_per_group reads each group's value from its first replica (for sharded variables: from its first
//    shard_over members), all_replicas returns one row per replica in global replica order.
#include <cstring>

#include "collectives/host_exchange.hpp"
#include "runtime/execution.hpp"
#include "runtime/replica_sharding.hpp"
#include "runtime/session_state.hpp"
#include "weft/error.hpp"
#include "weft/session.hpp"

namespace weft {

using detail::HostStreamState;
using detail::RemoteBufferState;
using detail::SessionState;
using detail::shard_of;
using detail::unshard;
using detail::VariableState;

Retrieval retrieval_from_name(std::string_view name) {
  if (name == "one_per_group") return Retrieval::one_per_group;
  if (name == "all_replicas") return Retrieval::all_replicas;
  throw InvalidArgument("invalid retrieval_mode \"" + std::string(name) + "\"; use one_per_group or all_replicas");
}

const char* retrieval_name(Retrieval r) { return r == Retrieval::one_per_group ? "one_per_group" : "all_replicas"; }

// ---- handles ---------------------------------------------------------------------------------------------
const std::string& Variable::name() const { return state->name; }
const Shape& Variable::shape() const { return state->shape; }
Shape Variable::shape_on_host() const { return state->host.shape(); }
DType Variable::dtype() const { return state->dtype; }
const ReplicaGroups& Variable::grouping() const { return state->grouping; }
Retrieval Variable::retrieval() const { return state->retrieval; }
bool Variable::remote() const { return state->buffer != nullptr; }
bool Variable::sharded() const { return state->shard_over > 0; }
const Shape& RemoteBuffer::shape() const { return state->shape; }
DType RemoteBuffer::dtype() const { return state->dtype; }
int RemoteBuffer::entries() const { return state->entries; }
const Shape& RemoteBuffer::meta_shape() const { return state->meta_shape; }
int RemoteBuffer::shard_over() const { return state->shard_over; }
const std::string& HostStream::name() const { return state->name; }
const Shape& HostStream::shape() const { return state->shape; }
DType HostStream::dtype() const { return state->dtype; }
bool HostStream::host_to_device() const { return state->h2d; }

namespace {

std::string type_str(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + shape_str(shape); }

Array copy_to(const Array& x, const std::shared_ptr<MemoryAccount>& account, int device) {
  Array out = Array::empty(x.shape(), x.dtype(), account, device);
  std::memcpy(out.mutable_bytes(), x.bytes(), x.nbytes());
  return out;
}

Array host_row(const VariableState& v, int group) {
  return v.grouping.num_groups() > 1 ? v.host[group] : v.host;
}

// What replica r currently stores for v (its full value, or its shard).
const Array& stored(const VariableState& v, int replica) {
  return v.buffer ? v.buffer->data[replica][v.entry] : v.values[replica];
}

}  // namespace

// ---- session ---------------------------------------------------------------------------------------------

Session::Session(SessionOptions options) : state(std::make_shared<SessionState>()) {
  SessionState& s = *state;
  s.runtime = options.runtime ? options.runtime : &Runtime::current();
  s.options = options;
  if (options.replicas < 0)
    throw InvalidArgument(options.name + ": SessionOptions::replicas = " + std::to_string(options.replicas) +
                          " is not a number of replicas >= 1 (0 = every device)");
  s.replicas = options.replicas > 0 ? options.replicas : s.runtime->device_count();
  if (s.replicas > s.runtime->device_count())
    throw InvalidArgument(options.name + ": " + std::to_string(s.replicas) + " replicas need as many devices, but the runtime has " +
                          std::to_string(s.runtime->device_count()) + " (set WEFT_DEVICE_COUNT or RuntimeOptions::device_count)");
  if (s.runtime->process_count() > 1 && s.replicas != s.runtime->device_count())
    throw InvalidArgument(options.name + ": in a job of " + std::to_string(s.runtime->process_count()) +
                          " instances a session runs one replica per global device (" +
                          std::to_string(s.runtime->device_count()) + "), not " + std::to_string(s.replicas));
  if (options.num_host_transfers < 1)
    throw InvalidArgument(options.name + ": num_host_transfers must be >= 1, got " + std::to_string(options.num_host_transfers));
  s.devices.assign(s.runtime->devices().begin(), s.runtime->devices().begin() + s.replicas);
  s.mesh = Mesh({{"replica", s.replicas}});
  for (int r = 0; r < s.replicas; ++r)
    if (s.is_local(r)) s.local_replicas.push_back(r);
}

Session::~Session() = default;

int Session::replication_factor() const { return state->replicas; }
int Session::instance_replication_factor() const { return static_cast<int>(state->local_replicas.size()); }
int Session::global_replica_offset() const { return state->local_replicas.empty() ? 0 : state->local_replicas.front(); }
Runtime& Session::runtime() const { return *state->runtime; }
int Session::num_host_transfers() const { return state->options.num_host_transfers; }

ReplicaGroups Session::replica_grouping(int stride, int group_size) const {
  return ReplicaGroups::strided(state->replicas, stride, group_size);
}

namespace {

const ReplicaGroups& check_grouping(const SessionState& s, const std::optional<ReplicaGroups>& grouping,
                                    ReplicaGroups& storage) {
  storage = grouping ? *grouping : ReplicaGroups::all(s.replicas);
  if (storage.num_replicas() != s.replicas)
    throw InvalidArgument(s.options.name + ": the grouping " + storage.to_string() + " is for " +
                          std::to_string(storage.num_replicas()) + " replicas, but the session has " +
                          std::to_string(s.replicas));
  if (!storage.uniform()) throw InvalidArgument(s.options.name + ": a variable's grouping needs groups of equal size, got " + storage.to_string());
  return storage;
}

std::shared_ptr<VariableState> new_variable(SessionState& s, const Array& host, const std::optional<ReplicaGroups>& grouping,
                                            Retrieval retrieval, std::string name) {
  auto v = std::make_shared<VariableState>();
  v->owner = &s;
  v->name = name.empty() ? "variable_" + std::to_string(s.variables.size()) : std::move(name);
  check_grouping(s, grouping, v->grouping);
  v->retrieval = retrieval;
  v->dtype = host.dtype();
  const int groups = v->grouping.num_groups();
  if (groups > 1) {
    if (host.ndim() < 1 || host.shape()[0] != groups)
      throw InvalidArgument(s.options.name + ": variable " + v->name + ": host data of shape " + shape_str(host.shape()) +
                            " must have a leading dimension of " + std::to_string(groups) +
                            " = the number of groups of the grouping " + v->grouping.to_string());
    v->shape.assign(host.shape().begin() + 1, host.shape().end());
  } else {
    v->shape = host.shape();
  }
  v->host = copy_to(host, s.runtime->impl().host_account, -1);
  return v;
}

void check_owner(const SessionState& s, const void* owner, const char* what) {
  if (owner != &s) throw InvalidArgument(s.options.name + ": this " + std::string(what) + " belongs to another session");
}

// Host rows -> replicas (values or remote buffer entries). A replica's old value is released before its
// new one is allocated, so rewriting a variable never needs two device copies; if an allocation fails, the
// variable holds no device memory at all (its host copy stays, and a later weights_from_host retries).
void upload(SessionState& s, VariableState& v) {
  auto& rt = s.runtime->impl();
  std::vector<Array> values = std::move(v.values);
  values.resize(s.replicas);
  try {
    for (int r : s.local_replicas) {
      const int g = v.grouping.group_of(r);
      Array row = host_row(v, g);
      if (v.shard_over > 0) row = shard_of(row, v.grouping.rank_in_group(r) % v.shard_over, v.shard_over, rt.host_account);
      if (v.buffer) {
        v.buffer->data[r][v.entry] = copy_to(row, rt.host_account, -1);
      } else {
        values[r] = Array();
        values[r] = copy_to(row, rt.accounts[s.devices[r].id], s.devices[r].id);
      }
    }
  } catch (...) {
    v.values.clear();
    throw;
  }
  if (!v.buffer) v.values = std::move(values);
}

// What every replica stores for v, on every process: local values as they are, other processes' values
// exchanged over the transport (a collective: every process of the job calls it for the same variable).
std::vector<Array> all_stored(SessionState& s, const VariableState& v) {
  std::vector<Array> out(s.replicas);
  for (int r : s.local_replicas) out[r] = stored(v, r);
  auto& rt = s.runtime->impl();
  if (rt.process_count <= 1) return out;
  const Array& sample = stored(v, s.local_replicas.front());
  const std::size_t item = sample.nbytes();
  std::vector<std::byte> send;
  for (int r : s.local_replicas) send.insert(send.end(), stored(v, r).bytes(), stored(v, r).bytes() + item);
  // A collective over every instance: first make sure all of them are reading the same variable.
  collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
  const std::string what = s.options.name + ": reading variable " + v.name + " back to the host";
  if (!exchange.agree(what, collectives::Fingerprint().add("read back").add(v.name).add(item)))
    exchange.fail(MismatchError(s.options.name + ": the instances are not all reading variable " + v.name +
                                " back to the host at this point (get_tensor_data, weights_to_host and "
                                "write_variable_data are collective: every instance calls them in the same order)"));
  const std::vector<std::byte> recv = exchange.all_gather(what, send);
  for (int r = 0; r < s.replicas; ++r)
    if (!out[r].size() || !s.is_local(r))
      out[r] = Array::from_bytes(sample.dtype(), sample.shape(), recv.data() + static_cast<std::size_t>(r) * item);
  return out;
}

// Replicas -> host rows (one per group): each group's value from its first replica (for sharded variables,
// its first shard_over members), wherever they live.
void download(SessionState& s, VariableState& v) {
  const std::vector<Array> values = all_stored(s, v);
  const int groups = v.grouping.num_groups();
  std::vector<Array> rows;
  for (int g = 0; g < groups; ++g) {
    const std::vector<int>& members = v.grouping.members(g);
    if (v.shard_over > 0) {
      std::vector<Array> shards;
      for (int k = 0; k < v.shard_over; ++k) shards.push_back(values[members[k]]);
      rows.push_back(unshard(shards, v.shape));
    } else {
      rows.push_back(values[members[0]]);
    }
  }
  Array host = groups > 1 ? Array::stack(rows, 0) : rows[0];
  v.host = copy_to(host, s.runtime->impl().host_account, -1);
}

}  // namespace

Variable Session::variable(const Array& host, std::optional<ReplicaGroups> grouping, Retrieval retrieval, std::string name) {
  auto v = new_variable(*state, host, grouping, retrieval, std::move(name));
  if (state->weights_on_device) upload(*state, *v);
  state->variables.push_back(v);
  return Variable{v};
}

RemoteBuffer Session::remote_buffer(Shape entry_shape, DType dtype, int entries) {
  SessionState& s = *state;
  if (entries < 1) throw InvalidArgument(s.options.name + ": remote_buffer needs entries >= 1, got " + std::to_string(entries));
  auto b = std::make_shared<RemoteBufferState>();
  b->owner = &s;
  b->id = static_cast<int>(s.buffers.size()) + 1;
  b->shape = std::move(entry_shape);
  b->dtype = dtype;
  b->entries = entries;
  // Remote memory is host memory: one zeroed copy of every entry per replica.
  b->data.assign(s.replicas, {});
  for (int r : s.local_replicas)
    for (int e = 0; e < entries; ++e) {
      auto& replica = b->data[r];
      Array zero = Array::empty(b->shape, dtype, s.runtime->impl().host_account);
      std::memset(zero.mutable_bytes(), 0, zero.nbytes());
      replica.push_back(zero);
    }
  s.buffers.push_back(b);
  return RemoteBuffer{b};
}

Variable Session::remote_variable(const Array& host, const RemoteBuffer& buffer, int entry,
                                  std::optional<ReplicaGroups> grouping, Retrieval retrieval, std::string name) {
  SessionState& s = *state;
  check_owner(s, buffer.state->owner, "remote buffer");
  auto v = new_variable(s, host, grouping, retrieval, std::move(name));
  if (buffer.state->shard_over > 0)
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": remote buffer " + std::to_string(buffer.state->id) +
                          " is replica-sharded; use remote_replica_sharded_variable");
  if (entry < 0 || entry >= buffer.entries())
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": entry " + std::to_string(entry) +
                          " is out of range for remote buffer " + std::to_string(buffer.state->id) + " with " +
                          std::to_string(buffer.entries()) + " entries");
  if (v->shape != buffer.shape() || v->dtype != buffer.dtype())
    throw InvalidArgument(s.options.name + ": variable " + v->name + " is " + type_str(v->dtype, v->shape) +
                          " per replica but remote buffer " + std::to_string(buffer.state->id) + " holds " +
                          type_str(buffer.dtype(), buffer.shape()) + " entries");
  v->buffer = buffer.state;
  v->entry = entry;
  if (s.weights_on_device) upload(s, *v);
  s.variables.push_back(v);
  return Variable{v};
}

RemoteBuffer Session::replica_sharded_buffer(Shape shape, DType dtype, std::optional<ReplicaGroups> grouping, int shard_over,
                                             int entries) {
  SessionState& s = *state;
  ReplicaGroups g;
  check_grouping(s, grouping, g);
  const int size = g.group_size();
  if (shard_over == 0) shard_over = size;
  if (shard_over < 1 || shard_over > size || size % shard_over != 0)
    throw InvalidArgument(s.options.name + ": replica_sharded_buffer: shard_over " + std::to_string(shard_over) +
                          " must divide the group size " + std::to_string(size) + " of the grouping " + g.to_string() +
                          " (shard_over defaults to the group size)");
  Shape meta = shape;
  if (g.num_groups() > 1) {
    if (shape.empty() || shape[0] != g.num_groups())
      throw InvalidArgument(s.options.name + ": replica_sharded_buffer: shape " + shape_str(shape) +
                            " must start with the number of groups " + std::to_string(g.num_groups()) + " of " + g.to_string());
    meta.erase(meta.begin());
  }
  const std::int64_t n = num_elements(meta);
  RemoteBuffer b = remote_buffer({(n + shard_over - 1) / shard_over}, dtype, entries);
  b.state->meta_shape = meta;
  b.state->shard_over = shard_over;
  return b;
}

Variable Session::remote_replica_sharded_variable(const Array& host, const RemoteBuffer& buffer, int entry,
                                                  std::optional<ReplicaGroups> grouping, Retrieval retrieval,
                                                  std::string name) {
  SessionState& s = *state;
  check_owner(s, buffer.state->owner, "remote buffer");
  if (s.replicas <= 1)
    throw InvalidArgument(s.options.name + ": a replica-sharded variable needs more than one replica, the session has " +
                          std::to_string(s.replicas));
  auto v = new_variable(s, host, grouping, retrieval, std::move(name));
  const RemoteBufferState& b = *buffer.state;
  if (b.shard_over == 0)
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": remote buffer " + std::to_string(b.id) +
                          " is not replica-sharded; make it with replica_sharded_buffer");
  if (v->shape != b.meta_shape || v->dtype != b.dtype)
    throw InvalidArgument(s.options.name + ": variable " + v->name + " is " + type_str(v->dtype, v->shape) +
                          " per group but replica-sharded buffer " + std::to_string(b.id) + " was made for " +
                          type_str(b.dtype, b.meta_shape));
  if (v->grouping.group_size() % b.shard_over != 0)
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": shard_over " + std::to_string(b.shard_over) +
                          " does not divide the group size " + std::to_string(v->grouping.group_size()));
  if (entry < 0 || entry >= b.entries)
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": entry " + std::to_string(entry) +
                          " is out of range for remote buffer " + std::to_string(b.id) + " with " + std::to_string(b.entries) + " entries");
  v->buffer = buffer.state;
  v->entry = entry;
  v->shard_over = b.shard_over;
  if (s.weights_on_device) upload(s, *v);
  s.variables.push_back(v);
  return Variable{v};
}

Variable Session::replica_sharded_variable(const Array& host, std::optional<ReplicaGroups> grouping, int shard_over,
                                           Retrieval retrieval, std::string name) {
  SessionState& s = *state;
  if (s.replicas <= 1)
    throw InvalidArgument(s.options.name + ": a replica-sharded variable needs more than one replica, the session has " +
                          std::to_string(s.replicas));
  auto v = new_variable(s, host, grouping, retrieval, std::move(name));
  const int size = v->grouping.group_size();
  if (shard_over == 0) shard_over = size;
  if (shard_over < 1 || shard_over > size || size % shard_over != 0)
    throw InvalidArgument(s.options.name + ": variable " + v->name + ": shard_over " + std::to_string(shard_over) +
                          " must divide the group size " + std::to_string(size) + " (it defaults to the group size)");
  v->shard_over = shard_over;
  if (s.weights_on_device) upload(s, *v);
  s.variables.push_back(v);
  return Variable{v};
}

HostStream Session::h2d_stream(Shape shape, DType dtype, std::string name) {
  auto h = std::make_shared<HostStreamState>();
  h->owner = state.get();
  h->name = name.empty() ? "h2d_" + std::to_string(state->streams.size()) : std::move(name);
  h->shape = std::move(shape);
  h->dtype = dtype;
  h->h2d = true;
  state->streams.push_back(h);
  return HostStream{h};
}

HostStream Session::d2h_stream(Shape shape, DType dtype, std::string name) {
  HostStream h = h2d_stream(std::move(shape), dtype, name.empty() ? "d2h_" + std::to_string(state->streams.size()) : std::move(name));
  h.state->h2d = false;
  return h;
}

void Session::weights_from_host() {
  for (auto& v : state->variables) upload(*state, *v);
  state->weights_on_device = true;
  state->host_stale = false;
}

void Session::weights_to_host() {
  if (!state->weights_on_device) return;
  for (auto& v : state->variables) download(*state, *v);
  state->host_stale = false;
}

Array Session::get_tensor_data(const Variable& variable) {
  SessionState& s = *state;
  check_owner(s, variable.state->owner, "variable");
  if (s.host_stale) weights_to_host();
  const VariableState& v = *variable.state;
  if (v.retrieval == Retrieval::one_per_group) return v.host.copy();
  std::vector<Array> rows;
  const bool per_replica = s.weights_on_device && v.shard_over == 0;
  const std::vector<Array> values = per_replica ? all_stored(s, v) : std::vector<Array>();
  for (int r = 0; r < s.replicas; ++r) {
    const int g = v.grouping.group_of(r);
    rows.push_back(per_replica ? values[r] : host_row(v, g));  // sharded: the group's value
  }
  return Array::stack(rows, 0).with_device(-1);
}

void Session::write_variable_data(const Variable& variable, const Array& host) {
  SessionState& s = *state;
  check_owner(s, variable.state->owner, "variable");
  VariableState& v = *variable.state;
  if (host.shape() != v.host.shape() || host.dtype() != v.dtype)
    throw InvalidArgument(s.options.name + ": write_variable_data(" + v.name + "): expected " + type_str(v.dtype, v.host.shape()) +
                          " (shape_on_host), got " + type_str(host.dtype(), host.shape()));
  if (s.host_stale) weights_to_host();  // keep the other variables' newest values
  v.host = copy_to(host, s.runtime->impl().host_account, -1);
  if (s.weights_on_device) upload(s, v);
}

std::map<HostStream, Array> Session::run(const Program& program, const ProgramHandles& handles,
                                         const std::map<HostStream, Array>& inputs) {
  if (!program.input_types().empty()) {
    throw InvalidArgument(state->options.name + ": a session's program takes no inputs (it host_loads them), but "
                          "this one takes " + std::to_string(program.input_types().size()));
  }
  return run([&](Replica& r) { run_program(program, r, std::span<const Array>{}, &handles); }, inputs);
}

std::map<HostStream, Array> Session::run(const std::function<void(Replica&)>& program,
                                         const std::map<HostStream, Array>& inputs) {
  SessionState& s = *state;
  if (!s.weights_on_device) weights_from_host();
  const int transfers = s.options.num_host_transfers;
  auto io_shape = [&](const Shape& stream_shape) {
    Shape shape;
    if (transfers > 1) shape.push_back(transfers);
    const int local = static_cast<int>(s.local_replicas.size());
    if (local > 1) shape.push_back(local);
    shape.insert(shape.end(), stream_shape.begin(), stream_shape.end());
    return shape;
  };
  for (const auto& [stream, data] : inputs) {
    check_owner(s, stream.state->owner, "host stream");
    if (!stream.state->h2d)
      throw InvalidArgument(s.options.name + ": run(): input given for " + stream.name() + ", a device-to-host stream");
  }
  s.io.clear();
  std::map<HostStream, Array> outputs;
  for (const auto& h : s.streams) {
    detail::SessionState::RunIO io;
    io.transfers.assign(s.replicas, 0);
    const Shape expected = io_shape(h->shape);
    if (h->h2d) {
      auto it = inputs.find(HostStream{h});
      if (it == inputs.end())
        throw InvalidArgument(s.options.name + ": run(): no input for host-to-device stream " + h->name + " (expected " +
                              type_str(h->dtype, expected) + ")");
      if (it->second.shape() != expected || it->second.dtype() != h->dtype)
        throw InvalidArgument(s.options.name + ": run(): input for stream " + h->name + " is " +
                              type_str(it->second.dtype(), it->second.shape()) + ", expected " + type_str(h->dtype, expected) +
                              " = (num_host_transfers if > 1) + (replicas if > 1) + stream shape");
      io.input = &it->second;
    } else {
      io.output = Array::zeros(expected, h->dtype);
      io.output_bytes = io.output.mutable_bytes();
    }
    s.io.emplace(h.get(), std::move(io));
  }
  detail::Execution execution(s.runtime->impl(), s.options.name, s.mesh, s.devices, s.groups);
  execution.session = &s;
  execution.on_threads = s.options.replica_threads;
  if (s.options.shared_products) execution.share(s.runtime->options().shared_products, s.runtime->options().shared_runs);
  s.host_stale = true;  // even a failed run may have changed the devices' values
  execution.run(program);
  // A device-to-host stream is returned only if the program wrote it, and then only whole: every local
  // replica wrote every transfer. Rows nobody wrote must never pass for data (they were zeros).
  for (const auto& h : s.streams) {
    if (h->h2d) continue;
    const detail::SessionState::RunIO& io = s.io.at(h.get());
    int writer = -1;
    for (int r : s.local_replicas)
      if (io.transfers[r] > 0) writer = r;
    if (writer < 0) continue;
    for (int r : s.local_replicas)
      if (io.transfers[r] != transfers)
        throw InvalidArgument(s.options.name + ": run(): " + execution.replica_name(r) + " wrote " +
                              std::to_string(io.transfers[r]) + " of " + std::to_string(transfers) +
                              " transfers of device-to-host stream " + h->name + " (" + execution.replica_name(writer) +
                              " wrote " + std::to_string(io.transfers[writer]) +
                              "); every replica writes every transfer of a stream the program writes");
    outputs.emplace(HostStream{h}, io.output);
  }
  s.io.clear();
  return outputs;
}

}  // namespace weft
