// The program layer (src/program, issue 22 item 1): the printer's golden text, each verifier rule by its
// message, result-type inference for a table of ops (with JAX's promotion table), dead-code elimination
// keeping effects, and the liveness of a 20-op elementwise chain.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "program/builder.hpp"
#include "program/dead_code.hpp"
#include "program/liveness.hpp"
#include "program/op_registry.hpp"
#include "program/printer.hpp"
#include "program/verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {
namespace program_test {

Mesh mesh_i(int size = 2) { return Mesh({{"i", size}}); }
ValueType f32(std::vector<std::int64_t> shape, std::vector<std::string> varying = {}) {
  return ValueType{DType::f32, std::move(shape), std::move(varying)};
}

// The spec's example program (docs/programs.md, spec section 1).
Program spec_example() {
  Builder b(mesh_i());
  const ValueId a = b.input(f32({4, 8}, {"i"}));
  const ValueId bb = b.input(f32({8}, {"i"}));
  const ValueId c = b.emit1("add", {a, bb});
  const ValueId d = b.emit1("psum", {c}, {{"axes", axes_param({"i"})}});
  b.set_outputs({d});
  return b.build();
}

TEST(ProgramPrinter, PrintsTheSpecExampleExactly) {
  EXPECT_EQ(program_text(spec_example()),
            "{ lambda ; a:f32[4,8] b:f32[8] . let\n"
            "    c:f32[4,8] = add a b\n"
            "    d:f32[4,8] = psum[axes=('i',)] c\n"
            "  in (d,) }");
}

TEST(ProgramPrinter, ParamsPrintAsPython) {
  struct Case {
    Param param;
    std::string text;
  };
  const std::vector<Case> cases = {
      {axes_param({"i"}), "('i',)"},
      {axes_param({"i", "j"}), "('i', 'j')"},
      {int_param(-1), "-1"},
      {bool_param(true), "True"},
      {bool_param(false), "False"},
      {string_param("x"), "'x'"},
      {Param{DType::bf16}, "bfloat16"},
      {ints_param({}), "()"},
      {ints_param({4, 8}), "(4, 8)"},
      {Param{Permutation{{0, 1}, {1, 0}}}, "((0, 1), (1, 0))"},
      {Param{Groups{{0, 2}, {1, 3}}}, "((0, 2), (1, 3))"},
  };
  for (const Case& c : cases) EXPECT_EQ(param_text(c.param), c.text);
}

TEST(ProgramPrinter, EffectsAndSeveralParams) {
  Builder b(mesh_i(4));
  const ValueId x = b.emit1("host_load", {}, {{"stream", string_param("in")}, {"shape", ints_param({2})},
                                              {"dtype", Param{DType::f32}}});
  const ValueId g = b.emit1("all_gather", {x}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)},
                                                {"tiled", bool_param(true)}});
  b.emit("host_store", {g}, {{"stream", string_param("out")}});
  const ValueId n = b.emit1("axis_index", {}, {{"axes", axes_param({"i"})}});
  b.set_outputs({g, n});
  EXPECT_EQ(program_text(b.build()),
            "{ lambda ; . let\n"
            "    a:f32[2] = host_load[dtype=float32 shape=(2,) stream='in']\n"
            "    b:f32[8] = all_gather[axes=('i',) axis=0 tiled=True] a\n"
            "    host_store[stream='out'] b\n"
            "    c:i32[] = axis_index[axes=('i',)]\n"
            "  in (b, c) }");
}

TEST(ProgramPrinter, NamesGoPastZAsJaxDoes) {
  Builder b(mesh_i());
  ValueId v = b.input(f32({}));
  for (int k = 0; k < 27; ++k) v = b.emit1("exp", {v});
  b.set_outputs({v});
  const Program p = b.build();
  EXPECT_EQ(equation_text(p, 25), "ba:f32[] = exp z");
  EXPECT_EQ(equation_text(p, 26), "bb:f32[] = exp ba");
}

// ---- verifier: each rule, by its message ------------------------------------------------------------------

