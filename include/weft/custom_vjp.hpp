// jax.custom_vjp for C++ functions over weft::Array: a function whose reverse-mode rule is the user's.
//
//   auto log1pexp = weft::custom_vjp(
//       [](const Array& x) { return log1p(exp(x)); },                                   // fun
//       [](const Array& x) { return std::pair{log1p(exp(x)), std::vector<Array>{x}}; },  // fwd: (out, residuals)
//       [](const std::vector<Array>& res, const Array& g) {                              // bwd: one cotangent
//         return std::vector<Array>{g * sigmoid(res[0])};                                //   per argument
//       });
//   Array d = weft::grad([&](const Array& x) { return log1pexp(x).sum(); })(x);       // 1.0 at x = 100, not nan
//
// Called on concrete Arrays it computes fun. Called inside a trace (weft::grad, jit, pmap(jit)), fwd is traced
// into the program and one custom_vjp_call equation closes the call (src/program/custom_calls.hpp): the VJP
// then runs bwd's program on the residuals and the output's cotangent, never the transposes of fwd's
// equations. bwd is traced once per signature of (residuals, output), over no mesh (its collectives are
// refused; Python's weft.custom_vjp traces bwd over the trace's mesh). One Array output; every argument an
// Array (a non-float one takes no cotangent, whatever bwd returns for it).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/array.hpp"

namespace weft {
namespace detail {

using CustomBwd = std::function<std::vector<Array>(const std::vector<Array>& residuals, const Array& g)>;

// The registered bwd programs of one custom_vjp, by the signature of (residuals, output).
class CustomVjpRules {
 public:
  // The rule number for these residuals and output (bwd traced and registered on first sight).
  std::int64_t rule(const std::vector<Array>& residuals, const Array& out, std::size_t primals, const CustomBwd& bwd,
                    const std::string& name);

 private:
  std::mutex mutex_;
  std::map<std::string, std::int64_t> rules_;
};

// Records the custom_vjp_call closing a call into the trace of the symbolic values among `primals`, `out` and
// `residuals`; returns the call's output (out, as the program reads it from now on).
Array record_custom_vjp_call(std::span<const Array> primals, const Array& out, const std::vector<Array>& residuals,
                             std::int64_t rule, const std::string& name);

}  // namespace detail

template <class Fun, class Fwd, class Bwd>
class CustomVjp {
 public:
  CustomVjp(Fun fun, Fwd fwd, Bwd bwd, std::string name)
      : fun_(std::move(fun)), fwd_(std::move(fwd)), bwd_(std::move(bwd)), name_(std::move(name)),
        rules_(std::make_shared<detail::CustomVjpRules>()) {}

  template <class... Args>
  Array operator()(const Args&... args) const {
    const std::vector<Array> primals{Array(args)...};
    bool traced = false;
    for (const Array& a : primals) traced = traced || a.traced();
    if (!traced) return fun_(args...);
    auto [out, residuals] = fwd_(args...);
    const detail::CustomBwd bwd = [this](const std::vector<Array>& res, const Array& g) {
      return std::vector<Array>(bwd_(res, g));
    };
    const std::int64_t rule = rules_->rule(residuals, out, primals.size(), bwd, name_);
    return detail::record_custom_vjp_call(primals, out, residuals, rule, name_);
  }

 private:
  Fun fun_;
  Fwd fwd_;
  Bwd bwd_;
  std::string name_;
  std::shared_ptr<detail::CustomVjpRules> rules_;
};

// jax.custom_vjp(fun) with defvjp(fwd, bwd): fun(args...) -> Array; fwd(args...) -> std::pair<Array,
// std::vector<Array>> (fun's output, the residuals bwd needs); bwd(residuals, g) -> std::vector<Array>, one
// cotangent per argument.
template <class Fun, class Fwd, class Bwd>
CustomVjp<Fun, Fwd, Bwd> custom_vjp(Fun fun, Fwd fwd, Bwd bwd, std::string name = "custom_vjp") {
  return CustomVjp<Fun, Fwd, Bwd>(std::move(fun), std::move(fwd), std::move(bwd), std::move(name));
}

}  // namespace weft
