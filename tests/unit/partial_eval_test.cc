// Partial evaluation (src/program/partial_eval.hpp, issue 46): the split of JAX's documented example printed
// whole, and the session effects' order across the split (an effect after an unknown one is unknown too),
// table-driven; the values are checked from Python (tests/python/test_linearize.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "program/builder.hpp"
#include "program/partial_eval.hpp"
#include "program/printer.hpp"

namespace weft::program {
namespace {
namespace partial_eval_test {

ValueType f32(std::vector<std::int64_t> shape) { return ValueType{DType::f32, std::move(shape), {}}; }

std::vector<std::string> ops_of(const Program& p) {
  std::vector<std::string> ops;
  for (const Equation& eq : p.equations) ops.push_back(eq.name());
  return ops;
}

TEST(PartialEval, SplitsJaxsDocumentedExample) {
  // partial_eval_jaxpr_nounits' docstring, exp for cos and tanh for sin: b unknown.
  Builder b{Mesh()};
  const ValueId a = b.input(f32({}));
  const ValueId bb = b.input(f32({}));
  const ValueId c = b.emit1("exp", {a});
  const ValueId d = b.emit1("tanh", {a});
  const ValueId e = b.emit1("negative", {d});
  const ValueId f = b.emit1("multiply", {e, bb});
  b.set_outputs({c, f});
  const PartialEval split = partial_eval(b.build(), {false, true});
  EXPECT_EQ(program_text(split.known),
            "{ lambda ; a:f32[] . let\n"
            "    b:f32[] = exp a\n"
            "    c:f32[] = tanh a\n"
            "    d:f32[] = negative c\n"
            "  in (b, d) }");
  EXPECT_EQ(program_text(split.unknown),
            "{ lambda ; a:f32[] b:f32[] . let\n"
            "    c:f32[] = multiply a b\n"
            "  in (c,) }");
  EXPECT_EQ(split.out_unknowns, (std::vector<bool>{false, true}));
  EXPECT_EQ(split.num_residuals, 1u);
}

TEST(PartialEval, EffectsKeepTheirOrder) {
  // x known, y unknown; a store of each, in either order, and a known pure equation after them.
  struct Case {
    std::string name;
    bool unknown_first;
    std::vector<std::string> known_ops;
    std::vector<std::string> unknown_ops;
    std::size_t residuals;
  };
  const std::vector<Case> cases = {
      // the known store runs first, in the known program; the unknown one later
      {"known_first", false, {"variable_update", "exp"}, {"host_store"}, 0},
      // the known store must not run before the unknown one: it goes after it, x a residual
      {"unknown_first", true, {"exp"}, {"host_store", "variable_update"}, 1},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Builder b{Mesh()};
    const ValueId x = b.input(f32({2}));
    const ValueId y = b.input(f32({2}));
    auto store_y = [&] { b.emit("host_store", {y}, {{"stream", string_param("out")}}); };
    if (k.unknown_first) store_y();
    b.emit("variable_update", {x}, {{"variable", string_param("w")}});
    if (!k.unknown_first) store_y();
    b.set_outputs({b.emit1("exp", {x})});
    const PartialEval split = partial_eval(b.build(), {false, true});
    EXPECT_EQ(ops_of(split.known), k.known_ops);
    EXPECT_EQ(ops_of(split.unknown), k.unknown_ops);
    EXPECT_EQ(split.num_residuals, k.residuals);
    EXPECT_EQ(split.out_unknowns, std::vector<bool>{false});
  }
}

}  // namespace partial_eval_test
}  // namespace
}  // namespace weft::program
