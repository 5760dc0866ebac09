// The session's operations as a replica sees them inside Session::run (PopXL's): its value of a variable,
// remote buffer loads and stores, host stream transfers. They find the session through the execution that
// Session::run starts (Execution::session), and count their transfers in the runtime's statistics.
#include <cstring>
#include <string>

#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "runtime/session_state.hpp"
#include "weft/error.hpp"
#include "weft/replica.hpp"
#include "weft/session.hpp"

namespace weft {

namespace {

detail::SessionState& session_of(const detail::ReplicaState& st, const char* api) {
  if (st.trace)
    throw InvalidArgument(std::string(api) + " is only available inside Session::run, and this replica is being traced "
                          "by a pmap (pmap(jit(f))), not run by a session");
  if (!st.execution->session)
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + " is only available inside Session::run (" +
                          st.execution->name + " is not a session)");
  return *st.execution->session;
}

template <class State>
void check_session_owner(const detail::ReplicaState& st, const detail::SessionState& s, const State& handle, const char* api,
                         const char* what) {
  if (handle.owner != &s)
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + ": this " + what + " belongs to another session");
}

int entry_index(const detail::ReplicaState& st, const detail::RemoteBufferState& b, std::int64_t entry, const char* api) {
  if (entry < 0 || entry >= b.entries)
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + ": entry " + std::to_string(entry) +
                          " is out of range for remote buffer " + std::to_string(b.id) + " with " + std::to_string(b.entries) +
                          " entries");
  return static_cast<int>(entry);
}

std::int64_t scalar_entry(const detail::ReplicaState& st, const Array& entry, const char* api) {
  if (entry.size() != 1 || !is_integer(entry.dtype()))
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + ": the entry must be an integer scalar, got " +
                          std::string(dtype_name(entry.dtype())) + shape_str(entry.shape()));
  return static_cast<std::int64_t>(entry.value_at(0));
}

// Byte offset of (transfer, replica) in a stream's run() array, and the transfer index (counted per replica).
std::size_t transfer_offset(const detail::ReplicaState& st, detail::SessionState& s, const detail::HostStreamState& h,
                            const char* api) {
  auto& io = s.io.at(&h);
  const int transfer = io.transfers[st.index]++;
  if (transfer >= s.options.num_host_transfers)
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + "(" + h.name + ") called " +
                          std::to_string(transfer + 1) + " times in one run, but num_host_transfers is " +
                          std::to_string(s.options.num_host_transfers));
  const std::size_t item = static_cast<std::size_t>(num_elements(h.shape)) * dtype_size(h.dtype);
  return (static_cast<std::size_t>(transfer) * s.local_replicas.size() + st.local) * item;
}

Array remote_load_at(detail::ReplicaState& st, const RemoteBuffer& buffer, std::int64_t entry) {
  detail::SessionState& s = session_of(st, "remote_load");
  const detail::RemoteBufferState& b = *buffer.state;
  check_session_owner(st, s, b, "remote_load", "remote buffer");
  const Array& stored = b.data[st.index][entry_index(st, b, entry, "remote_load")];
  s.runtime->impl().stats.h2d += stored.nbytes();
  Array loaded = Array::empty(stored.shape(), stored.dtype(), nullptr, st.device->id);  // on this device
  std::memcpy(loaded.mutable_bytes(), stored.bytes(), stored.nbytes());
  return loaded;
}

void remote_store_at(detail::ReplicaState& st, const RemoteBuffer& buffer, std::int64_t entry, const Array& value) {
  detail::SessionState& s = session_of(st, "remote_store");
  detail::RemoteBufferState& b = *buffer.state;
  check_session_owner(st, s, b, "remote_store", "remote buffer");
  const int e = entry_index(st, b, entry, "remote_store");
  if (value.shape() != b.shape || value.dtype() != b.dtype)
    throw InvalidArgument(st.execution->replica_name(st.index) + ": remote_store: remote buffer " + std::to_string(b.id) +
                          " holds " + std::string(dtype_name(b.dtype)) + shape_str(b.shape) + " entries, got " +
                          std::string(dtype_name(value.dtype())) + shape_str(value.shape()));
  s.runtime->impl().stats.d2h += value.nbytes();
  Array stored = Array::empty(value.shape(), value.dtype(), s.runtime->impl().host_account);  // host memory
  std::memcpy(stored.mutable_bytes(), value.bytes(), value.nbytes());
  b.data[st.index][e] = std::move(stored);
}

}  // namespace

Array& Replica::value(const Variable& variable) {
  detail::SessionState& s = session_of(*state_, "value");
  const detail::VariableState& v = *variable.state;
  check_session_owner(*state_, s, v, "value", "variable");
  if (v.buffer)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": value(" + v.name + "): the variable lives in remote buffer " +
                          std::to_string(v.buffer->id) + "; read it with remote_load");
  return variable.state->values[state_->index];
}

Array Replica::remote_load(const RemoteBuffer& buffer, int entry) { return remote_load_at(*state_, buffer, entry); }

Array Replica::remote_load(const RemoteBuffer& buffer, const Array& entry) {
  return remote_load_at(*state_, buffer, scalar_entry(*state_, entry, "remote_load"));
}

void Replica::remote_store(const RemoteBuffer& buffer, int entry, const Array& value) {
  remote_store_at(*state_, buffer, entry, value);
}

void Replica::remote_store(const RemoteBuffer& buffer, const Array& entry, const Array& value) {
  remote_store_at(*state_, buffer, scalar_entry(*state_, entry, "remote_store"), value);
}

Array Replica::host_load(const HostStream& stream) {
  detail::SessionState& s = session_of(*state_, "host_load");
  const detail::HostStreamState& h = *stream.state;
  check_session_owner(*state_, s, h, "host_load", "host stream");
  if (!h.h2d)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": host_load(" + h.name + "): a device-to-host stream");
  const std::size_t offset = transfer_offset(*state_, s, h, "host_load");
  Array loaded = Array::empty(h.shape, h.dtype, nullptr, state_->device->id);
  std::memcpy(loaded.mutable_bytes(), s.io.at(&h).input->bytes() + offset, loaded.nbytes());
  s.runtime->impl().stats.h2d += loaded.nbytes();
  return loaded;
}

void Replica::host_store(const HostStream& stream, const Array& value) {
  detail::SessionState& s = session_of(*state_, "host_store");
  const detail::HostStreamState& h = *stream.state;
  check_session_owner(*state_, s, h, "host_store", "host stream");
  if (h.h2d)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": host_store(" + h.name + "): a host-to-device stream");
  if (value.shape() != h.shape || value.dtype() != h.dtype)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": host_store(" + h.name + "): the stream carries " +
                          std::string(dtype_name(h.dtype)) + shape_str(h.shape) + ", got " +
                          std::string(dtype_name(value.dtype())) + shape_str(value.shape()));
  const std::size_t offset = transfer_offset(*state_, s, h, "host_store");
  std::memcpy(s.io.at(&h).output_bytes + offset, value.bytes(), value.nbytes());
  s.runtime->impl().stats.d2h += value.nbytes();
}

}  // namespace weft
