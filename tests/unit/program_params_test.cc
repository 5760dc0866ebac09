// The program layer's parameter accessors (src/program/params.hpp): each reads its kind, a default stands in
// for an absent optional parameter, and a missing required parameter or one of another kind is a RuleError
// naming the parameter and the kind it must be, for every kind a program parameter can have.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "program/params.hpp"

namespace weft::program {
namespace {
namespace program_params_test {

std::string error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const RuleError& e) {
    return e.what();
  }
  return "";
}

const Params& sample() {
  static const Params params = {{"axis", int_param(-1)},
                                {"axes", axes_param({"i", "j"})},
                                {"dtype", Param{DType::bf16}},
                                {"keepdims", bool_param(true)},
                                {"tiled", bool_param(false)},
                                {"shape", ints_param({2, 3})},
                                {"stream", string_param("x")},
                                {"perm", Param{Permutation{{0, 1}, {1, 0}}}},
                                {"groups", Param{Groups{{0, 1}, {2, 3}}}}};
  return params;
}

TEST(ProgramParams, ReadsEachKind) {
  const Params& p = sample();
  EXPECT_EQ(param_int(p, "axis"), -1);
  EXPECT_EQ(param_int(p, "axis", 7), -1);
  EXPECT_EQ(param_int(p, "split_axis", 7), 7);
  EXPECT_EQ(param_ints(p, "shape"), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(param_axes(p), (std::vector<std::string>{"i", "j"}));
  EXPECT_EQ(param_dtype(p), DType::bf16);
  EXPECT_EQ(param_string(p, "stream"), "x");
  EXPECT_TRUE(param_flag(p, "keepdims"));
  EXPECT_FALSE(param_flag(p, "tiled"));
  EXPECT_FALSE(param_flag(p, "transpose_a"));  // absent: false
  EXPECT_EQ(param<Permutation>(p, "perm"), (Permutation{{0, 1}, {1, 0}}));
  EXPECT_EQ(param<Groups>(p, "groups"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(param_if<std::int64_t>(p, "num_classes"), nullptr);
  EXPECT_EQ(param_if<std::int64_t>(p, "axis"), &std::get<std::int64_t>(p.at("axis")));
  EXPECT_TRUE(has_param(p, "axes"));
  EXPECT_FALSE(has_param(p, "y"));
}

TEST(ProgramParams, RefusalsNameTheParameterAndItsKind) {
  const Params& p = sample();
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { param_int(p, "y"); }, "missing parameter 'y'"},
      {[&] { param_ints(p, "start"); }, "missing parameter 'start'"},
      {[&] { param_dtype(Params{}); }, "missing parameter 'dtype'"},
      {[&] { param_int(p, "shape"); }, "parameter 'shape' must be an int"},
      {[&] { param_int(p, "stream", 0); }, "parameter 'stream' must be an int"},
      {[&] { param_flag(p, "axis"); }, "parameter 'axis' must be a bool"},
      {[&] { param_ints(p, "axis"); }, "parameter 'axis' must be a tuple of ints"},
      {[&] { param_axes(p, "shape"); }, "parameter 'shape' must be a tuple of axis names"},
      {[&] { param_dtype(p, "stream"); }, "parameter 'stream' must be a dtype"},
      {[&] { param_string(p, "dtype"); }, "parameter 'dtype' must be a string"},
      {[&] { param<Permutation>(p, "groups"); }, "parameter 'groups' must be a tuple of (source, destination) pairs"},
      {[&] { param<Groups>(p, "perm"); }, "parameter 'perm' must be a tuple of index tuples"},
      {[&] { param_if<bool>(p, "axes"); }, "parameter 'axes' must be a bool"},
  };
  for (const auto& [read, want] : cases) EXPECT_EQ(error_of(read), want);
}

}  // namespace program_params_test
}  // namespace
}  // namespace weft::program