// a:f32[4,8] b:f32[8] (inputs 0, 1); value 2 = c, value 3 = d; the equations are the case's.
Program hand_written(std::vector<Equation> equations, std::vector<ValueType> extra_types = {f32({4, 8}), f32({4, 8})},
                     std::vector<ValueId> outputs = {3}) {
  Program p;
  p.mesh = mesh_i();
  p.types = {f32({4, 8}), f32({8})};
  p.types.insert(p.types.end(), extra_types.begin(), extra_types.end());
  p.inputs = {0, 1};
  p.equations = std::move(equations);
  p.outputs = std::move(outputs);
  return p;
}

std::string verify_error(const Program& p) {
  try {
    verify(p);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(verified)";
}

TEST(ProgramVerifier, AcceptsAWellFormedProgram) { EXPECT_EQ(verify_error(spec_example()), "(verified)"); }

TEST(ProgramVerifier, EachRuleHasItsMessage) {
  const Params psum_i = {{"axes", axes_param({"i"})}};
  const Equation add{"add", {}, {0, 1}, {2}};
  struct Case {
    const char* rule;
    Program program;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"axis not in mesh", hand_written({add, {"psum", {{"axes", axes_param({"j"})}}, {2}, {3}}}),
       "equation 1 `d:f32[4,8] = psum[axes=('j',)] c`: unbound axis name: j (the mesh's axes are ('i'))"},
      {"use before definition", hand_written({{"psum", psum_i, {2}, {3}}, add}),
       "equation 0 `c:f32[4,8] = psum[axes=('i',)] d`: input 'd' is not defined before its use"},
      {"defined twice", hand_written({add, {"exp", {}, {0}, {2}}}, {f32({4, 8})}, {2}),
       "equation 1 `c:f32[4,8] = exp a`: output 'c' is already defined (by equation 0)"},
      {"redefines an input", hand_written({{"exp", {}, {0}, {0}}}, {}, {0}),
       "equation 0 `a:f32[4,8] = exp a`: output 'a' is already defined (by a program input)"},
      {"arity", hand_written({{"add", {}, {0}, {2}}, {"exp", {}, {2}, {3}}}),
       "equation 0 `c:f32[4,8] = add a`: add takes 2 input(s), got 1"},
      {"missing param", hand_written({add, {"psum", {}, {2}, {3}}}),
       "equation 1 `d:f32[4,8] = psum c`: psum needs parameter 'axes'"},
      {"unknown param", hand_written({add, {"psum", {{"axes", axes_param({"i"})}, {"axis", int_param(0)}}, {2}, {3}}}),
       "equation 1 `d:f32[4,8] = psum[axes=('i',) axis=0] c`: psum has no parameter 'axis'"},
      {"param kind", hand_written({add, {"psum", {{"axes", int_param(0)}}, {2}, {3}}}),
       "equation 1 `d:f32[4,8] = psum[axes=0] c`: parameter 'axes' must be a tuple of axis names"},
      {"declared type", hand_written({add, {"sum", {}, {2}, {3}}}),
       "equation 1 `d:f32[4,8] = sum c`: 'd' is declared f32[4,8] but sum gives f32[]"},
      {"declared varying", hand_written({{"axis_index", psum_i, {}, {2}}, {"exp", {}, {0}, {3}}},
                                        {ValueType{DType::i32, {}, {}}, f32({4, 8})}),
       "equation 0 `c:i32[] = axis_index[axes=('i',)]`: 'c' is declared varying over () but axis_index makes it "
       "vary over ('i',)"},
      {"result count", hand_written({{"host_store", {{"stream", string_param("s")}}, {0}, {2}}, {"exp", {}, {0}, {3}}}),
       "equation 0 `c:f32[4,8] = host_store[stream='s'] a`: host_store has 0 result(s), the equation declares 1"},
      {"broadcast", hand_written({{"sum", {{"axes", ints_param({1})}}, {0}, {2}}, {"add", {}, {0, 2}, {3}}},
                                 {f32({4}), f32({4, 8})}),
       "equation 1 `d:f32[4,8] = add a c`: shapes [4,8] and [4] do not broadcast"},
      {"value id", hand_written({{"exp", {}, {9}, {2}}, {"exp", {}, {2}, {3}}}),
       "equation 0 `c:f32[4,8] = exp <value 9>`: an input refers to value 9, which the program does not have (it "
       "has 4)"},
      {"output never defined", hand_written({add}),
       "program: program output 'd' is never defined"},
  };
  for (const Case& c : cases) EXPECT_EQ(verify_error(c.program), c.message) << c.rule;
}

