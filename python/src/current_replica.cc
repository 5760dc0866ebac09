// Which replica the calling thread runs. As jax.lax.psum finds its axis environment from the trace it is
// called in, weft.lax.psum finds the replica of the calling thread: a Python pmap or session run makes it
// current on the worker thread (ReplicaScope) for the length of the Python call.
#include "bindings.hpp"

namespace weft::python {
namespace {

thread_local Replica* t_replica = nullptr;
thread_local CallState* t_call = nullptr;

}  // namespace

Replica& current_replica(const char* op) {
  if (!t_replica) {
    // PopXL's ops (weft.ops) belong to a Session's program; JAX's collectives (weft.lax) to a pmapped function.
    const std::string name(op);
    if (name.rfind("weft.ops.", 0) == 0)
      throw InvalidArgument(name + " was called outside a replica: weft.ops run inside a Session's program (the "
                            "function decorated with @session.program), once per replica, on each session.run(); "
                            "outside it, read a variable with session.get_tensor_data(variable)");
    throw InvalidArgument(name + " was called outside a replica: collectives run inside a function mapped by "
                          "weft.pmap (or a Session program), on the replica's own thread");
  }
  if (t_call && t_call->interrupted) throw weft::Error(std::string(op) + ": interrupted (KeyboardInterrupt in the caller)");
  return *t_replica;
}

CallState* current_call() { return t_call; }

bool in_replica() { return t_replica != nullptr; }

ReplicaScope::ReplicaScope(Replica& replica, CallState* call) : previous_replica_(t_replica), previous_call_(t_call) {
  t_replica = &replica;
  t_call = call;
}

ReplicaScope::~ReplicaScope() {
  t_replica = previous_replica_;
  t_call = previous_call_;
}

}  // namespace weft::python
