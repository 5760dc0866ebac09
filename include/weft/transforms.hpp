// Forward mode and batching for C++ functions written against weft::Array (issue 46): weft::jvp, jacfwd,
// jacrev, hessian and vmap, JAX's names and semantics. As weft::grad (weft/autodiff.hpp), the function is
// traced once per input signature and the program transformed (jvp_program, vjp_program, batch_program:
// weft/program.hpp, one rule per primitive); every later call runs the transformed program, or, called with
// symbolic Arrays inside jit or another transform, is inlined into the trace around it, so transforms compose
// (hessian is jacfwd of jacrev; vmap of grad gives per-example gradients).
//
//   auto [y, dy] = weft::jvp(f, {x}, {dx});                  // f(x) and its derivative along dx
//   Array J = weft::jacfwd(f)(x);                           // f(x).shape + x.shape, by forward mode
//   Array J2 = weft::jacrev(f, 1)(x, w);                    // with respect to w, by reverse mode
//   Array H = weft::hessian(loss)(w);                       // w.shape + w.shape
//   Array g = weft::vmap(weft::grad(loss), {0, std::nullopt})(ws, x);  // per-example gradients, x shared
//   Array n = weft::vmap([](Replica& r, const Array& x) { return x / r.psum(x, "b"); }, {}, {}, "b")(xs);
//   auto f = weft::custom_jvp(fun, rule);                    // fun differentiated by the user's rule
//
// Only vmap with an axis_name takes functions of a Replica& (whose collectives over that name act across the
// examples); a function may close over concrete Arrays (they become constants), not over symbolic ones of an
// enclosing trace.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/error.hpp"
#include "weft/jit.hpp"

namespace weft {
namespace detail {

// A transformed function's programs, one per call signature. `signature` maps the call's input types to the
// function's (jvp: the primals; vmap: one example's); `make` builds the program the call runs from the
// function's traced program and the call's types. The program is traced through a ProgramCache, so it is
// made once per signature; a call with symbolic inputs inlines it into their trace.
class TransformCache {
 public:
  using Signature = std::function<std::vector<ValueType>(const std::vector<ValueType>& call)>;
  using Make = std::function<Program(const Program& fn, const std::vector<ValueType>& call)>;
  // The mesh the function is traced on for a call's types (vmap's axis_name: that axis, of the batch size),
  // with a Replica over it; null: no mesh, no Replica.
  using MeshOf = std::function<Mesh(const std::vector<ValueType>& call)>;
  TransformCache(Signature signature, Make make, std::string name, MeshOf mesh_of = nullptr);

  // The transformed program's outputs for `inputs`, `fn` being the function traced (plain_body).
  std::vector<Array> run(const TraceBody& fn, std::vector<Array> inputs) const;
  std::size_t traces() const { return cache_->traces(); }
  const std::string& name() const { return name_; }

