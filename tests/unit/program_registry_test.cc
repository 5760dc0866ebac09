// The op registry itself (src/program/op_registry.hpp, primitives.hpp): every primitive of the list has
// exactly one row, whose id is that primitive and whose name is the list's; the index finds every op by name
// and by id, and a primitive two families register is refused when the table is built instead of leaving the
// second definition unreachable.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "program/op_registry.hpp"

namespace weft::program {
namespace {
namespace program_registry_test {

// The list's names, spelled here from the X-macro independently of prim_name (the # of each entry).
std::vector<std::string> ListedNames() {
  return {
#define WEFT_TEST_NAME(name) #name,
      WEFT_PRIMITIVES(WEFT_TEST_NAME)
#undef WEFT_TEST_NAME
  };
}

TEST(ProgramRegistry, EveryPrimHasExactlyOneRowWithItsIdAndName) {
  const std::vector<std::string> listed = ListedNames();
  ASSERT_EQ(listed.size(), kNumPrims);
  for (std::size_t k = 0; k < kNumPrims; ++k) {
    const Prim prim = static_cast<Prim>(k);
    const OpInfo& info = op_info(prim);
    EXPECT_EQ(info.id, prim) << listed[k];
    EXPECT_EQ(prim_name(prim), listed[k]);
    EXPECT_EQ(info.name(), listed[k]);
    EXPECT_EQ(find_op(listed[k]), &info) << listed[k];
  }
  // The table holds nothing beyond the list, and nothing twice.
  std::vector<std::string> sorted = listed;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(registered_ops(), sorted);
}

TEST(ProgramRegistry, FindsEveryRegisteredOpByItsName) {
  const std::vector<std::string> names = registered_ops();
  ASSERT_GT(names.size(), 50u);
  for (const std::string& name : names) {
    const OpInfo* info = find_op(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name(), name);
  }
  for (const char* unknown : {"", "Add", "add ", "psum_", "no_such_op"}) EXPECT_EQ(find_op(unknown), nullptr) << unknown;
}

TEST(ProgramRegistry, NoTwoFamiliesRegisterOneName) {
  std::vector<std::string> names = registered_ops();
  const auto twice = std::adjacent_find(names.begin(), names.end());
  EXPECT_EQ(twice, names.end()) << "registered twice: " << *twice;
}

// The check itself, on tables built here: the first primitive met twice is named, whichever families hold it.
TEST(ProgramRegistry, IndexRefusesAPrimRegisteredTwice) {
  struct Case {
    std::vector<Prim> prims;
    std::string error;  // empty: indexed
  };
  const std::vector<Case> cases = {
      {{Prim::add, Prim::exp, Prim::psum}, ""},
      {{Prim::add, Prim::exp, Prim::add}, "op registry: 'add' is registered twice"},
      {{Prim::psum, Prim::exp, Prim::exp, Prim::psum}, "op registry: 'exp' is registered twice"},
      {{}, ""},
  };
  for (const Case& c : cases) {
    std::vector<OpInfo> ops;
    for (Prim prim : c.prims) ops.push_back({.id = prim, .min_inputs = 1, .max_inputs = 1});
    std::string error;
    try {
      const OpIndex index = index_ops(ops);
      EXPECT_EQ(index.size(), kNumPrims);
      for (const OpInfo& info : ops) EXPECT_EQ(index.at(static_cast<std::size_t>(info.id)), &info);
      EXPECT_EQ(std::count(index.begin(), index.end(), nullptr), static_cast<std::ptrdiff_t>(kNumPrims - ops.size()));
    } catch (const std::logic_error& e) {
      error = e.what();
    }
    if (c.error.empty()) {
      EXPECT_EQ(error, "");
    } else {
      EXPECT_NE(error.find(c.error), std::string::npos) << error;
    }
  }
}

// The properties the passes read from a row instead of a list of names of their own (fusion, shard_map's
// pvary, the shared-products analysis): checked against JAX's and the runtime's sets, spelled here.
TEST(ProgramRegistry, RowPropertiesAreTheFamiliesSets) {
  const std::vector<std::string> communicates = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather",
                                                 "psum_scatter", "all_to_all", "ppermute", "pbroadcast"};
  const std::vector<std::string> equal_within_groups = {"psum", "pmean", "pmax", "pmin", "pprod",
                                                        "all_reduce_identical_grad_inputs", "all_gather",
                                                        "gather_shards"};
  const std::vector<std::string> effects = {"host_load", "host_store", "remote_load", "remote_store",
                                            "variable_read", "variable_update"};
  const auto has = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const std::string& name : registered_ops()) {
    const OpInfo& info = *find_op(name);
    EXPECT_EQ(info.communicates_operand, has(communicates, name)) << name;
    EXPECT_EQ(info.equal_within_groups, has(equal_within_groups, name)) << name;
    EXPECT_EQ(info.effectful, has(effects, name)) << name;
  }
}

// The registry checks every parameter against the op's schema before the type rule runs: present when
// required, known, and of its kind, the refusal naming the parameter and the kind it must be. The texts are
// params.hpp's accessors' (a rule reading a parameter refuses it with the same words).
TEST(ProgramRegistry, ParametersOfAnotherKindAreRefusedByTheSchema) {
  const Mesh mesh({{"i", 2}});
  const ValueType f32{DType::f32, {2}, {}};
  struct Case {
    const char* op;
    Params params;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"psum", {{"axes", int_param(0)}}, "parameter 'axes' must be a tuple of axis names"},
      {"sum", {{"axes", axes_param({"i"})}}, "parameter 'axes' must be a tuple of ints"},
      {"astype", {{"dtype", string_param("f32")}}, "parameter 'dtype' must be a dtype"},
      {"integer_pow", {{"y", bool_param(true)}}, "parameter 'y' must be an int"},
      {"all_gather", {{"axes", axes_param({"i"})}, {"axis", int_param(0)}, {"tiled", int_param(1)}},
       "parameter 'tiled' must be a bool"},
      {"ppermute", {{"axes", axes_param({"i"})}, {"perm", ints_param({0, 1})}},
       "parameter 'perm' must be a tuple of (source, destination) pairs"},
      {"psum", {{"axes", axes_param({"i"})}, {"groups", ints_param({0, 1})}},
       "parameter 'groups' must be a tuple of index tuples"},
      // Parameters no type rule reads (the executor's): refused here, not first when the program runs.
      {"host_store", {{"stream", int_param(3)}}, "parameter 'stream' must be a string"},
      {"replicated_reduce_scatter", {{"axes", axes_param({"i"})}, {"op", int_param(0)}},
       "parameter 'op' must be a string"},
      {"exp", {{kCheckpointParam, string_param("r")}}, "parameter 'checkpoint' must be an int"},
      // Presence: required ones first, then unknown ones.
      {"psum", {}, "psum needs parameter 'axes'"},
      {"exp", {{"axis", int_param(0)}}, "exp has no parameter 'axis'"},
      // Of their kinds: accepted.
      {"host_store", {{"stream", string_param("out")}}, ""},
      {"exp", {{kCheckpointParam, int_param(2)}}, ""},
  };
  for (const Case& c : cases) {
    std::string error;
    try {
      infer_result_types(c.op, {f32}, c.params, mesh);
    } catch (const RuleError& e) {
      error = e.what();
    }
    EXPECT_EQ(error, c.error) << c.op;
  }
}

// Each schema entry's kind is the variant alternative a value of it holds, so the check is an index compare.
TEST(ProgramRegistry, EveryKindIsItsVariantAlternative) {
  const std::vector<std::pair<Param, ParamKind>> values = {
      {bool_param(true), ParamKind::boolean},       {int_param(1), ParamKind::integer},
      {string_param("s"), ParamKind::string},       {Param{DType::f32}, ParamKind::dtype},
      {ints_param({1}), ParamKind::ints},           {axes_param({"i"}), ParamKind::axes},
      {Param{Permutation{{0, 1}}}, ParamKind::permutation}, {Param{Groups{{0}}}, ParamKind::groups},
  };
  for (const auto& [value, kind] : values) EXPECT_EQ(value.index(), static_cast<std::size_t>(kind));
}

}  // namespace program_registry_test
}  // namespace
}  // namespace weft::program
