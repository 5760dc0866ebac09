// pmap: run a C++ function once per replica, one replica per device, over a mesh of named axes.
//
//   auto normalize = pmap([](Replica& r, const Array& x) { return x / r.psum(x, "i"); }, {.axis = "i"});
//   ShardedArray y = normalize(data);
//
// The function takes the replica context (optional) and one Array per argument (its slice for mapped
// arguments, the whole value for broadcast ones) and returns an Array, a std::tuple of Arrays or a
// std::vector of Arrays. The first call with given shapes and dtypes prepares (plans, groups, buffers);
// later calls with the same signature reuse that (Runtime::stats().preparations counts the misses).
// A pmapped function (and its copies) may be called from several threads at once; the runtime then runs
// the executions one at a time.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "weft/array.hpp"
#include "weft/groups.hpp"
#include "weft/replica.hpp"
#include "weft/runtime.hpp"
#include "weft/sharded_array.hpp"

namespace weft {

struct PmapOptions {
  std::string axis{};                        // 1-d pmap: the axis name (JAX's axis_name); may be empty
  std::vector<MeshAxis> mesh{};              // several axes = nested pmap, outermost first
  std::vector<Device> devices{};             // explicit devices (default: the first ones of the runtime)
  // Per argument: the axis it is mapped along, or std::nullopt = broadcast (JAX's None); empty = all 0. A
  // negative axis counts from the end, as in JAX: -1 is the last axis of the argument.
  std::vector<std::optional<int>> in_axes{};
  // Per output: where the mapped axis goes in the result, or std::nullopt = replicated; empty = all 0. A
  // negative axis counts from the end of the result (which has the output's axes and the mapped one).
  std::vector<std::optional<int>> out_axes{};
  Runtime* runtime = nullptr;                // default Runtime::current()
  std::string name = "pmap";                 // used in error messages
  // Each replica needs an OS thread of its own (it runs code that cannot live on a fiber, e.g. a Python
  // frame): the runtime then runs this program on one thread per device even when its scheduler is fibers.
  bool replica_threads = false;
  // Every replica runs the same traced program(s) in the same order (a traced pmap's replicas do): their
  // products by a weight the program's types prove shared may then run as one (WEFT_SHARED_PRODUCTS,
  // program/shared_products.hpp). Off by default: a C++ function may run different code on each replica.
  bool shared_products = false;
};

// An argument of a pmapped call: a host array or a sharded array already on devices.
using PmapArg = std::variant<Array, ShardedArray>;
// What each replica runs: its inputs are its own (the engine drops them after the call), so the function may
// move from them; a function taking std::span<const Array> converts.
using ReplicaFunction = std::function<std::vector<Array>(Replica&, std::span<Array>)>;

// The type-erased engine behind pmap.
class PmapProgram {
 public:
  PmapProgram(ReplicaFunction fn, PmapOptions options);
  std::vector<ShardedArray> operator()(std::vector<PmapArg> args) const;
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

namespace detail {
template <class T> struct is_tuple : std::false_type {};
template <class... T> struct is_tuple<std::tuple<T...>> : std::true_type {};

template <class F, std::size_t... I>
decltype(auto) invoke_replica(F& fn, Replica& r, std::span<const Array> a, std::index_sequence<I...>) {
  if constexpr (std::is_invocable_v<F&, Replica&, decltype((void)I, std::declval<const Array&>())...>)
    return fn(r, a[I]...);
  else
    return fn(a[I]...);
}

template <class R>
std::vector<Array> flatten_outputs(R&& result) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Array>) {
    return {std::forward<R>(result)};
  } else if constexpr (is_tuple<T>::value) {
    return std::apply([](auto&&... xs) { return std::vector<Array>{Array(xs)...}; }, std::forward<R>(result));
  } else {
    static_assert(std::is_same_v<T, std::vector<Array>>,
                  "a pmapped function returns an Array, a std::tuple of Arrays or a std::vector<Array>");
    return std::forward<R>(result);
  }
}

template <class R, std::size_t... I>
auto unflatten_tuple(std::vector<ShardedArray>& out, std::index_sequence<I...>) {
  return std::tuple{((void)sizeof(std::tuple_element_t<I, R>), std::move(out[I]))...};
}
}  // namespace detail

template <class F>
class Pmapped {
 public:
  Pmapped(F fn, PmapOptions options) : state_(std::make_shared<State>(std::move(fn), std::move(options))) {}

  template <class... Args>
  auto operator()(Args&&... args) const {
    constexpr std::size_t n = sizeof...(Args);
    using Result = decltype(detail::invoke_replica(std::declval<F&>(), std::declval<Replica&>(),
                                                   std::span<const Array>{}, std::make_index_sequence<n>{}));
    const std::shared_ptr<const PmapProgram> program = program_for<n>();
    std::vector<ShardedArray> out = (*program)(std::vector<PmapArg>{PmapArg(std::forward<Args>(args))...});
    using R = std::decay_t<Result>;
    // A process that holds none of the program's devices gets empty sharded arrays (no local shards).
    if constexpr (std::is_same_v<R, Array>) {
      if (out.empty()) out.resize(1);
      return std::move(out[0]);
    } else if constexpr (detail::is_tuple<R>::value) {
      if (out.empty()) out.resize(std::tuple_size_v<R>);
      return detail::unflatten_tuple<R>(out, std::make_index_sequence<std::tuple_size_v<R>>{});
    } else {
      return out;
    }
  }

 private:
  // Shared by the copies of a pmapped function. The engines are made on first call, and first calls may
  // come from several threads at once: the map is only touched under the mutex (a lookup per call costs an
  // uncontended lock, nothing next to an execution).
  struct State {
    State(F f, PmapOptions o) : fn(std::make_shared<F>(std::move(f))), options(std::move(o)) {}
    std::shared_ptr<F> fn;
    const PmapOptions options;
    std::mutex mutex;
    // One engine per arity (a C++ callable may be called with different argument counts only if generic).
    std::map<std::size_t, std::shared_ptr<const PmapProgram>> programs;
  };

  template <std::size_t N>
  std::shared_ptr<const PmapProgram> program_for() const {
    std::lock_guard lock(state_->mutex);
    std::shared_ptr<const PmapProgram>& program = state_->programs[N];
    if (!program) {
      auto fn = state_->fn;
      program = std::make_shared<const PmapProgram>(
          [fn](Replica& r, std::span<const Array> a) {
            return detail::flatten_outputs(detail::invoke_replica(*fn, r, a, std::make_index_sequence<N>{}));
          },
          state_->options);
    }
    return program;
  }
  std::shared_ptr<State> state_;
};

template <class F>
Pmapped<F> pmap(F fn, PmapOptions options = {}) {
  return Pmapped<F>(std::move(fn), std::move(options));
}

}  // namespace weft
