// The PopXL side from Python: Session, ReplicaGroups (PopXL's ReplicaGrouping), variables, remote buffers,
// host streams, and what a session's program calls on its replica (weft.ops, weft.collectives). The Python
// wrappers (weft/_session.py, weft/ops.py, weft/collectives.py) give them PopXL's names and defaults; this
// file mirrors include/weft/session.hpp one to one.
#include <Python.h>

#include <map>

#include "bindings.hpp"

namespace weft::python {
namespace {

std::optional<ReplicaGroups> optional_groups(py::handle grouping) {
  if (grouping.is_none()) return std::nullopt;
  return grouping.cast<ReplicaGroups>();
}

Shape to_shape(const std::vector<std::int64_t>& shape) { return Shape(shape.begin(), shape.end()); }

py::tuple shape_tuple(const Shape& shape) { return py::tuple(py::cast(std::vector<std::int64_t>(shape.begin(), shape.end()))); }

DType dtype_arg(py::handle dtype) { return weft_dtype(py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype)), "dtype"); }

// Runs `body(replica, python call site)` with the GIL released (it may wait for the other replicas).
template <class F>
py::array replica_op(const char* op, F&& body) {
  Replica& r = current_replica(op);
  const CallSite site = python_call_site();
  Array result;
  {
    py::gil_scoped_release nogil;
    result = body(r, site);
  }
  return to_numpy(result);
}

// PopXL's ReplicaGrouping.
void init_replica_groups(py::module_& m) {
  py::class_<ReplicaGroups>(m, "ReplicaGroups", "A partition of the replicas into equal groups (weft.ReplicaGrouping).")
      .def_static("strided", &ReplicaGroups::strided, py::arg("num_replicas"), py::arg("stride") = 1,
                  py::arg("group_size") = 0)
      .def_static("from_lists", &ReplicaGroups::from_lists, py::arg("num_replicas"), py::arg("groups"),
                  py::arg("allow_uneven") = false)
      .def_property_readonly("num_replicas", &ReplicaGroups::num_replicas)
      .def_property_readonly("num_groups", &ReplicaGroups::num_groups)
      .def_property_readonly("group_size", &ReplicaGroups::group_size)
      .def_property_readonly("groups", &ReplicaGroups::groups)
      .def_property_readonly("assignment", &ReplicaGroups::assignment)
      .def_property_readonly("stride", [](const ReplicaGroups& g) -> py::object {
        int stride = 1, size = 0;
        if (!g.is_strided(&stride, &size)) return py::none();
        return py::int_(stride);
      })
      .def("transpose", &ReplicaGroups::transpose)
      .def("group_of", &ReplicaGroups::group_of)
      .def("rank_in_group", &ReplicaGroups::rank_in_group)
      .def("members", &ReplicaGroups::members)
      .def("__eq__", [](const ReplicaGroups& a, const ReplicaGroups& b) { return a == b; })
      .def("__repr__", [](const ReplicaGroups& g) {
        int stride = 1, size = 0;
        if (g.is_strided(&stride, &size))
          return "ReplicaGrouping(num_replicas=" + std::to_string(g.num_replicas()) + ", stride=" +
                 std::to_string(stride) + ", group_size=" + std::to_string(size) + ")";
        return "ReplicaGroups(" + g.to_string() + ")";
      });
}

