// The op table of array-op cases (array_ops.hpp). Each entry validates its params once, when the case is
// parsed, and returns a closure that only calls weft; so a malformed case fails as a "bad case" before
// anything runs, and a failure while running is the library's.
#include "array_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include <weft/ops.hpp>

namespace conformance {
namespace {

using json = nlohmann::json;
using weft::Array;
using Inputs = std::vector<Array>;

// Typed access to a case's params with errors that name the op and the param. A key holding null counts as
// absent (numpy's None).
class Params {
 public:
  Params(std::string op, const json& params) : op_(std::move(op)), params_(params) {
    if (!params_.is_object() && !params_.is_null())
      throw std::runtime_error(op_ + ": params must be an object, not " + params_.dump());
  }

  // Rejects keys outside `known`: a misspelt param must not silently fall back to a default.
  void allow(const std::vector<std::string>& known) const {
    if (!params_.is_object()) return;
    for (const auto& [key, value] : params_.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string takes;
      for (const std::string& k : known) takes += (takes.empty() ? "" : ", ") + k;
      throw std::runtime_error(op_ + ": unknown param \"" + key + "\" (" +
                               (known.empty() ? std::string("it takes none") : "it takes " + takes) + ")");
    }
  }

  bool has(const char* key) const { return params_.is_object() && params_.contains(key) && !params_.at(key).is_null(); }

  int integer(const char* key) const {
    if (!has(key)) throw std::runtime_error(op_ + ": params needs \"" + key + "\" (an integer)");
    return to_int(params_.at(key), key);
  }
  std::optional<int> optional_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }
  int integer_or(const char* key, int fallback) const { return optional_integer(key).value_or(fallback); }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!params_.at(key).is_boolean())
      throw std::runtime_error(op_ + ": param \"" + key + "\" must be true or false, not " + params_.at(key).dump());
    return params_.at(key).get<bool>();
  }

  std::optional<double> optional_number(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!params_.at(key).is_number())
      throw std::runtime_error(op_ + ": param \"" + key + "\" must be a number, not " + params_.at(key).dump());
    return params_.at(key).get<double>();
  }

  std::vector<int> int_list_or_empty(const char* key) const {
    std::vector<int> list;
    if (!has(key)) return list;
    const json& value = params_.at(key);
    if (!value.is_array())
      throw std::runtime_error(op_ + ": param \"" + key + "\" must be a list of integers, not " + value.dump());
    for (const json& item : value) list.push_back(to_int(item, key));
    return list;
  }

  // Reduction axes as numpy takes them: absent or null = every axis, an integer = one, a list = several.
  weft::ReduceAxes reduce_axes(const char* key) const {
    if (!has(key)) return weft::ReduceAxes{};
    if (params_.at(key).is_array()) return weft::ReduceAxes(int_list_or_empty(key));
    return weft::ReduceAxes(integer(key));
  }

  weft::DType dtype_or(const char* key, weft::DType fallback) const {
    if (!has(key)) return fallback;
    if (!params_.at(key).is_string())
      throw std::runtime_error(op_ + ": param \"" + key + "\" must be a dtype name, not " + params_.at(key).dump());
    return weft::dtype_from_name(params_.at(key).get<std::string>());
  }

 private:
  int to_int(const json& value, const char* key) const {
    if (!value.is_number_integer() || value.get<std::int64_t>() < std::numeric_limits<int>::min() ||
        value.get<std::int64_t>() > std::numeric_limits<int>::max())
      throw std::runtime_error(op_ + ": param \"" + key + "\" must be an integer, not " + value.dump());
    return value.get<int>();
  }

  std::string op_;
  const json& params_;
};

struct OpEntry {
  std::size_t min_inputs;
  std::size_t max_inputs;
  std::vector<std::string> params;
  // Reads the params (already checked against `params`) for `n` inputs (already checked against the arity).
  std::function<ArrayOp(const Params&, std::size_t n)> bind;
};

OpEntry unary(Array (*f)(const Array&)) {
  return {1, 1, {}, [f](const Params&, std::size_t) -> ArrayOp { return [f](const Inputs& in) { return f(in[0]); }; }};
}

// maximum, minimum, where: the last operand b is an input, or a number in params (weft's scalar overload: b
// takes the other operand's dtype, JAX's weak typing).
OpEntry last_operand_or_scalar(const std::string& name, std::size_t arity,
                               std::function<Array(const Inputs&)> with_array,
                               std::function<Array(const Inputs&, double)> with_scalar) {
  return {arity - 1, arity, {"b"}, [=](const Params& p, std::size_t n) -> ArrayOp {
            const std::optional<double> b = p.optional_number("b");
            if (n == arity && b) throw std::runtime_error(name + ": b given twice, as an input and as params.b");
            if (n < arity && !b) throw std::runtime_error(name + ": needs b, as an input or as params.b (a number)");
            if (b) return [with_scalar, s = *b](const Inputs& in) { return with_scalar(in, s); };
            return with_array;
          }};
}

using Reduction = Array (*)(const Array&, const weft::ReduceAxes&, bool);
OpEntry reduction(Reduction f) {
  return {1, 1, {"axes", "keepdims"}, [f](const Params& p, std::size_t) -> ArrayOp {
            return [f, axes = p.reduce_axes("axes"), keepdims = p.boolean_or("keepdims", false)](const Inputs& in) {
              return f(in[0], axes, keepdims);
            };
          }};
}

using ArgReduction = Array (*)(const Array&, std::optional<int>, bool);
OpEntry arg_reduction(ArgReduction f) {
  return {1, 1, {"axis", "keepdims"}, [f](const Params& p, std::size_t) -> ArrayOp {
            return [f, axis = p.optional_integer("axis"), keepdims = p.boolean_or("keepdims", false)](
                       const Inputs& in) { return f(in[0], axis, keepdims); };
          }};
}

