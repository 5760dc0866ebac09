// Control flow from C++, as jax.lax has it (and weft.lax in Python): cond, switch_index, scan, while_loop and
// fori_loop over std::vector<Array>. Each branch or body is traced once into a program of its own (a trace
// nested in the one running, on its mesh) and the call records one equation (cond, while_loop, scan:
// docs/programs.md, "Control flow") that the executor runs without coming back to the caller.
//
//   auto f = weft::jit([](const Array& h0, const Array& xs, const Array& w) {
//     auto [carry, ys] = weft::scan([&](const std::vector<Array>& c, const std::vector<Array>& x) {
//       Array h = tanh(matmul(c[0], w) + x[0]);                 // w: a value of the trace around, captured
//       return weft::ScanResult{{h}, {h.sum()}};
//     }, {h0}, {xs});
//     return carry[0];
//   });
//
// Inside a trace (weft::jit, pmap(jit(f)), another body) the call is recorded there; symbolic Arrays of that
// trace (or of the traces around it) a body uses become the equation's trailing operands, and a traced
// Replica's collectives called in a body record in the body (they meet the other replicas' as outside).
// Outside any trace the call is traced and run at once. Carries keep their types (dtype, shape, varying
// axes); a body that changes one is an InvalidArgument naming the carry and both types.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "weft/array.hpp"

namespace weft {

// A branch of cond / switch_index and a while_loop body: values in, values out.
using BranchFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

// lax.cond: true_fun(operands) when `pred` (a bool or number scalar) is nonzero, else false_fun(operands).
// Both branches are traced; they must return the same number of values of the same types.
std::vector<Array> cond(const Array& pred, const BranchFn& true_fun, const BranchFn& false_fun,
                        const std::vector<Array>& operands);

// lax.switch: branches[clamp(index, 0, branches.size() - 1)](operands); `index` an integer scalar.
std::vector<Array> switch_index(const Array& index, const std::vector<BranchFn>& branches,
                                const std::vector<Array>& operands);

// What a scan body returns and scan gives back: the carry, then the ys (the body's: one slice each; scan's:
// stacked along a new leading axis of `length`).
struct ScanResult {
  std::vector<Array> carry;
  std::vector<Array> ys;
};
using ScanFn = std::function<ScanResult(const std::vector<Array>& carry, const std::vector<Array>& x)>;

struct ScanOptions {
  std::optional<std::int64_t> length;  // required when xs is empty; else checked against the xs' leading axis
  bool reverse = false;                // slices from the end (ys still indexed as xs)
  std::int64_t unroll = 1;             // recorded (>= 0); the executor runs iterations one by one
};

// lax.scan: for each slice x_i of the xs along their leading axis, (carry, y_i) = f(carry, x_i).
ScanResult scan(const ScanFn& f, const std::vector<Array>& init, const std::vector<Array>& xs,
                const ScanOptions& options = {});

// lax.while_loop: while cond_fun(carry) (a bool scalar), carry = body_fun(carry).
std::vector<Array> while_loop(const std::function<Array(const std::vector<Array>&)>& cond_fun, const BranchFn& body_fun,
                              const std::vector<Array>& init);

// lax.fori_loop: for i in [lower, upper), carry = body_fun(i, carry), i an int32 scalar. With integer bounds
// it is a scan of max(upper - lower, 0) steps (as JAX, for reverse mode); with Array bounds (int32 scalars)
// a while_loop.
using ForiFn = std::function<std::vector<Array>(const Array& i, const std::vector<Array>& carry)>;
std::vector<Array> fori_loop(std::int64_t lower, std::int64_t upper, const ForiFn& body_fun,
                             const std::vector<Array>& init);
std::vector<Array> fori_loop(const Array& lower, const Array& upper, const ForiFn& body_fun,
                             const std::vector<Array>& init);

}  // namespace weft