// What a session hands out: variables, remote buffers, host streams.
void init_session_handles(py::module_& m) {
  py::class_<Variable>(m, "Variable")
      .def_property_readonly("name", &Variable::name)
      .def_property_readonly("shape", [](const Variable& v) { return shape_tuple(v.shape()); })
      .def_property_readonly("shape_on_host", [](const Variable& v) { return shape_tuple(v.shape_on_host()); })
      .def_property_readonly("dtype", [](const Variable& v) { return numpy_dtype(v.dtype()); })
      .def_property_readonly("replica_grouping", &Variable::grouping)
      .def_property_readonly("retrieval_mode", [](const Variable& v) { return std::string(retrieval_name(v.retrieval())); })
      .def_property_readonly("remote", &Variable::remote)
      .def_property_readonly("sharded", &Variable::sharded)
      .def("__hash__", [](const Variable& v) { return std::hash<void*>()(v.state.get()); })
      .def("__eq__", [](const Variable& a, const Variable& b) { return a.state == b.state; })
      .def("__repr__", [](const Variable& v) {
        return "Variable(name=" + v.name() + ", shape=" + shape_str(v.shape()) + ", dtype=" +
               std::string(dtype_name(v.dtype())) + ")";
      });

  py::class_<RemoteBuffer>(m, "RemoteBuffer")
      .def_property_readonly("shape", [](const RemoteBuffer& b) { return shape_tuple(b.shape()); })
      .def_property_readonly("meta_shape", [](const RemoteBuffer& b) { return shape_tuple(b.meta_shape()); })
      .def_property_readonly("dtype", [](const RemoteBuffer& b) { return numpy_dtype(b.dtype()); })
      .def_property_readonly("entries", &RemoteBuffer::entries)
      .def_property_readonly("shard_over", &RemoteBuffer::shard_over)
      .def("__repr__", [](const RemoteBuffer& b) {
        return "RemoteBuffer(shape=" + shape_str(b.shape()) + ", dtype=" + std::string(dtype_name(b.dtype())) +
               ", entries=" + std::to_string(b.entries()) + ")";
      });

  py::class_<HostStream>(m, "HostStream")
      .def_property_readonly("name", &HostStream::name)
      .def_property_readonly("shape", [](const HostStream& s) { return shape_tuple(s.shape()); })
      .def_property_readonly("dtype", [](const HostStream& s) { return numpy_dtype(s.dtype()); })
      .def_property_readonly("host_to_device", &HostStream::host_to_device)
      .def("__hash__", [](const HostStream& s) { return std::hash<void*>()(s.state.get()); })
      .def("__eq__", [](const HostStream& a, const HostStream& b) { return a.state == b.state; })
      .def("__repr__", [](const HostStream& s) {
        return std::string(s.host_to_device() ? "h2d" : "d2h") + "_stream(name=" + s.name() + ", shape=" +
               shape_str(s.shape()) + ", dtype=" + std::string(dtype_name(s.dtype())) + ")";
      });
}