TEST(ProgramVerifier, RuleErrorsOfTheFamilies) {
  struct Case {
    std::string op;
    std::vector<ValueType> ins;
    Params params;
    std::string message;
  };
  const Mesh mesh({{"i", 4}, {"j", 2}});
  const std::vector<Case> cases = {
      {"add", {f32({4}), f32({3})}, {}, "shapes [4] and [3] do not broadcast"},
      {"where", {f32({4}), f32({4}), f32({4})}, {}, "where's condition must be bool, not f32"},
      {"reshape", {f32({4, 8})}, {{"shape", ints_param({5, -1})}},
       "cannot reshape f32[4,8] (32 elements) to (5, -1)"},
      {"transpose", {f32({4, 8})}, {{"perm", ints_param({0, 0})}},
       "perm (0, 0) is not a permutation of the 2 axes of f32[4,8]"},
      {"sum", {f32({4, 8})}, {{"axes", ints_param({2})}}, "axis 2 is out of range for rank 2"},
      {"matmul", {f32({4, 8}), f32({4, 8})}, {}, "contracting dimensions differ: f32[4,8] @ f32[4,8]"},
      {"broadcast_to", {f32({3})}, {{"shape", ints_param({4, 2})}}, "cannot broadcast f32[3] to (4, 2)"},
      {"psum", {f32({4})}, {{"axes", axes_param({"i", "i"})}}, "axis 'i' is named twice"},
      {"psum", {f32({4})}, {{"axes", axes_param({"i"})}, {"groups", Param{Groups{{0, 1}, {1, 2}}}}},
       "groups must hold every index 0..3 of axes ('i',) exactly once"},
      {"psum", {f32({4})}, {{"axes", axes_param({"j"})}, {"groups", Param{Groups{{0, 2}}}}},
       "group member 2 is outside 0..1 (the size of axes ('j',))"},
      {"psum_scatter", {f32({6})}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)}, {"tiled", bool_param(true)}},
       "dimension 0 of f32[6] must be a multiple of 4 (the participants)"},
      {"all_gather", {f32({6})}, {{"axes", axes_param({"i"})}, {"axis", int_param(2)}},
       "axis 2 is out of range for f32[6] (rank 1): it must be in [-2, 1] (an untiled all_gather inserts a new axis)"},
      {"ppermute", {f32({2})}, {{"axes", axes_param({"j"})}, {"perm", Param{Permutation{{0, 1}, {0, 0}}}}},
       "perm sends from 0 twice"},
      {"ppermute", {f32({2})}, {{"axes", axes_param({"j"})}, {"perm", Param{Permutation{{0, 2}}}}},
       "perm pair (0, 2) is outside 0..1"},
      {"all_to_all", {f32({6, 2})}, {{"axes", axes_param({"i"})}, {"split_axis", int_param(0)}, {"concat_axis", int_param(1)},
                                     {"tiled", bool_param(true)}},
       "split_axis 0 of f32[6,2] is not a multiple of 4 (the participants)"},
      {"all_to_all", {f32({8, 2})}, {{"axes", axes_param({"i"})}, {"split_axis", int_param(0)}, {"concat_axis", int_param(1)}},
       "split_axis 0 of f32[8,2] must equal 4 (the participants; tiled=True splits a multiple)"},
      {"remote_store", {f32({2}), f32({})}, {{"buffer", string_param("rb")}},
       "the offset must be an integer scalar, not f32[]"},
  };
  for (const Case& c : cases) {
    try {
      infer_result_types(c.op, c.ins, c.params, mesh);
      ADD_FAILURE() << c.op << " accepted; expected: " << c.message;
    } catch (const RuleError& e) {
      EXPECT_EQ(std::string(e.what()), c.message) << c.op;
    }
  }
}

