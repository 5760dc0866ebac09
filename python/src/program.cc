// Traced programs from Python (weft._weft.ProgramBuilder, Program, run_program, ProgramPmap): what
// weft/_trace.py records into and what weft.jit / weft.pmap run. A traced pmap runs its program on every
// replica in C++: no Python and no GIL between the equations; the caller releases the GIL for the call.
//
// Parameters cross as (name, value) pairs, each value converted by the op's schema (weft::op_schema: an empty
// tuple is axes or ints, a list of pairs a permutation or groups of two, as the op says). Python spells no
// kind: the older (name, kind, value) triples are refused with a TypeError naming the pairs.
#include <algorithm>
#include <optional>
#include <utility>

#include "bindings.hpp"

namespace weft::python {
namespace {

ProgramParam param_of(const std::string& name, ProgramParamKind kind, py::handle value) {
  try {
    switch (kind) {
      case ProgramParamKind::boolean: return ProgramParam{value.cast<bool>()};
      case ProgramParamKind::integer: return ProgramParam{value.cast<std::int64_t>()};
      case ProgramParamKind::string: return ProgramParam{value.cast<std::string>()};
      case ProgramParamKind::dtype:
        return ProgramParam{
            weft_dtype(py::dtype::from_args(py::reinterpret_borrow<py::object>(value)), "a dtype parameter")};
      case ProgramParamKind::ints: return ProgramParam{value.cast<std::vector<std::int64_t>>()};
      case ProgramParamKind::axes: return ProgramParam{value.cast<std::vector<std::string>>()};
      case ProgramParamKind::permutation: return ProgramParam{value.cast<Permutation>()};
      case ProgramParamKind::groups: return ProgramParam{value.cast<std::vector<std::vector<int>>>()};
      case ProgramParamKind::programs: {
        SubPrograms programs;
        for (py::handle p : value) programs.push_back(std::make_shared<const Program>(p.cast<Program>()));
        return ProgramParam{std::move(programs)};
      }
    }
  } catch (const py::cast_error&) {
  }
  throw InvalidArgument("parameter '" + name + "' = " + py::repr(value).cast<std::string>() + " is not " +
                        program_param_kind_text(kind));
}

// `op`'s parameters from (name, value) pairs, each converted by the op's schema. Anything else (the older
// (name, kind, value) triple) is a TypeError naming the form; a name the op does not have is refused as the
// registry refuses it.
ProgramParams params_of(const std::string& op, const py::list& entries) {
  ProgramParams params;
  std::optional<std::vector<ProgramParamSpec>> schema;
  for (py::handle e : entries) {
    if (!py::isinstance<py::tuple>(e) || py::len(e) != 2 || !py::isinstance<py::str>(e.cast<py::tuple>()[0])) {
      throw py::type_error("ProgramBuilder.emit: " + op + "'s parameter " + py::repr(e).cast<std::string>() +
                           " is not a (name, value) pair; the op's schema gives each value's kind "
                           "(_weft.op_schema), so (name, kind, value) triples are not taken");
    }
    auto entry = e.cast<py::tuple>();
    const auto name = entry[0].cast<std::string>();
    if (!schema) schema = op_schema(op);  // InvalidArgument for an unknown op
    const auto spec = std::find_if(schema->begin(), schema->end(), [&](const auto& s) { return s.name == name; });
    if (spec == schema->end()) throw InvalidArgument(op + " has no parameter '" + name + "'");
    params[name] = param_of(name, spec->kind, entry[1]);
  }
  return params;
}

py::list schema_list(const std::string& op) {
  py::list out;
  for (const ProgramParamSpec& spec : op_schema(op)) {
    out.append(py::make_tuple(spec.name, program_param_kind_name(spec.kind), spec.required));
  }
  return out;
}

py::tuple type_tuple(const ValueType& t) {
  return py::make_tuple(numpy_dtype(t.dtype), py::tuple(py::cast(t.shape)), py::tuple(py::cast(t.varying)));
}

Mesh mesh_of(const std::vector<std::pair<std::string, int>>& axes) {
  std::vector<MeshAxis> list;
  for (const auto& [name, size] : axes) list.push_back({name, size});
  return list.empty() ? Mesh() : Mesh(std::move(list));
}

std::vector<Array> arrays_of(const py::sequence& args, const char* what) {
  std::vector<Array> arrays;
  arrays.reserve(args.size());
  for (py::handle a : args) arrays.push_back(to_array(a, what));
  return arrays;
}

// A traced function pmapped: the program on every replica.
class ProgramPmap {
 public:
  ProgramPmap(Program program, std::string axis, std::vector<std::pair<std::string, int>> mesh,
              std::vector<std::optional<int>> in_axes, std::vector<std::optional<int>> out_axes,
              std::vector<Device> devices, std::string name)
      : name_(name) {
    PmapOptions options;
    options.axis = std::move(axis);
    for (auto& [axis_name, size] : mesh) options.mesh.push_back({axis_name, size});
    options.in_axes = std::move(in_axes);
    options.out_axes = std::move(out_axes);
    options.devices = std::move(devices);
    options.name = std::move(name);
    options.shared_products = true;  // every replica runs this one program
    program_ = std::make_shared<PmapProgram>(
        [program = std::move(program)](Replica& r, std::span<Array> inputs) {
          // The replica's own inputs, handed over: a donated argument's buffers may take the results.
          return run_program(program, r,
                             std::vector<Array>(std::make_move_iterator(inputs.begin()), std::make_move_iterator(inputs.end())));
        },
        std::move(options));
  }