void init_session_class(py::module_& m) {
  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def(py::init([](int replicas, int num_host_transfers, std::string name) {
             if (replicas < 0)
               throw InvalidArgument(name + ": replication_factor = " + std::to_string(replicas) +
                                     " is not a number of replicas >= 1 (0 = every device)");
             SessionOptions options;
             options.replicas = replicas;
             options.num_host_transfers = num_host_transfers;
             options.name = std::move(name);
             options.replica_threads = true;  // its program is Python, run by every replica
             py::gil_scoped_release nogil;
             return std::make_shared<Session>(options);
           }),
           py::arg("replication_factor") = 0, py::arg("num_host_transfers") = 1, py::arg("name") = "session")
      .def_property_readonly("replication_factor", &Session::replication_factor)
      .def_property_readonly("instance_replication_factor", &Session::instance_replication_factor)
      .def_property_readonly("global_replica_offset", &Session::global_replica_offset)
      .def_property_readonly("num_host_transfers", &Session::num_host_transfers)
      .def("replica_grouping", &Session::replica_grouping, py::arg("stride") = 1, py::arg("group_size") = 0)
      .def("variable",
           [](Session& s, py::handle host, py::handle grouping, const std::string& retrieval, const std::string& name) {
             return s.variable(to_array(host, "variable"), optional_groups(grouping), retrieval_from_name(retrieval), name);
           })
      .def("remote_buffer", [](Session& s, const std::vector<std::int64_t>& shape, py::handle dtype, int entries) {
        return s.remote_buffer(to_shape(shape), dtype_arg(dtype), entries);
      })
      .def("remote_variable", [](Session& s, py::handle host, const RemoteBuffer& buffer, int entry, py::handle grouping,
                                 const std::string& retrieval, const std::string& name) {
        return s.remote_variable(to_array(host, "remote_variable"), buffer, entry, optional_groups(grouping),
                                 retrieval_from_name(retrieval), name);
      })
      .def("replica_sharded_buffer", [](Session& s, const std::vector<std::int64_t>& shape, py::handle dtype,
                                        py::handle grouping, int shard_over, int entries) {
        return s.replica_sharded_buffer(to_shape(shape), dtype_arg(dtype), optional_groups(grouping), shard_over, entries);
      })
      .def("remote_replica_sharded_variable",
           [](Session& s, py::handle host, const RemoteBuffer& buffer, int entry, py::handle grouping,
              const std::string& retrieval, const std::string& name) {
             return s.remote_replica_sharded_variable(to_array(host, "remote_replica_sharded_variable"), buffer, entry,
                                                      optional_groups(grouping), retrieval_from_name(retrieval), name);
           })
      .def("replica_sharded_variable", [](Session& s, py::handle host, py::handle grouping, int shard_over,
                                          const std::string& retrieval, const std::string& name) {
        return s.replica_sharded_variable(to_array(host, "replica_sharded_variable"), optional_groups(grouping),
                                          shard_over, retrieval_from_name(retrieval), name);
      })
      .def("h2d_stream", [](Session& s, const std::vector<std::int64_t>& shape, py::handle dtype, const std::string& name) {
        return s.h2d_stream(to_shape(shape), dtype_arg(dtype), name);
      })
      .def("d2h_stream", [](Session& s, const std::vector<std::int64_t>& shape, py::handle dtype, const std::string& name) {
        return s.d2h_stream(to_shape(shape), dtype_arg(dtype), name);
      })
      .def("run",
           [](Session& s, py::object program, py::dict inputs) {
             std::map<HostStream, Array> in;
             for (auto [key, value] : inputs) in.emplace(key.cast<HostStream>(), to_array(value, "Session.run input"));
             CallState call;
             call.name = "Session.run";
             std::shared_ptr<py::object> fn(new py::object(std::move(program)), [](py::object* o) {
               py::gil_scoped_acquire gil;
               delete o;
             });
             std::map<HostStream, Array> out;
             run_interruptibly(call, [&] {
               out = s.run([&](Replica& r) { run_python_replica(r, call, [&] { (*fn)(); }); }, in);
             });
             py::dict result;
             for (auto& [stream, value] : out) result[py::cast(stream)] = to_numpy(value);
             return result;
           })
      .def("run_program",
           [](Session& s, const Program& program, py::dict variables, py::dict buffers, py::dict streams,
              py::dict inputs) {
             // A traced program (weft.popxl's graphs): every replica runs it in C++, no Python, no GIL.
             ProgramHandles handles;
             for (auto [k, v] : variables) handles.variables.emplace(k.cast<std::string>(), v.cast<Variable>());
             for (auto [k, v] : buffers) handles.buffers.emplace(k.cast<std::string>(), v.cast<RemoteBuffer>());
             for (auto [k, v] : streams) handles.streams.emplace(k.cast<std::string>(), v.cast<HostStream>());
             std::map<HostStream, Array> in;
             for (auto [key, value] : inputs) in.emplace(key.cast<HostStream>(), to_array(value, "Session.run input"));
             CallState call;
             call.name = "Session.run";
             ActiveCall active(call);
             std::map<HostStream, Array> out;
             {
               py::gil_scoped_release nogil;
               out = s.run(program, handles, in);
             }
             py::dict result;
             for (auto& [stream, value] : out) result[py::cast(stream)] = to_numpy(value);
             return result;
           })
      .def("weights_from_host", &Session::weights_from_host, py::call_guard<py::gil_scoped_release>())
      .def("weights_to_host", &Session::weights_to_host, py::call_guard<py::gil_scoped_release>())
      .def("get_tensor_data", [](Session& s, const Variable& v) {
        Array a;
        {
          py::gil_scoped_release nogil;
          a = s.get_tensor_data(v);
        }
        return to_numpy(a);
      })
      .def("write_variable_data", [](Session& s, const Variable& v, py::handle data) {
        const Array a = to_array(data, "write_variable_data");
        py::gil_scoped_release nogil;
        s.write_variable_data(v, a);
      });
}