TEST(ProgramBuilder, ReportsTheEquationBeingBuilt) {
  Builder b(mesh_i());
  const ValueId a = b.input(f32({4, 8}));
  const ValueId c = b.emit1("exp", {a});
  try {
    b.emit("psum", {c}, {{"axes", axes_param({"j"})}});
    FAIL() << "psum over an unknown axis was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "equation 1 `psum[axes=('j',)] b`: unbound axis name: j (the mesh's axes are ('i'))");
  }
  // The failed equation is not kept: the program still verifies.
  b.set_outputs({c});
  EXPECT_EQ(b.build().equations.size(), 1u);
}

// An equation holds its resolved primitive, so an unknown name is refused where the equation is made (by the
// builder, or a hand-written Equation) and never reaches the verifier.
TEST(ProgramVerifier, AnUnknownOpIsRefusedWhereTheEquationIsMade) {
  std::string error = "(accepted)";
  try {
    const Equation eq("frobnicate", {}, {0}, {2});
  } catch (const RuleError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "unknown op 'frobnicate'");
  Builder b(mesh_i());
  const ValueId a = b.input(f32({4}));
  for (const char* name : {"frobnicate", "Add", "add "}) {
    error = "(accepted)";
    try {
      b.emit(name, {a}, {}, "train.py:3");
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    EXPECT_EQ(error, "program builder: unknown op '" + std::string(name) + "' (train.py:3)");
  }
  EXPECT_EQ(b.num_equations(), 0u);
}

// ---- inference ----------------------------------------------------------------------------------------------

TEST(ProgramInference, ResultTypesOfATableOfOps) {
  struct Case {
    std::string op;
    std::vector<ValueType> ins;
    Params params;
    std::string result;  // type_text of each result, space separated
    std::vector<std::string> varying = {};
  };
  const ValueType i32_4{DType::i32, {4}, {}};
  const ValueType b_4{DType::boolean, {4}, {}};
  const Mesh mesh({{"i", 4}, {"j", 2}});
  const std::vector<Case> cases = {
      {"add", {f32({4, 1}), f32({3})}, {}, "f32[4,3]"},
      {"multiply", {f32({}), f32({2, 3})}, {}, "f32[2,3]"},
      {"divide", {i32_4, i32_4}, {}, "f32[4]"},
      {"exp", {i32_4}, {}, "f32[4]"},
      {"abs", {i32_4}, {}, "i32[4]"},
      {"less", {f32({4}), i32_4}, {}, "bool[4]"},
      {"where", {b_4, i32_4, f32({1})}, {}, "f32[4]"},
      {"astype", {f32({4})}, {{"dtype", Param{DType::bf16}}}, "bf16[4]"},
      {"sum", {f32({4, 8})}, {}, "f32[]"},
      {"sum", {f32({4, 8})}, {{"axes", ints_param({-1})}, {"keepdims", bool_param(true)}}, "f32[4,1]"},
      {"sum", {b_4}, {}, "i32[]"},
      {"sum", {ValueType{DType::i8, {4}, {}}}, {}, "i32[]"},  // JAX's accumulation dtypes (issue 45)
      {"sum", {ValueType{DType::u8, {4}, {}}}, {}, "i32[]"},
      {"sum", {i32_4}, {}, "i32[]"},
      {"sum", {ValueType{DType::i64, {4}, {}}}, {}, "i64[]"},
      {"mean", {i32_4}, {}, "f32[]"},
      {"max", {f32({4, 8, 2})}, {{"axes", ints_param({0, 2})}}, "f32[8]"},
      {"argmax", {f32({4, 8})}, {{"axis", int_param(1)}}, "i32[4]"},
      {"reshape", {f32({4, 8})}, {{"shape", ints_param({2, -1})}}, "f32[2,16]"},
      {"transpose", {f32({2, 3, 4})}, {}, "f32[4,3,2]"},
      {"transpose", {f32({2, 3, 4})}, {{"perm", ints_param({1, 0, 2})}}, "f32[3,2,4]"},
      {"broadcast_to", {f32({3})}, {{"shape", ints_param({2, 3})}}, "f32[2,3]"},
      {"matmul", {f32({4, 8}), f32({8, 2})}, {}, "f32[4,2]"},
      {"matmul", {f32({8}), f32({8, 2})}, {}, "f32[2]"},
      {"matmul", {f32({5, 4, 8}), f32({8})}, {}, "f32[5,4]"},
      {"matmul", {f32({5, 1, 4, 8}), f32({3, 8, 2})}, {}, "f32[5,3,4,2]"},
      {"softmax", {f32({4, 8})}, {{"axis", int_param(-1)}}, "f32[4,8]"},
      {"psum", {f32({4}, {"i", "j"})}, {{"axes", axes_param({"i"})}}, "f32[4]", {"j"}},
      // In several groups the result is equal within each group only: it still varies over 'i' (issue 45);
      // one group of every member is the plain reduction; an invariant operand gives an invariant result.
      {"pmax", {f32({4}, {"i"})}, {{"axes", axes_param({"i"})}, {"groups", Param{Groups{{0, 1}, {2, 3}}}}}, "f32[4]", {"i"}},
      {"psum", {f32({4}, {"i", "j"})}, {{"axes", axes_param({"i"})}, {"groups", Param{Groups{{0, 2}, {1, 3}}}}}, "f32[4]",
       {"i", "j"}},
      {"pmean", {f32({4}, {"i"})}, {{"axes", axes_param({"i"})}, {"groups", Param{Groups{{0, 1, 2, 3}}}}}, "f32[4]"},
      {"psum", {f32({4})}, {{"axes", axes_param({"i"})}, {"groups", Param{Groups{{0, 1}, {2, 3}}}}}, "f32[4]"},
      {"all_gather", {f32({3}, {"i"})}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)}, {"tiled", bool_param(true)},
                                         {"groups", Param{Groups{{0, 3}, {1, 2}}}}},
       "f32[6]", {"i"}},
      {"all_gather", {f32({3, 2}, {"i"})}, {{"axes", axes_param({"i"})}, {"axis", int_param(1)}}, "f32[3,4,2]"},
      {"all_gather", {f32({3, 2}, {"i"})}, {{"axes", axes_param({"i", "j"})}, {"axis", int_param(0)}, {"tiled", bool_param(true)}},
       "f32[24,2]"},
      {"all_gather", {f32({3})}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)}, {"groups", Param{Groups{{0, 1}, {2, 3}}}}},
       "f32[2,3]"},
      {"psum_scatter", {f32({8, 3})}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)}, {"tiled", bool_param(true)}},
       "f32[2,3]", {"i"}},
      {"psum_scatter", {f32({4, 3})}, {{"axes", axes_param({"i"})}, {"axis", int_param(0)}}, "f32[3]", {"i"}},
      {"all_to_all", {f32({8, 3})}, {{"axes", axes_param({"i"})}, {"split_axis", int_param(0)}, {"concat_axis", int_param(1)},
                                     {"tiled", bool_param(true)}},
       "f32[2,12]", {"i"}},
      {"all_to_all", {f32({4, 3})}, {{"axes", axes_param({"i"})}, {"split_axis", int_param(0)}, {"concat_axis", int_param(1)}},
       "f32[3,4]", {"i"}},
      {"ppermute", {f32({3})}, {{"axes", axes_param({"j"})}, {"perm", Param{Permutation{{0, 1}, {1, 0}}}}}, "f32[3]", {"j"}},
      {"axis_index", {}, {{"axes", axes_param({"j"})}}, "i32[]", {"j"}},
      {"host_load", {}, {{"stream", string_param("s")}, {"shape", ints_param({2, 2})}, {"dtype", Param{DType::u8}}},
       "u8[2,2]"},
      {"host_store", {f32({3})}, {{"stream", string_param("s")}}, ""},
      {"remote_load", {i32_4}, {{"buffer", string_param("rb")}, {"shape", ints_param({4})}, {"dtype", Param{DType::f32}}},
       "(rule error)"},
      {"remote_store", {f32({3}), ValueType{DType::i32, {}, {}}}, {{"buffer", string_param("rb")}}, ""},
      {"variable_read", {}, {{"variable", string_param("w")}, {"shape", ints_param({3})}, {"dtype", Param{DType::f64}}},
       "f64[3]"},
      {"variable_update", {f32({3})}, {{"variable", string_param("w")}}, ""},
  };
  for (const Case& c : cases) {
    std::string text;
    std::vector<std::string> varying;
    try {
      for (const ValueType& t : infer_result_types(c.op, c.ins, c.params, mesh)) {
        text += (text.empty() ? "" : " ") + type_text(t);
        varying = t.varying;
      }
    } catch (const RuleError&) {
      text = "(rule error)";
    }
    EXPECT_EQ(text, c.result) << c.op;
    EXPECT_EQ(varying, c.varying) << c.op;
  }
}

