// Tracing from C++: weft::jit, weft::make_program and pmap of a jitted function, for functions written against
// weft::Array (and the Replica's collectives). The function is called once per input signature (each input's
// dtype and shape; the mesh for pmap) with symbolic Arrays: every op it applies records an equation of a
// weft::Program (weft/program.hpp), which then runs for every call with that signature.
//
//   auto f = weft::jit([](const Array& x, const Array& w) { return tanh(matmul(x, w)).sum(); });
//   Array y = f(x, w);                                   // traced on the first call, run from the program
//   std::cout << weft::make_program(g)(x, w);            // { lambda ; a:f32[8,4] b:f32[4,4] . let ... }
//   auto step = pmap(jit([](Replica& r, const Array& x) { return x / r.psum(x, "i"); }), {.axis = "i"});
//
// The same code runs traced or not: there is one Array type, symbolic while a trace runs. Python control flow's
// C++ equivalent works on shapes and dtypes (known while tracing), not on values: reading a traced Array's
// data (data(), item(), to_doubles(), ...) is an InvalidArgument naming the op. Concrete Arrays the function
// meets (captured weights, Array::zeros(...)) become the program's constants. A jitted function called with
// symbolic Arrays (inside another trace) is inlined into that trace. docs/programs.md has the details.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/array.hpp"
#include "weft/pmap.hpp"
#include "weft/program.hpp"
#include "weft/replica.hpp"

namespace weft {

namespace detail {

// A function to trace, type-erased: called with symbolic inputs (and a traced Replica when it takes one; null
// otherwise), returning its outputs flattened.
using TraceBody = std::function<std::vector<Array>(Replica*, std::span<const Array>)>;

// Traces `body` once with inputs of `types`; with `replica`, body gets a Replica over `mesh` whose
// collectives (and axis_index) record equations.
Program trace_program(const TraceBody& body, const std::vector<ValueType>& types, const Mesh& mesh, bool replica,
                      const std::string& name);

// One Program per signature (every input's dtype and shape, and the mesh), traced on the first call with it.
// Shared by the copies of a jitted function; safe to call from every replica at once (one of them traces).
class ProgramCache {
 public:
  ProgramCache();
  ~ProgramCache();
  // The program for these (concrete) inputs on `mesh`, or null if none is traced yet. No lock when the
  // signature is the last one seen.
  const Program* find(std::span<const Array> inputs, const Mesh& mesh) const;
  // Traces `body` for this signature unless another caller did first. For a replica function the inputs
  // that `in_axes` maps (empty: all of them) vary along every mesh axis; broadcast ones (nullopt) do not.
  const Program& trace(std::span<const Array> inputs, const Mesh& mesh, bool replica,
                       const std::vector<std::optional<int>>& in_axes, const TraceBody& body, const std::string& name);
  // How many programs were traced (the signatures seen).
  std::size_t traces() const;
  // A program derived from `traced` (one of this cache's) by `make`, e.g. its VJP, made once per `key`.
  const Program& derived(const Program& traced, const std::string& key,
                         const std::function<Program(const Program&)>& make);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <class F, std::size_t... I>
decltype(auto) invoke_traced(F& fn, Replica* r, std::span<const Array> a, std::index_sequence<I...>) {
  if constexpr (std::is_invocable_v<F&, Replica&, decltype((void)I, std::declval<const Array&>())...>)
    return fn(*r, a[I]...);
  else
    return fn(a[I]...);
}

template <class F, std::size_t N>
TraceBody trace_body(const std::shared_ptr<F>& fn) {
  return [fn](Replica* r, std::span<const Array> a) {
    return flatten_outputs(invoke_traced(*fn, r, a, std::make_index_sequence<N>{}));
  };
}

// A function's result (an Array, a std::tuple of Arrays or a std::vector<Array>) from the program's outputs.
template <class R>
R rebuild(std::vector<Array> out) {
  if constexpr (std::is_same_v<R, Array>) {
    return std::move(out.at(0));
  } else if constexpr (is_tuple<R>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R{std::move(out.at(I))...};
    }(std::make_index_sequence<std::tuple_size_v<R>>{});
  } else {
    return out;
  }
}

template <class F, class... Args>
using traced_result_t = std::decay_t<decltype(invoke_traced(std::declval<F&>(), nullptr, std::span<const Array>{},
                                                            std::index_sequence_for<Args...>{}))>;

template <class F>
class TracedReplicaFunction;
}  // namespace detail

// What weft::jit returns: call it with Arrays; its copies share one program cache.
template <class F>
class Jitted {
 public:
  explicit Jitted(F fn, std::string name = "jit")
      : fn_(std::make_shared<F>(std::move(fn))), cache_(std::make_shared<detail::ProgramCache>()),
        name_(std::move(name)) {}