 private:
  Signature signature_;
  Make make_;
  std::string name_;
  MeshOf mesh_of_;
  std::shared_ptr<ProgramCache> cache_;
};

// jax.jvp's checks: each tangent has its primal's dtype and shape (an integer primal's tangent its dtype too:
// weft has no float0).
void check_jvp_arguments(std::span<const Array> primals, std::span<const Array> tangents);

// The programs (src/runtime/transforms.cc). Each takes the function's traced program and has the call's
// inputs as its own (jvp's is jvp_program itself: primals then tangents in, f's outputs then their tangents
// out). One Jacobian per output of fn, of shape out.shape + in.shape with respect to input `argnum`.
Program jacfwd_call_program(const Program& fn, int argnum, const std::string& name);
Program jacrev_call_program(const Program& fn, int argnum, const std::string& name);
// vmap: `in_axes` per input (nullopt: shared by every example), `out_axes` per output (nullopt: the output
// does not depend on the example; an error if it does), `axis_name` (may be empty) the mapped axis's name:
// the function is traced on a mesh of that one axis, its mapped inputs varying along it, and batch_program
// makes its collectives over the axis act across the examples.
struct VmapAxes {
  std::vector<std::optional<int>> in_axes;
  std::vector<std::optional<int>> out_axes;
  std::string axis_name;
};
// The mesh vmap traces the function on for a call: {axis_name: the batch size}.
Mesh vmap_mesh(const std::vector<ValueType>& call, const VmapAxes& axes, const std::string& name);
std::vector<ValueType> vmap_example_types(const std::vector<ValueType>& call, const VmapAxes& axes,
                                          const std::string& name);
Program vmap_call_program(const Program& fn, const std::vector<ValueType>& call, const VmapAxes& axes,
                          const std::string& name);

// f called with N traced Arrays. Not jit's invoke_traced, which asks whether f takes a Replica& first: that
// question instantiates the body of a generic callable such as weft::grad's (a hard error, not a "no").
template <class F, std::size_t... I>
decltype(auto) invoke_plain(F& fn, std::span<const Array> a, std::index_sequence<I...>) {
  return fn(a[I]...);
}
template <class F, std::size_t N>
using result_of_n_t =
    std::decay_t<decltype(invoke_plain(std::declval<F&>(), std::span<const Array>{}, std::make_index_sequence<N>{}))>;
template <class F, std::size_t N>
TraceBody plain_body(const std::shared_ptr<F>& fn) {
  return [fn](Replica*, std::span<const Array> a) {
    return flatten_outputs(invoke_plain(*fn, a, std::make_index_sequence<N>{}));
  };
}

// The same for a function of (Replica&, Arrays...) (pmap.hpp's invoke_replica): vmap with an axis_name.
template <class F, std::size_t N>
using replica_result_of_n_t = std::decay_t<decltype(invoke_replica(std::declval<F&>(), std::declval<Replica&>(),
                                                                   std::span<const Array>{},
                                                                   std::make_index_sequence<N>{}))>;
template <class F, std::size_t N>
TraceBody replica_body(const std::shared_ptr<F>& fn, const std::string& name) {
  return [fn, name](Replica* r, std::span<const Array> a) {
    if (r == nullptr) {
      throw InvalidArgument(name + ": the function takes a Replica& (for its collectives), which needs vmap's "
                            "axis_name: the axis its collectives run over");
    }
    return flatten_outputs(invoke_replica(*fn, *r, a, std::make_index_sequence<N>{}));
  };
}

// A function transformed by a TransformCache: called with Arrays, returns what f returns (jacfwd / jacrev:
// one Jacobian per output; vmap: one batched value per output).
template <class F>
class Transformed {
 public:
  Transformed(F fn, TransformCache cache) : fn_(std::make_shared<F>(std::move(fn))), cache_(std::move(cache)) {}

  // Constrained rather than asserted, so that another transform or jit tracing this one sees what it takes.
  // F is called with the Arrays, or, where it cannot be and it takes a Replica& first (vmap with an
  // axis_name), with the trace's Replica and the Arrays. (Plain calls are asked about first: asking whether a
  // generic callable such as weft::grad's takes a Replica& would instantiate its body.)
  template <class... Args>
    requires(std::is_convertible_v<const Args&, const Array&> && ...)
  auto operator()(const Args&... args) const {
    constexpr std::size_t n = sizeof...(Args);
    if constexpr (std::is_invocable_v<F&, const Args&...>) {
      using R = result_of_n_t<F, n>;
      return rebuild<R>(cache_.run(plain_body<F, n>(fn_), std::vector<Array>{Array(args)...}));
    } else {
      using R = replica_result_of_n_t<F, n>;
      return rebuild<R>(cache_.run(replica_body<F, n>(fn_, cache_.name()), std::vector<Array>{Array(args)...}));
    }
  }
  // How many signatures were traced.
  std::size_t traces() const { return cache_.traces(); }