// JAX's binary promotion table (docs.jax.dev "Type promotion semantics", jnp.promote_types), for weft's dtypes.
// One departure: JAX gives int16 for uint8 with int8; weft has no int16 and gives int32 (the next wider
// signed type, as weft::promote_types does for weft::ops).
TEST(ProgramInference, BinaryOpsPromoteAsJax) {
  using D = DType;
  struct Case {
    D a, b, result;
  };
  const std::vector<Case> cases = {
      {D::boolean, D::boolean, D::boolean}, {D::boolean, D::u8, D::u8},    {D::boolean, D::i8, D::i8},
      {D::boolean, D::i32, D::i32},         {D::boolean, D::bf16, D::bf16}, {D::boolean, D::f16, D::f16},
      {D::boolean, D::f32, D::f32},         {D::u8, D::i8, D::i32},         {D::u8, D::i32, D::i32},
      {D::u8, D::i64, D::i64},              {D::u8, D::bf16, D::bf16},      {D::u8, D::f16, D::f16},
      {D::i8, D::i32, D::i32},              {D::i8, D::i64, D::i64},        {D::i32, D::i64, D::i64},
      {D::i8, D::bf16, D::bf16},            {D::i32, D::bf16, D::bf16},     {D::i64, D::f16, D::f16},
      {D::i64, D::f32, D::f32},             {D::i32, D::f64, D::f64},       {D::bf16, D::f16, D::f32},
      {D::bf16, D::f32, D::f32},            {D::f16, D::f32, D::f32},       {D::bf16, D::f64, D::f64},
      {D::f32, D::f64, D::f64},             {D::f16, D::f16, D::f16},       {D::i64, D::i64, D::i64},
  };
  for (const Case& c : cases) {
    for (const auto& [x, y] : {std::pair{c.a, c.b}, std::pair{c.b, c.a}}) {  // the table is symmetric
      const std::vector<ValueType> out = infer_result_types("add", {ValueType{x, {2}, {}}, ValueType{y, {2}, {}}}, {},
                                                            mesh_i());
      EXPECT_EQ(dtype_name(out[0].dtype), dtype_name(c.result)) << dtype_name(x) << " + " << dtype_name(y);
    }
  }
}

