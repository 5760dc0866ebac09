// Reverse mode for C++ functions written against weft::Array: weft::grad, weft::value_and_grad and weft::vjp,
// JAX's names. The function is traced once per input signature (weft/jit.hpp) and its program transformed by
// vjp_program (weft/program.hpp: one rule per op, the collectives by JAX's pmap rules, docs/autodiff.md);
// every call then runs the VJP program: on this thread, through the replica it is given (inside pmap), or,
// called with symbolic Arrays inside jit / pmap(jit), inlined into the trace around it.
//
//   auto loss = [](const Array& w, const Array& x) { return tanh(matmul(x, w)).sum(); };
//   Array g = weft::grad(loss)(w, x);                               // d loss / d w
//   auto [value, grads] = weft::value_and_grad(loss, {0, 1})(w, x);  // grads: {d/dw, d/dx}
//   auto [out, pullback] = weft::vjp(f, a, b);                      // pullback(ct) -> {d/da, d/db}
//
// A function taking a Replica& first (its collectives) is differentiated over the replica's mesh:
// value_and_grad(f)(replica, w, x) inside pmap. A function returning a std::tuple differentiates its first
// element and returns the others as they are (JAX's has_aux=True); the value differentiated must be a scalar
// of a floating dtype. Integer and boolean arguments get zeros. vjp's pullback runs the whole VJP program
// (the forward pass again, then the backward one): it keeps no residuals.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/jit.hpp"

namespace weft {
namespace detail {

template <class F, class... Args>
constexpr bool takes_replica_v =
    std::is_invocable_v<F&, Replica&, decltype((void)sizeof(Args), std::declval<const Array&>())...>;

// The differentiated function's machinery: its traced programs and their VJPs, per signature and argnums.
template <class F>
class Differentiable {
 public:
  Differentiable(F fn, std::vector<int> argnums, std::string name)
      : fn_(std::make_shared<F>(std::move(fn))), cache_(std::make_shared<ProgramCache>()),
        argnums_(std::move(argnums)), name_(std::move(name)), pairs_(std::make_shared<VjpPairs>()) {}

  // f's outputs then the cotangents of its `argnums` inputs, for `inputs` seeded with `seeds(outputs)`.
  template <std::size_t N, class Seeds>
  std::vector<Array> run(Replica* replica, std::vector<Array> inputs, const Seeds& seeds) const {
    static const Mesh no_mesh;
    const Mesh& mesh = replica ? replica->mesh() : no_mesh;
    const Program* forward = cache_->find(inputs, mesh);
    if (forward == nullptr) forward = &cache_->trace(inputs, mesh, replica != nullptr, {}, trace_body<F, N>(fn_), name_);
    const Program& vjp = vjp_of(*forward);
    for (Array& seed : seeds(forward->output_types())) inputs.push_back(std::move(seed));
    bool traced = false;
    for (const Array& a : inputs) traced = traced || a.traced();
    if (traced) return inline_into_trace(vjp, inputs);
    if (replica != nullptr) return run_program(vjp, *replica, std::move(inputs));
    return run_program(vjp, std::move(inputs));
  }

  const std::string& name() const { return name_; }
  std::size_t traces() const { return cache_->traces(); }

 private:
  // The VJP of `forward`: the last pair found without a lock (a training loop's every step after the first),
  // else from the cache.
  const Program& vjp_of(const Program& forward) const {
    const VjpPair* last = pairs_->last.load(std::memory_order_acquire);
    if (last != nullptr && last->forward == &forward) return *last->vjp;
    const Program& vjp = cache_->derived(forward, "vjp", [&](const Program& p) { return vjp_program(p, argnums_); });
    pairs_->remember(&forward, &vjp);
    return vjp;
  }

  struct VjpPair {
    const Program* forward;
    const Program* vjp;
  };
  struct VjpPairs {
    std::mutex mutex;
    std::vector<std::unique_ptr<VjpPair>> pairs;  // never removed: `last` may point at any
    std::atomic<const VjpPair*> last{nullptr};
    void remember(const Program* forward, const Program* vjp) {
      std::lock_guard lock(mutex);
      pairs.push_back(std::make_unique<VjpPair>(VjpPair{forward, vjp}));
      last.store(pairs.back().get(), std::memory_order_release);
    }
  };

  std::shared_ptr<F> fn_;
  std::shared_ptr<ProgramCache> cache_;
  std::vector<int> argnums_;
  std::string name_;
  std::shared_ptr<VjpPairs> pairs_;
};

// The seeds of value_and_grad: 1 for the differentiated (first) output, which must be a float scalar; zeros
// for the auxiliary ones.
std::vector<Array> scalar_loss_seeds(const std::vector<ValueType>& outputs, const std::string& name);

// The value f returned (an Array or a std::tuple of them) from the first outputs of a VJP run.
template <class R>
R value_of(std::vector<Array>& outs) {
  if constexpr (std::is_same_v<R, Array>) {
    return outs.at(0);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return R{outs.at(I)...}; }(
        std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}
template <class R>
constexpr std::size_t output_count_v = [] {
  if constexpr (std::is_same_v<R, Array>) return std::size_t{1};
  else return std::tuple_size_v<R>;
}();

}  // namespace detail

// What weft::value_and_grad returns: call it with Arrays (or a Replica& and Arrays, for a function taking one).
// The result is {f's value, the gradient} for one argnum, {f's value, the gradients in argnums' order} for a
// list.
template <class F, bool Many>
class ValueAndGrad {
 public:
  ValueAndGrad(F fn, std::vector<int> argnums, std::string name) : d_(std::move(fn), std::move(argnums), std::move(name)) {}