 private:
  std::shared_ptr<F> fn_;
  TransformCache cache_;
};

}  // namespace detail

// jax.jvp(f, primals, tangents): {f(primals...), the derivative of f at primals along tangents}, each
// shaped as f's result (an Array or a std::tuple of them). One tangent per primal, of its dtype and shape
// (an integer primal's tangent is read as zero).
template <class F, std::size_t N>
auto jvp(F fn, const Array (&primals)[N], const Array (&tangents)[N]) {
  using R = detail::result_of_n_t<F, N>;
  detail::TransformCache cache(
      [](const std::vector<ValueType>& call) {
        return std::vector<ValueType>(call.begin(), call.begin() + static_cast<std::ptrdiff_t>(N));
      },
      [](const Program& f, const std::vector<ValueType>&) { return jvp_program(f); }, "jvp");
  detail::check_jvp_arguments(std::span<const Array>(primals, N), std::span<const Array>(tangents, N));
  std::vector<Array> inputs(primals, primals + N);
  inputs.insert(inputs.end(), tangents, tangents + N);
  std::vector<Array> out = cache.run(detail::plain_body<F, N>(std::make_shared<F>(std::move(fn))), std::move(inputs));
  const auto half = static_cast<std::ptrdiff_t>(out.size() / 2);
  return std::pair<R, R>{detail::rebuild<R>(std::vector<Array>(out.begin(), out.begin() + half)),
                         detail::rebuild<R>(std::vector<Array>(out.begin() + half, out.end()))};
}

// jax.jacfwd(f, argnums=argnum): the Jacobian of f's result(s) with respect to argument `argnum`, by forward
// mode (the JVP of f batched over the input's standard basis): out.shape + in.shape per output, in the
// output's dtype. The argument must be of a floating dtype, as must each output.
template <class F>
auto jacfwd(F fn, int argnum = 0, std::string name = "jacfwd") {
  detail::TransformCache cache([](const std::vector<ValueType>& call) { return call; },
                               [argnum, name](const Program& f, const std::vector<ValueType>&) {
                                 return detail::jacfwd_call_program(f, argnum, name);
                               },
                               name);
  return detail::Transformed<F>(std::move(fn), std::move(cache));
}

// jax.jacrev(f, argnums=argnum): the same Jacobian by reverse mode (the VJP of f batched over each output's
// standard basis), in the argument's dtype.
template <class F>
auto jacrev(F fn, int argnum = 0, std::string name = "jacrev") {
  detail::TransformCache cache([](const std::vector<ValueType>& call) { return call; },
                               [argnum, name](const Program& f, const std::vector<ValueType>&) {
                                 return detail::jacrev_call_program(f, argnum, name);
                               },
                               name);
  return detail::Transformed<F>(std::move(fn), std::move(cache));
}

// jax.hessian(f, argnums=argnum): jacfwd(jacrev(f)), in.shape + in.shape for a scalar f.
template <class F>
auto hessian(F fn, int argnum = 0) {
  return jacfwd(jacrev(std::move(fn), argnum, "hessian"), argnum, "hessian");
}

// jax.vmap(f, in_axes, out_axes, axis_name): f mapped over axis in_axes[k] of argument k (nullopt: the
// argument is shared by every example), its result(s) stacked along out_axes[j]. Empty lists mean axis 0 for
// every argument / output (JAX's defaults); a negative axis counts from the end. One batched program runs,
// never a loop over the examples. With an `axis_name`, f may take a Replica& first: its collectives over that
// name (r.psum(x, "b"), all_gather, ppermute, axis_index, ...) act across the examples, with the values
// weft::pmap gives over an axis of that name and size (batch_program's collective rules, docs/autodiff.md).
template <class F>
auto vmap(F fn, std::vector<std::optional<int>> in_axes = {}, std::vector<std::optional<int>> out_axes = {},
          std::string axis_name = {}) {
  const std::string name = "vmap";
  const detail::VmapAxes axes{std::move(in_axes), std::move(out_axes), std::move(axis_name)};
  detail::TransformCache::MeshOf mesh_of = nullptr;
  if (!axes.axis_name.empty()) {
    mesh_of = [axes, name](const std::vector<ValueType>& call) { return detail::vmap_mesh(call, axes, name); };
  }
  detail::TransformCache cache(
      [axes, name](const std::vector<ValueType>& call) { return detail::vmap_example_types(call, axes, name); },
      [axes, name](const Program& f, const std::vector<ValueType>& call) {
        return detail::vmap_call_program(f, call, axes, name);
      },
      name, std::move(mesh_of));
  return detail::Transformed<F>(std::move(fn), std::move(cache));
}

namespace detail {

// custom_jvp's rule as the call site sees it: (primals, tangents) -> (primal output, tangent output).
using CustomJvpRule =
    std::function<std::pair<Array, Array>(const std::vector<Array>& primals, const std::vector<Array>& tangents)>;

// The registered rule programs of one custom_jvp, by the primals' signature.
class CustomJvpRules {
 public:
  // The rule number for these primals and fun's output (the rule traced, checked and registered on first sight).
  std::int64_t rule(const std::vector<Array>& primals, const Array& out, const CustomJvpRule& jvp,
                    const std::string& name);