  // `donate[k]` true: argument k's shards are moved out of its Python object (left empty: the caller marks
  // the array deleted, as JAX's donate_argnums), so the program may write results into their buffers.
  py::list call(py::sequence args, py::handle sharded_type, const std::vector<bool>& donate) {
    std::vector<PmapArg> arguments;
    arguments.reserve(args.size());
    for (std::size_t k = 0; k < args.size(); ++k) {
      py::handle a = args[k];
      if (py::isinstance(a, sharded_type)) {
        if (k < donate.size() && donate[k]) {
          arguments.emplace_back(std::move(a.cast<ShardedArray&>()));
          continue;
        }
        arguments.emplace_back(a.cast<ShardedArray>());
      } else {
        arguments.emplace_back(to_array(a, "a pmap argument"));
      }
    }
    CallState call;
    call.name = name_;
    ActiveCall active(call);
    std::vector<ShardedArray> result;
    {
      // Every replica runs C++ only: the caller waits in C++ too (each wait has its deadline).
      py::gil_scoped_release release;
      result = (*program_)(std::move(arguments));
    }
    py::list out;
    for (ShardedArray& s : result) out.append(py::cast(std::move(s)));
    return out;
  }

 private:
  std::string name_;
  std::shared_ptr<PmapProgram> program_;
};

// The program and its builder: what a trace records into and what it gives.
void bind_program_classes(py::module_& m) {
  py::class_<Program>(m, "Program", "A traced program (weft.make_program's result): prints like a jaxpr.")
      .def("__str__", &Program::text)
      .def("__repr__", &Program::text)
      .def_property_readonly("num_equations", &Program::num_equations)
      .def("count", [](const Program& p, const std::string& op) { return p.count(op); })
      .def_property_readonly("equation_ops",
                             [](const Program& p) {
                               py::list ops;
                               for (std::size_t i = 0; i < p.num_equations(); ++i) ops.append(p.equation_op(i));
                               return ops;
                             })
      .def_property_readonly("input_types",
                             [](const Program& p) {
                               py::list types;
                               for (const ValueType& t : p.input_types()) types.append(type_tuple(t));
                               return types;
                             })
      .def_property_readonly("output_types",
                             [](const Program& p) {
                               py::list types;
                               for (const ValueType& t : p.output_types()) types.append(type_tuple(t));
                               return types;
                             })
      .def_property_readonly("peak_live_bytes", &Program::peak_live_bytes)
      .def_property_readonly("fused_runs", &Program::fused_runs)
      .def_property_readonly("shard_map_rules",
                             [](const Program& p) { return p.collective_rules() == CollectiveRules::shard_map; });

  py::class_<ProgramBuilder>(m, "ProgramBuilder", "What a trace records into (weft/_trace.py).")
      .def(py::init([](const std::vector<std::pair<std::string, int>>& mesh, bool shard_map_rules) {
             return std::make_unique<ProgramBuilder>(
                 mesh_of(mesh), shard_map_rules ? CollectiveRules::shard_map : CollectiveRules::pmap);
           }),
           py::arg("mesh"), py::arg("shard_map_rules") = false)
      .def("input",
           [](ProgramBuilder& b, py::handle dtype, std::vector<std::int64_t> shape, std::vector<std::string> varying) {
             const DType d = weft_dtype(py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype)), "a traced input");
             return b.input(ValueType{d, std::move(shape), std::move(varying)});
           })
      .def("constant",
           [](ProgramBuilder& b, py::handle value) {
             const int id = b.constant(to_array(value, "a constant of a traced function").copy());
             return py::make_tuple(id, type_tuple(b.type(id)));
           })
      .def("emit",
           [](ProgramBuilder& b, const std::string& op, const std::vector<int>& inputs, const py::list& params,
              std::string source) {
             py::list out;
             for (int id : b.emit(op, inputs, params_of(op, params), std::move(source))) {
               out.append(py::make_tuple(id, type_tuple(b.type(id))));
             }
             return out;
           })
      .def("inline",
           [](ProgramBuilder& b, const Program& program, const std::vector<int>& inputs) {
             py::list out;
             for (int id : b.inline_program(program, inputs)) out.append(py::make_tuple(id, type_tuple(b.type(id))));
             return out;
           })
      .def("set_outputs", &ProgramBuilder::set_outputs)
      .def_property_readonly("num_equations", &ProgramBuilder::num_equations)
      .def("build", &ProgramBuilder::build);
}