  template <class... Args>
  auto operator()(Replica& replica, const Args&... args) const {
    static_assert(detail::takes_replica_v<F, Args...>, "a Replica was passed to a function that takes none");
    return call(&replica, args...);
  }
  template <class... Args>
  auto operator()(const Args&... args) const {
    static_assert(!detail::takes_replica_v<F, Args...>, "this function takes a Replica&: pass the replica first");
    return call(nullptr, args...);
  }

  // How many signatures were traced.
  std::size_t traces() const { return d_.traces(); }

 private:
  template <class... Args>
  auto call(Replica* r, const Args&... args) const {
    static_assert((std::is_convertible_v<const Args&, const Array&> && ...),
                  "a differentiated function takes weft::Array arguments");
    using R = detail::traced_result_t<F, Args...>;
    constexpr std::size_t n_out = detail::output_count_v<R>;
    std::vector<Array> outs = d_.template run<sizeof...(Args)>(
        r, std::vector<Array>{Array(args)...},
        [&](const std::vector<ValueType>& types) { return detail::scalar_loss_seeds(types, d_.name()); });
    R value = detail::value_of<R>(outs);
    std::vector<Array> grads(outs.begin() + static_cast<std::ptrdiff_t>(n_out), outs.end());
    if constexpr (Many) {
      return std::pair<R, std::vector<Array>>{std::move(value), std::move(grads)};
    } else {
      return std::pair<R, Array>{std::move(value), std::move(grads.at(0))};
    }
  }

  detail::Differentiable<F> d_;
};

// jax.value_and_grad(f, argnums): f's value and its gradient with respect to argument `argnum` (or to each
// of `argnums`).
template <class F>
ValueAndGrad<F, false> value_and_grad(F fn, int argnum = 0, std::string name = "value_and_grad") {
  return ValueAndGrad<F, false>(std::move(fn), {argnum}, std::move(name));
}
template <class F>
ValueAndGrad<F, true> value_and_grad(F fn, std::vector<int> argnums, std::string name = "value_and_grad") {
  return ValueAndGrad<F, true>(std::move(fn), std::move(argnums), std::move(name));
}

// jax.grad(f, argnums): the gradient alone (with has_aux's tuple: {gradient, aux...} is value_and_grad's).
template <class F>
auto grad(F fn, int argnum = 0, std::string name = "grad") {
  return [vg = value_and_grad(std::move(fn), argnum, std::move(name))](auto&&... args) {
    return vg(std::forward<decltype(args)>(args)...).second;  // a Replica& stays non-const
  };
}
template <class F>
auto grad(F fn, std::vector<int> argnums, std::string name = "grad") {
  return [vg = value_and_grad(std::move(fn), std::move(argnums), std::move(name))](auto&&... args) {
    return vg(std::forward<decltype(args)>(args)...).second;  // a Replica& stays non-const
  };
}

// What weft::vjp's pullback is: called with one cotangent per output of f, it returns the cotangent of every
// argument, in order.
class Pullback {
 public:
  Pullback(std::function<std::vector<Array>(std::vector<Array>)> run, std::size_t outputs)
      : run_(std::move(run)), outputs_(outputs) {}
  template <class... Cts>
  std::vector<Array> operator()(const Cts&... cotangents) const {
    static_assert((std::is_convertible_v<const Cts&, const Array&> && ...), "cotangents are weft::Arrays");
    return (*this)(std::vector<Array>{Array(cotangents)...});
  }
  std::vector<Array> operator()(std::vector<Array> cotangents) const;

 private:
  std::function<std::vector<Array>(std::vector<Array>)> run_;
  std::size_t outputs_;
};

// jax.vjp(f, *args): {f(args...), its pullback}. Outside a trace and a pmap (the pullback holds the
// arguments, not a replica).
template <class F, class... Args>
auto vjp(F fn, const Args&... args) {
  static_assert(!detail::takes_replica_v<F, Args...>, "weft::vjp differentiates functions without a Replica");
  using R = detail::traced_result_t<F, Args...>;
  constexpr std::size_t n_out = detail::output_count_v<R>;
  std::vector<int> all;
  for (int k = 0; k < static_cast<int>(sizeof...(Args)); ++k) all.push_back(k);
  auto d = std::make_shared<detail::Differentiable<F>>(std::move(fn), all, "vjp");
  std::vector<Array> primals{Array(args)...};
  // The value now (with zero cotangents); the pullback runs the program again with the given ones.
  std::vector<Array> outs = d->template run<sizeof...(Args)>(nullptr, primals, [](const std::vector<ValueType>& types) {
    std::vector<Array> zeros;
    for (const ValueType& t : types) zeros.push_back(Array::zeros(Shape(t.shape.begin(), t.shape.end()), t.dtype));
    return zeros;
  });
  R value = detail::value_of<R>(outs);
  Pullback pullback(
      [d, primals, all](std::vector<Array> cts) {
        std::vector<Array> out = d->template run<sizeof...(Args)>(
            nullptr, primals, [&](const std::vector<ValueType>&) { return cts; });
        return std::vector<Array>(out.end() - static_cast<std::ptrdiff_t>(all.size()), out.end());
      },
      n_out);
  return std::pair<R, Pullback>{std::move(value), std::move(pullback)};
}

}  // namespace weft