// softmax / log_softmax: jax.nn's default axis is -1, as weft's.
OpEntry along_axis(Array (*f)(const Array&, int)) {
  return {1, 1, {"axis"}, [f](const Params& p, std::size_t) -> ArrayOp {
            return [f, axis = p.integer_or("axis", -1)](const Inputs& in) { return f(in[0], axis); };
          }};
}

const std::map<std::string, OpEntry>& op_table() {
  static const std::map<std::string, OpEntry> table = [] {
    std::map<std::string, OpEntry> t;
    t["matmul"] = {2, 2, {"transpose_a", "transpose_b"}, [](const Params& p, std::size_t) -> ArrayOp {
                     const weft::MatmulOptions options{p.boolean_or("transpose_a", false),
                                                       p.boolean_or("transpose_b", false)};
                     return [options](const Inputs& in) { return weft::matmul(in[0], in[1], options); };
                   }};
    // numpy.transpose: perm absent (axes=None) reverses the axes, as weft's empty perm.
    t["transpose"] = {1, 1, {"perm"}, [](const Params& p, std::size_t) -> ArrayOp {
                        return [perm = p.int_list_or_empty("perm")](const Inputs& in) {
                          return weft::transpose(in[0], perm);
                        };
                      }};
    t["exp"] = unary(&weft::exp);
    t["log"] = unary(&weft::log);
    t["log1p"] = unary(&weft::log1p);
    t["tanh"] = unary(&weft::tanh);
    t["sqrt"] = unary(&weft::sqrt);
    t["rsqrt"] = unary(&weft::rsqrt);
    t["abs"] = unary(&weft::abs);
    t["negative"] = unary(&weft::negative);
    t["sign"] = unary(&weft::sign);
    t["sigmoid"] = unary(&weft::sigmoid);
    t["relu"] = unary(&weft::relu);
    t["maximum"] = last_operand_or_scalar(
        "maximum", 2, [](const Inputs& in) { return weft::maximum(in[0], in[1]); },
        [](const Inputs& in, double b) { return weft::maximum(in[0], b); });
    t["minimum"] = last_operand_or_scalar(
        "minimum", 2, [](const Inputs& in) { return weft::minimum(in[0], in[1]); },
        [](const Inputs& in, double b) { return weft::minimum(in[0], b); });
    t["where"] = last_operand_or_scalar(
        "where", 3, [](const Inputs& in) { return weft::where(in[0], in[1], in[2]); },
        [](const Inputs& in, double b) { return weft::where(in[0], in[1], b); });
    // numpy.clip(x, a_min, a_max): either bound may be None, not both (numpy refuses that).
    t["clip"] = {1, 1, {"min", "max"}, [](const Params& p, std::size_t) -> ArrayOp {
                   const std::optional<double> lo = p.optional_number("min");
                   const std::optional<double> hi = p.optional_number("max");
                   if (!lo && !hi) throw std::runtime_error("clip: params needs \"min\" or \"max\" (a number)");
                   return [lo, hi](const Inputs& in) { return weft::clip(in[0], lo, hi); };
                 }};
    t["softmax"] = along_axis(&weft::softmax);
    t["log_softmax"] = along_axis(&weft::log_softmax);
    // jax.scipy.special.logsumexp reduces every axis by default; weft's reduces one, so the case must say which.
    t["logsumexp"] = {1, 1, {"axis", "keepdims"}, [](const Params& p, std::size_t) -> ArrayOp {
                        return [axis = p.integer("axis"), keepdims = p.boolean_or("keepdims", false)](
                                   const Inputs& in) { return weft::logsumexp(in[0], axis, keepdims); };
                      }};
    t["sum"] = reduction(&weft::sum);
    t["mean"] = reduction(&weft::mean);
    t["max"] = reduction(&weft::max);
    t["min"] = reduction(&weft::min);
    t["argmax"] = arg_reduction(&weft::argmax);
    t["argmin"] = arg_reduction(&weft::argmin);
    t["one_hot"] = {1, 1, {"num_classes", "dtype"}, [](const Params& p, std::size_t) -> ArrayOp {
                      return [n = p.integer("num_classes"), dtype = p.dtype_or("dtype", weft::DType::f32)](
                                 const Inputs& in) { return weft::one_hot(in[0], n, dtype); };
                    }};
    // numpy.take: axis absent (None) takes from the flattened array, as weft's.
    t["take"] = {2, 2, {"axis"}, [](const Params& p, std::size_t) -> ArrayOp {
                   return [axis = p.optional_integer("axis")](const Inputs& in) {
                     return weft::take(in[0], in[1], axis);
                   };
                 }};
    return t;
  }();
  return table;
}

std::string arity_str(const OpEntry& e) {
  const auto count = [](std::size_t n) { return std::to_string(n) + (n == 1 ? " input" : " inputs"); };
  if (e.min_inputs == e.max_inputs) return count(e.min_inputs);
  return std::to_string(e.min_inputs) + " or " + count(e.max_inputs);
}

}  // namespace

ArrayOp bind_array_op(const std::string& op, const json& params, std::size_t num_inputs) {
  const auto& table = op_table();
  const auto it = table.find(op);
  if (it == table.end()) throw std::runtime_error("unknown op '" + op + "'");
  const OpEntry& entry = it->second;
  if (num_inputs < entry.min_inputs || num_inputs > entry.max_inputs)
    throw std::runtime_error(op + " takes " + arity_str(entry) + ", the case gives " + std::to_string(num_inputs));
  const Params p(op, params);
  p.allow(entry.params);
  return entry.bind(p, num_inputs);
}

}  // namespace conformance