// The functions over programs: the registry's schemas, the transformations, partial evaluation and running.
void bind_program_functions(py::module_& m) {
  m.def("op_schema", &schema_list, py::arg("op"),
        "The parameters of program op `op` as (name, kind, required) triples, from the C++ registry.");
  m.def("checkpoint_region", &weft::detail::new_checkpoint_region,
        "A new checkpoint region number (weft.checkpoint), unique in the process, C++'s weft::checkpoint alike.");
  m.def("register_custom_vjp", &weft::detail::register_custom_vjp, py::arg("bwd"), py::arg("name"),
        "Registers a custom_vjp call's bwd program (weft.custom_vjp); returns its rule number, unique in the process.");
  m.def("register_custom_jvp", &weft::detail::register_custom_jvp, py::arg("jvp"), py::arg("name"),
        "Registers a custom_jvp call's jvp rule program (weft.custom_jvp); returns its rule number, unique in the "
        "process.");
  m.def("vjp_program", &vjp_program, py::arg("program"), py::arg("wrt"),
        "The program of `program`'s outputs and the cotangents of its inputs at `wrt` (weft.grad, weft.vjp).");
  m.def(
      "saved_residuals",
      [](const Program& program, const std::vector<int>& wrt) {
        py::list out;
        for (const SavedResidual& r : saved_residuals(program, wrt)) {
          out.append(py::make_tuple(type_tuple(r.type), r.input, r.op, r.source));
        }
        return out;
      },
      py::arg("program"), py::arg("wrt"),
      "What the VJP's backward pass keeps from the forward pass: (type, input index or -1, op, source) each "
      "(weft.ad_checkpoint.print_saved_residuals).");
  m.def("jvp_program", &jvp_program, py::arg("program"),
        "The program of `program`'s outputs and their tangents, from its inputs then one tangent per input "
        "(weft.jvp, weft.jacfwd).");
  m.def(
      "batch_program",
      [](const Program& program, const std::vector<bool>& batched, std::int64_t size, const std::string& axis_name) {
        BatchedProgram result = batch_program(program, batched, size, axis_name);
        return py::make_tuple(std::move(result.program), result.out_batched);
      },
      py::arg("program"), py::arg("batched"), py::arg("size"), py::arg("axis_name") = "",
      "(program over `size` examples at once, per output whether it carries the batch axis in front) (weft.vmap).");

  // Partial evaluation (weft.linearize): its own block, apart from the parameter conversion above.
  m.def(
      "partial_eval",
      [](const Program& program, const std::vector<bool>& unknowns, const std::vector<bool>& instantiate) {
        PartialEval split = partial_eval(program, unknowns, instantiate);
        return py::make_tuple(std::move(split.known), std::move(split.unknown), split.out_unknowns,
                              split.num_residuals);
      },
      py::arg("program"), py::arg("unknowns"), py::arg("instantiate") = std::vector<bool>{},
      "(known, unknown, out_unknowns, num_residuals): `program` split by which inputs are unknown (JAX's "
      "partial_eval_jaxpr_nounits). known: known inputs -> known outputs, then the residuals; unknown: the "
      "residuals, then the unknown inputs -> the unknown outputs (weft.linearize).");

  m.def("caller_source", [] {
    const CallSite site = python_call_site();
    return std::string(site.file_name()) + ":" + std::to_string(site.line());
  }, "The user's line calling into weft now (the first frame outside the package), as 'file:line'.");

  m.def(
      "run_program",
      [](const Program& program, const py::sequence& args) {
        std::vector<Array> inputs = arrays_of(args, "an argument of a jitted function");
        std::vector<Array> outputs;
        {
          py::gil_scoped_release release;
          outputs = run_program(program, inputs);
        }
        py::list out;
        for (const Array& a : outputs) out.append(to_numpy(a));
        return out;
      },
      "Runs a traced program on this thread (weft.jit outside pmap).");

  // weft.lax's control flow called in an eager replica (weft.pmap(f, eager=True), a session's program): the
  // call is traced on the replica's mesh and run as the replica, so collectives inside a body meet the other
  // replicas' (weft/_control_flow.py).
  m.def(
      "replica_mesh",
      [](const std::string& op) {
        std::vector<std::pair<std::string, int>> axes;
        for (const MeshAxis& axis : current_replica(op.c_str()).mesh().axes()) axes.emplace_back(axis.name, axis.size);
        return axes;
      },
      py::arg("op"), "The mesh of the calling thread's replica as (name, size) pairs; `op` names the caller's errors.");
  m.def(
      "run_program_in_replica",
      [](const Program& program, const py::sequence& args, const std::string& op) {
        Replica& replica = current_replica(op.c_str());
        std::vector<Array> inputs = arrays_of(args, "an argument of a traced call in a replica");
        std::vector<Array> outputs;
        {
          py::gil_scoped_release release;  // (the other replicas' Python runs while this one waits for them)
          outputs = run_program(program, replica, inputs);
        }
        py::list out;
        for (const Array& a : outputs) out.append(to_numpy(a));
        return out;
      },
      py::arg("program"), py::arg("args"), py::arg("op"),
      "Runs a traced program as the calling thread's replica (its collectives meet the other replicas').");
}

}  // namespace

void init_program(py::module_& m) {
  bind_program_classes(m);
  bind_program_functions(m);
  py::class_<ProgramPmap>(m, "ProgramPmap")
      .def(py::init<Program, std::string, std::vector<std::pair<std::string, int>>, std::vector<std::optional<int>>,
                    std::vector<std::optional<int>>, std::vector<Device>, std::string>(),
           py::arg("program"), py::arg("axis"), py::arg("mesh"), py::arg("in_axes"), py::arg("out_axes"),
           py::arg("devices"), py::arg("name"))
      .def("__call__", &ProgramPmap::call, py::arg("args"), py::arg("sharded_type"),
           py::arg("donate") = std::vector<bool>{});
}

}  // namespace weft::python
