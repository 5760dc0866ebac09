// Every kernel against its op's rule (issue 45 item 9): for each op of the registry that runs as a kernel,
// on every combination of operand dtypes its inference rule accepts, the kernel's results have exactly the
// dtypes and shapes the rule gives. The executor checks this per equation at run time and stops with an
// internal error ("the kernel gave float32 where the op's rule gives bf16": layer_norm on bfloat16 did); here
// every op meets every dtype, not only those some program happened to use. The table below gives each op its
// operand shapes and the parameter variants worth trying (small valid values: 0 and 1 in turn, so take's and
// one_hot's indices are in range); an op with a kernel and no row fails the test, so a new op needs one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "program/builder.hpp"
#include "program/custom_calls.hpp"
#include "program/op_registry.hpp"

namespace weft::program {
namespace {
namespace kernel_types_test {

using Shape = std::vector<std::int64_t>;

const std::vector<DType> kDTypes = {DType::boolean, DType::u8,  DType::i8,  DType::i32, DType::i64,
                                    DType::bf16,    DType::f16, DType::f32, DType::f64};

// One way to call an op: its operands' shapes and its parameters.
struct Form {
  std::vector<Shape> shapes;
  Params params;
};

Params Axes(std::vector<std::int64_t> axes, bool keepdims) {
  return {{"axes", ints_param(std::move(axes))}, {"keepdims", bool_param(keepdims)}};
}

// A custom_vjp_call / custom_jvp_call needs a registered rule of its kind (its type rule looks the number
// up); any verified program will do.
std::int64_t SomeCustomRule(CustomKind kind) {
  Builder b{Mesh()};
  b.set_outputs({b.input(ValueType{DType::f32, {3}, {}})});
  return register_custom_rule(kind, b.build(), "kernel_types_test");
}

std::map<std::string, std::vector<Form>> Forms() {
  std::map<std::string, std::vector<Form>> forms;
  for (const char* op : {"exp", "log", "log1p", "tanh", "sqrt", "rsqrt", "sigmoid", "gelu_tanh", "gelu_tanh_derivative",
                         "abs", "negative", "sign", "relu", "copy", "stop_gradient", "bitwise_not"}) {
    forms[op] = {{{{2, 3}}, {}}};
  }
  for (const char* op : {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "equal", "not_equal",
                         "less", "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or", "bitwise_xor"}) {
    forms[op] = {{{{2, 3}, {3}}, {}}, {{{}, {2, 1}}, {}}};
  }
  forms["where"] = {{{{2, 3}, {2, 3}, {3}}, {}}};
  for (std::int64_t y : {0, 1, 2, 3, -1, -2}) forms["integer_pow"].push_back({{{2, 3}}, {{"y", int_param(y)}}});
  for (DType d : kDTypes) forms["astype"].push_back({{{2, 3}}, {{"dtype", Param{d}}}});
  for (const char* op : {"sum", "mean", "max", "min"}) {
    forms[op] = {{{{2, 3}}, {}}, {{{2, 3}}, Axes({1}, false)}, {{{2, 3}}, Axes({0}, true)}};
  }
  for (const char* op : {"argmax", "argmin"}) {
    forms[op] = {{{{2, 3}}, {}},
                 {{{2, 3}}, {{"axis", int_param(1)}}},
                 {{{2, 3}}, {{"axis", int_param(0)}, {"keepdims", bool_param(true)}}}};
  }
  for (const char* op : {"cumsum", "cumprod"}) {
    forms[op] = {{{{2, 3}}, {{"axis", int_param(1)}}}, {{{2, 3}}, {{"axis", int_param(0)}, {"reverse", bool_param(true)}}}};
  }
  forms["reshape"] = {{{{2, 3}}, {{"shape", ints_param({3, 2})}}}};
  forms["transpose"] = {{{{2, 3}}, {}}, {{{2, 3, 4}}, {{"perm", ints_param({1, 2, 0})}}}};
  forms["broadcast_to"] = {{{{3}}, {{"shape", ints_param({2, 3})}}}};
  forms["matmul"] = {{{{2, 3}, {3, 4}}, {}},
                     {{{3}, {3, 2}}, {}},
                     {{{2, 2, 3}, {3}}, {}},
                     {{{3, 2}, {4, 3}}, {{"transpose_a", bool_param(true)}, {"transpose_b", bool_param(true)}}}};
  for (const char* op : {"softmax", "log_softmax"}) forms[op] = {{{{2, 3}}, {}}, {{{2, 3}}, {{"axis", int_param(0)}}}};
  forms["logsumexp"] = {{{{2, 3}}, {{"axis", int_param(1)}}},
                        {{{2, 3}}, {{"axis", int_param(0)}, {"keepdims", bool_param(true)}}}};
  forms["concatenate"] = {{{{2, 3}, {2, 1}}, {{"axis", int_param(1)}}}};
  forms["slice"] = {{{{4, 3}}, {{"start", ints_param({0, 2})}, {"limit", ints_param({4, -1})}, {"step", ints_param({2, -1})}}}};
  forms["take"] = {{{{3, 2}, {2}}, {}}, {{{3, 2}, {2, 2}}, {{"axis", int_param(1)}}}};
  for (DType d : kDTypes) forms["one_hot"].push_back({{{3}}, {{"num_classes", int_param(3)}, {"dtype", Param{d}}}});
  forms["layer_norm"] = {{{{2, 3}, {3}, {3}, {}}, {}}};
  forms["layer_norm_vjp"] = {{{{2, 3}, {3}, {2, 3}, {}}, {}}};
  forms["pvary"] = {{{{2, 3}}, {{"axes", axes_param({"i"})}}}};
  for (const CustomKind kind : {CustomKind::vjp, CustomKind::jvp}) {
    forms[kind == CustomKind::vjp ? "custom_vjp_call" : "custom_jvp_call"] = {{{{3}, {3}},
                                                                     {{"rule", int_param(SomeCustomRule(kind))},
                                                                      {"primals", int_param(1)},
                                                                      {"outputs", int_param(1)},
                                                                      {"name", string_param("f")}}}};
  }
  return forms;
}

std::string TypesText(const std::vector<ValueType>& types) {
  std::string text;
  for (const ValueType& t : types) text += (text.empty() ? "" : ", ") + type_text(t);
  return text;
}

// Small valid operands: 0, 1, 0, 1, ... of each dtype.
Array Operand(const ValueType& type) {
  std::vector<double> values(static_cast<std::size_t>(type.num_elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 2);
  return Array::from_doubles(values, Shape(type.shape.begin(), type.shape.end()), type.dtype);
}

TEST(KernelTypes, EveryKernelGivesItsRulesDtypesAndShapesOnEveryAcceptedDtype) {
  const Mesh mesh({{"i", 2}});
  const std::map<std::string, std::vector<Form>> forms = Forms();
  std::vector<std::string> mismatches;
  std::size_t checked = 0;
  for (const std::string& op : registered_ops()) {
    const Kernel kernel = find_op(op)->kernel;
    if (kernel == nullptr) continue;  // collectives and session effects run on the replica
    const auto it = forms.find(op);
    if (it == forms.end()) {
      ADD_FAILURE() << op << " has a kernel but no row in this test's table";
      continue;
    }
    std::size_t accepted = 0;
    for (const Form& form : it->second) {
      // Every combination of operand dtypes: an odometer over kDTypes, one digit per operand.
      std::vector<std::size_t> digit(form.shapes.size(), 0);
      for (bool more = true; more;) {
        std::vector<ValueType> ins;
        for (std::size_t k = 0; k < digit.size(); ++k) ins.push_back(ValueType{kDTypes[digit[k]], form.shapes[k], {}});
        more = false;
        for (std::size_t k = 0; k < digit.size() && !more; ++k) {
          more = ++digit[k] < kDTypes.size();
          if (!more) digit[k] = 0;
        }
        std::vector<ValueType> want;
        try {
          want = infer_result_types(op, ins, form.params, mesh);
        } catch (const RuleError&) {
          continue;  // a combination the rule refuses never reaches a kernel
        }
        ++accepted;
        ++checked;
        std::vector<Array> args;
        for (const ValueType& t : ins) args.push_back(Operand(t));
        std::vector<ValueType> got;
        try {
          for (const Array& a : kernel(args, form.params)) got.push_back(ValueType{a.dtype(), a.shape(), {}});
        } catch (const std::exception& e) {
          mismatches.push_back(op + "(" + TypesText(ins) + "): the kernel threw: " + e.what());
          continue;
        }
        bool same = got.size() == want.size();
        for (std::size_t k = 0; same && k < got.size(); ++k) {
          same = got[k].dtype == want[k].dtype && got[k].shape == want[k].shape;
        }
        if (!same) {
          for (ValueType& t : want) t.varying.clear();
          mismatches.push_back(op + "(" + TypesText(ins) + "): the kernel gave " + TypesText(got) + ", the rule " +
                               TypesText(want));
        }
      }
    }
    EXPECT_GT(accepted, 0u) << op << ": its rule accepted none of the table's forms (a broken row)";
  }
  std::string all;
  for (const std::string& m : mismatches) all += "\n  " + m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " of " << checked << " kernel calls disagree with their rule:" << all;
}

}  // namespace kernel_types_test
}  // namespace
}  // namespace weft::program