// negative, sign and subtract are for numbers (JAX's neg, sign and sub refuse bool; their kernels always did):
// the rule says so when the program is built, naming the op. Bool with a number is that number's type.
TEST(ProgramInference, NegationRefusesBoolOperands) {
  const ValueType flag{DType::boolean, {2}, {}};
  const ValueType count{DType::i32, {2}, {}};
  struct Case {
    const char* op;
    std::vector<ValueType> ins;
    const char* error;  // empty: accepted
  };
  const std::vector<Case> cases = {
      {"negative", {flag}, "negative takes numbers, not bool operands (JAX's rule); for bools, bitwise_not (~)"},
      {"sign", {flag}, "sign takes numbers, not bool operands (JAX's rule)"},
      {"subtract", {flag, flag}, "subtract takes numbers, not bool operands (JAX's rule); for bools, bitwise_xor (^)"},
      {"subtract", {flag, count}, ""},
      {"negative", {count}, ""},
  };
  for (const Case& c : cases) {
    std::string error;
    try {
      infer_result_types(c.op, c.ins, {}, mesh_i());
    } catch (const RuleError& e) {
      error = e.what();
    }
    EXPECT_EQ(error, c.error) << c.op;
  }
}

TEST(ProgramInference, RegistryCoversTheOpFamilies) {
  for (const char* op : {"add", "subtract", "multiply", "divide", "exp", "tanh", "where", "astype", "sum", "mean",
                         "max", "min", "reshape", "transpose", "broadcast_to", "matmul", "psum", "pmean", "pmax",
                         "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute", "axis_index", "host_load",
                         "host_store", "remote_load", "remote_store", "variable_read", "variable_update"}) {
    EXPECT_NE(find_op(op), nullptr) << op;
  }
  EXPECT_TRUE(find_op("host_store")->effectful);
  EXPECT_FALSE(find_op("psum")->effectful);
  EXPECT_TRUE(find_op("add")->elementwise);
  EXPECT_FALSE(find_op("matmul")->elementwise);
}