// ---- on the replica: weft.ops ------------------------------------------------------------------------------
void init_replica_ops(py::module_& m) {
  m.def("variable_value", [](const Variable& v) {
    return replica_op("weft.ops.read", [&](Replica& r, CallSite) { return r.value(v); });
  });
  m.def("variable_assign", [](const Variable& v, py::handle value) {
    Replica& r = current_replica("weft.ops.write");
    const Array a = to_array(value, "weft.ops.write");
    Array& slot = r.value(v);
    if (a.shape() != slot.shape() || a.dtype() != slot.dtype())
      throw InvalidArgument("weft.ops.write: variable " + v.name() + " holds " + std::string(dtype_name(slot.dtype())) +
                            shape_str(slot.shape()) + " on replica " + std::to_string(r.index()) + ", the new value is " +
                            std::string(dtype_name(a.dtype())) + shape_str(a.shape()));
    slot = a;
  });
  m.def("remote_load", [](const RemoteBuffer& b, int entry) {
    return replica_op("weft.ops.remote_load", [&](Replica& r, CallSite) { return r.remote_load(b, entry); });
  });
  m.def("remote_store", [](const RemoteBuffer& b, int entry, py::handle value) {
    Replica& r = current_replica("weft.ops.remote_store");
    const Array a = to_array(value, "weft.ops.remote_store");
    py::gil_scoped_release nogil;
    r.remote_store(b, entry, a);
  });
  m.def("host_load", [](const HostStream& s) {
    return replica_op("weft.ops.host_load", [&](Replica& r, CallSite) { return r.host_load(s); });
  });
  m.def("host_store", [](const HostStream& s, py::handle value) {
    Replica& r = current_replica("weft.ops.host_store");
    const Array a = to_array(value, "weft.ops.host_store");
    py::gil_scoped_release nogil;
    r.host_store(s, a);
  });
}

// ---- on the replica: weft.collectives (PopXL's replicated_* over groupings) -----------------------------------
void init_replica_collectives(py::module_& m) {
  m.def("all_reduce", [](py::handle x, const ReplicaGroups& g, const std::string& op) {
    const ReduceOp reduce = reduce_op_from_name(op);
    const Array a = to_array(x, "replicated_all_reduce");
    return replica_op("weft.collectives.replicated_all_reduce", [&](Replica& r, CallSite site) { return r.all_reduce(a, g, reduce, site); });
  });
  m.def("all_gather_groups", [](py::handle x, const ReplicaGroups& g, int axis, bool tiled) {
    const Array a = to_array(x, "replicated_all_gather");
    return replica_op("weft.collectives.replicated_all_gather", [&](Replica& r, CallSite site) { return r.all_gather(a, g, axis, tiled, site); });
  });
  m.def("gather_shards", [](py::handle x, const ReplicaGroups& g, const std::vector<std::int64_t>& shape) {
    const Array a = to_array(x, "replicated_all_gather");
    return replica_op("weft.collectives.replicated_all_gather",
                      [&](Replica& r, CallSite site) { return r.gather_shards(a, g, to_shape(shape), site); });
  });
  m.def("replicated_reduce_scatter", [](py::handle x, const ReplicaGroups& g, const std::string& op) {
    const ReduceOp reduce = reduce_op_from_name(op);
    const Array a = to_array(x, "replicated_reduce_scatter");
    return replica_op("weft.collectives.replicated_reduce_scatter",
                      [&](Replica& r, CallSite site) { return r.replicated_reduce_scatter(a, g, reduce, site); });
  });
  m.def("replica_sharded_slice", [](py::handle x, const ReplicaGroups& g) {
    const Array a = to_array(x, "replica_sharded_slice");
    return replica_op("weft.collectives.replica_sharded_slice", [&](Replica& r, CallSite site) { return r.replica_sharded_slice(a, g, site); });
  });
  m.def("num_replicas", [] { return current_replica("weft.collectives").num_replicas(); });
}

}  // namespace

void init_session(py::module_& m) {
  init_replica_groups(m);
  init_session_handles(m);
  init_session_class(m);
  init_replica_ops(m);
  init_replica_collectives(m);
}

}  // namespace weft::python