 private:
  std::mutex mutex_;
  std::map<std::string, std::int64_t> rules_;
};

// Records the custom_jvp_call closing a call into the trace of the symbolic values among `primals` and `out`;
// returns the call's output (out, as the program reads it from now on).
Array record_custom_jvp_call(std::span<const Array> primals, const Array& out, std::int64_t rule,
                             const std::string& name);

}  // namespace detail

// A function with the user's JVP rule (jax.custom_jvp with defjvp), built by weft::custom_jvp below.
template <class Fun, class Rule>
class CustomJvp {
 public:
  CustomJvp(Fun fun, Rule rule, std::string name)
      : fun_(std::move(fun)), rule_(std::move(rule)), name_(std::move(name)),
        rules_(std::make_shared<detail::CustomJvpRules>()) {}

  template <class... Args>
    requires(std::is_convertible_v<const Args&, const Array&> && ...)
  Array operator()(const Args&... args) const {
    const std::vector<Array> primals{Array(args)...};
    bool traced = false;
    for (const Array& a : primals) traced = traced || a.traced();
    const Array out = fun_(args...);
    if (!traced) return out;
    const detail::CustomJvpRule jvp = [this](const std::vector<Array>& p, const std::vector<Array>& t) {
      return std::pair<Array, Array>(rule_(p, t));
    };
    const std::int64_t rule = rules_->rule(primals, out, jvp, name_);
    return detail::record_custom_jvp_call(primals, out, rule, name_);
  }

 private:
  Fun fun_;
  Rule rule_;
  std::string name_;
  std::shared_ptr<detail::CustomJvpRules> rules_;
};

// jax.custom_jvp(fun) with defjvp(rule): fun(args...) -> Array; rule(primals, tangents) -> std::pair<Array,
// Array> (fun's output at the primals, its tangent), one tangent per argument, each its primal's type (an
// integer argument's is zeros of its dtype). Called on concrete Arrays it computes fun. Inside a trace (jvp,
// jacfwd, grad, vmap, jit) fun is traced as it is and a custom_jvp_call equation closes the call
// (src/program/custom_calls.hpp): forward mode runs the rule instead of differentiating fun, reverse mode
// transposes the rule (linear in the tangents), vmap batches it. The rule is traced once per signature of the
// arguments, over no mesh; its primal output must have fun's output type and its tangent output that too.
template <class Fun, class Rule>
CustomJvp<Fun, Rule> custom_jvp(Fun fun, Rule rule, std::string name = "custom_jvp") {
  return CustomJvp<Fun, Rule>(std::move(fun), std::move(rule), std::move(name));
}

}  // namespace weft