// The executor runs an equation by its kernel, by its control rule (which runs sub-programs), or on the replica
// (collectives, session effects): every op is exactly one of the three, so a program that verifies also runs.
TEST(ProgramKernels, EveryOpHasAKernelOrRunsOnTheReplica) {
  const std::set<std::string> control = {"cond", "while_loop", "scan", "pmap"};
  const std::set<std::string> on_replica = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather", "psum_scatter",
                                            "all_to_all", "ppermute", "axis_index", "replicated_reduce_scatter",
                                            "replica_sharded_slice", "gather_shards", "all_reduce_identical_inputs",
                                            "all_reduce_identical_grad_inputs", "pbroadcast"};
  for (const std::string& op : registered_ops()) {
    const bool replica = find_op(op)->effectful || on_replica.count(op) > 0;
    const bool controls = control.count(op) > 0;
    EXPECT_EQ(find_op(op)->kernel == nullptr, replica || controls) << op;
    EXPECT_EQ(find_op(op)->control != nullptr, controls) << op;
  }
}

// ---- dead code and liveness ---------------------------------------------------------------------------------

TEST(ProgramDeadCode, DropsUnusedPureEquationsAndKeepsEffects) {
  Builder b(mesh_i());
  const ValueId x = b.input(f32({4}));
  const ValueId unused = b.emit1("exp", {x});          // dead
  b.emit1("tanh", {unused});                            // dead, and makes `unused` dead with it
  const ValueId stored = b.emit1("log", {x});           // only an effect uses it: live
  b.emit("host_store", {stored}, {{"stream", string_param("out")}});
  b.emit1("variable_read", {}, {{"variable", string_param("w")}, {"shape", ints_param({4})},
                                {"dtype", Param{DType::f32}}});  // an effect, result unused: kept
  const ValueId y = b.emit1("negative", {x});
  b.set_outputs({y});
  const Program before = b.build();
  const Program after = eliminate_dead_code(before);
  EXPECT_EQ(before.equations.size(), 6u);
  EXPECT_EQ(program_text(after),
            "{ lambda ; a:f32[4] . let\n"
            "    b:f32[4] = log a\n"
            "    host_store[stream='out'] b\n"
            "    c:f32[4] = variable_read[dtype=float32 shape=(4,) variable='w']\n"
            "    d:f32[4] = negative a\n"
            "  in (d,) }");
  EXPECT_NO_THROW(verify(after));
}

Program elementwise_chain(int length, bool reuse_input_at_end) {
  Builder b(mesh_i());
  const ValueId x = b.input(f32({4, 8}));
  ValueId v = x;
  const char* ops[] = {"exp", "tanh", "negative", "abs"};
  for (int k = 0; k < length; ++k) v = b.emit1(ops[k % 4], {v});
  if (reuse_input_at_end) v = b.emit1("add", {v, x});
  b.set_outputs({v});
  return b.build();
}

TEST(ProgramLiveness, AChainOfTwentyElementwiseOpsKeepsTwoBuffers) {
  const Program chain = elementwise_chain(20, false);
  const Liveness live = analyze_liveness(chain);
  EXPECT_EQ(live.peak_buffers, 2u);
  EXPECT_EQ(live.peak_bytes, 2u * 4 * 8 * sizeof(float));
  ASSERT_EQ(live.dies_after.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    // Each equation is the last use of its input, which is freed (or reused) right after it.
    EXPECT_EQ(live.dies_after[i], chain.equations[i].inputs) << "equation " << i;
  }
}

TEST(ProgramLiveness, AnInputUsedAtTheEndStaysLive) {
  const Liveness live = analyze_liveness(elementwise_chain(20, true));
  EXPECT_EQ(live.peak_buffers, 3u);  // x, held to the end, and the chain's two
  EXPECT_TRUE(live.dies_after[0].empty());
}

TEST(ProgramLiveness, UnusedResultsAndInputsDieAtOnce) {
  Builder b(mesh_i());
  const ValueId x = b.input(f32({4}));
  b.input(f32({1000}));  // never used
  b.emit1("exp", {x});   // result never used
  const ValueId y = b.emit1("tanh", {x});
  b.set_outputs({y});
  const Program p = b.build();
  const Liveness live = analyze_liveness(p);
  EXPECT_EQ(live.unused_inputs, std::vector<ValueId>{1});
  EXPECT_EQ(live.dies_after[0], std::vector<ValueId>{2});
  EXPECT_EQ(live.dies_after[1], std::vector<ValueId>{x});
  EXPECT_EQ(live.peak_bytes, 1000u * 4 + 4 * 4);  // both inputs are live on entry
}

}  // namespace program_test
}  // namespace
}  // namespace weft::program