  template <class... Args>
  auto operator()(const Args&... args) const {
    static_assert((std::is_convertible_v<const Args&, const Array&> && ...),
                  "a jitted function takes weft::Array arguments");
    using R = detail::traced_result_t<F, Args...>;
    static_assert(!std::is_invocable_v<F&, Replica&, decltype((void)sizeof(Args), std::declval<const Array&>())...>,
                  "a function taking a Replica& is traced by pmap(jit(f), options), not called through jit");
    if ((static_cast<const Array&>(args).traced() || ...)) {
      return R((*fn_)(args...));  // inside another trace: inlined into it
    }
    const std::array<Array, sizeof...(Args)> inputs{Array(args)...};
    static const Mesh no_mesh;
    const Program* program = cache_->find(inputs, no_mesh);
    if (program == nullptr) {
      program = &cache_->trace(inputs, no_mesh, false, {}, detail::trace_body<F, sizeof...(Args)>(fn_), name_);
    }
    return detail::rebuild<R>(run_program(*program, inputs));
  }

  // How many signatures were traced.
  std::size_t traces() const { return cache_->traces(); }

 private:
  friend class detail::TracedReplicaFunction<F>;
  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::ProgramCache> cache_;
  std::string name_;
};

// jax.jit: `fn` traced once per input signature into a weft::Program that every later call runs.
template <class F>
Jitted<F> jit(F fn, std::string name = "jit") {
  return Jitted<F>(std::move(fn), std::move(name));
}

namespace detail {
template <class F>
struct Checkpointed {
  F fn;
  // SFINAE-friendly, so a jit or make_program around it still sees whether fn takes a Replica&.
  template <class... A>
  auto operator()(A&&... args) const -> decltype(fn(std::forward<A>(args)...)) {
    CheckpointScope scope;
    return fn(std::forward<A>(args)...);
  }
};
}  // namespace detail

// jax.checkpoint (jax.remat): fn, whose values the VJP of a program traced through it (weft::vjp_program of
// a make_program) recomputes from fn's inputs right before its backward rules instead of keeping them from
// the forward pass (docs/autodiff.md, "checkpoint"). Called untraced, it just computes fn.
//
//   auto layer = weft::checkpoint([](const Array& x, const Array& w) { return tanh(matmul(x, w)); });
template <class F>
detail::Checkpointed<F> checkpoint(F fn) {
  return {std::move(fn)};
}

// jax.make_jaxpr: make_program(f)(args...) traces f for the args' dtypes and shapes and returns the program
// (printable: program.text(), std::cout << program). make_program(f, mesh)(args...) traces a replica function
// f(Replica&, Array...) over `mesh`, each arg being one replica's value (varying along every mesh axis).
template <class F>
auto make_program(F fn, Mesh mesh = Mesh(), std::string name = "make_program") {
  return [fn = std::make_shared<F>(std::move(fn)), mesh = std::move(mesh), name = std::move(name)](
             const auto&... args) -> Program {
    std::vector<ValueType> types;
    const bool replica =
        std::is_invocable_v<F&, Replica&, decltype((void)sizeof(args), std::declval<const Array&>())...>;
    std::vector<std::string> varying;
    if (replica) {
      for (const MeshAxis& axis : mesh.axes()) varying.push_back(axis.name);
      std::sort(varying.begin(), varying.end());
    }
    (types.push_back(ValueType{static_cast<const Array&>(args).dtype(), static_cast<const Array&>(args).shape(),
                               varying}),
     ...);
    return detail::trace_program(detail::trace_body<F, sizeof...(args)>(fn), types, mesh, replica, name);
  };
}

namespace detail {
// The replica function pmap(jit(f)) runs: the program of f for this signature (traced by the first replica
// to arrive), run through the replica.
template <class F>
class TracedReplicaFunction {
 public:
  TracedReplicaFunction(const Jitted<F>& jitted, std::vector<std::optional<int>> in_axes, std::string name)
      : fn_(jitted.fn_), cache_(jitted.cache_), in_axes_(std::move(in_axes)), name_(std::move(name)) {}

  template <class... Args>
  traced_result_t<F, Args...> operator()(Replica& r, const Args&... args) const {
    using R = traced_result_t<F, Args...>;
    const std::array<Array, sizeof...(Args)> inputs{Array(args)...};
    const Program* program = cache_->find(inputs, r.mesh());
    if (program == nullptr) {
      program = &cache_->trace(inputs, r.mesh(), true, in_axes_, trace_body<F, sizeof...(Args)>(fn_), name_);
    }
    return rebuild<R>(run_program(*program, r, inputs));
  }

 private:
  std::shared_ptr<F> fn_;
  std::shared_ptr<ProgramCache> cache_;
  std::vector<std::optional<int>> in_axes_;
  std::string name_;
};
}  // namespace detail

// pmap of a traced function: f(Replica&, Array...) (or f(Array...)) is traced once per signature over the
// mapped mesh, its mapped inputs varying along every mesh axis, and every replica runs the program (its
// collectives through the replica, as hand-written code's). The options are pmap's.
template <class F>
auto pmap(Jitted<F> fn, PmapOptions options = {}) {
  detail::TracedReplicaFunction<F> traced(fn, options.in_axes, options.name);
  return Pmapped<detail::TracedReplicaFunction<F>>(std::move(traced), std::move(options));
}

}  // namespace weft
