// The op registry itself (src/program/op_registry.hpp): its index finds every op by name, and a name that two
// families register is refused when the table is built instead of leaving the second definition unreachable.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "program/op_registry.hpp"

namespace weft::program {
namespace {

TEST(ProgramRegistry, FindsEveryRegisteredOpByItsName) {
  const std::vector<std::string> names = registered_ops();
  ASSERT_GT(names.size(), 50u);
  for (const std::string& name : names) {
    const OpInfo* info = find_op(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name, name);
  }
  for (const char* unknown : {"", "Add", "add ", "psum_", "no_such_op"}) EXPECT_EQ(find_op(unknown), nullptr) << unknown;
}

TEST(ProgramRegistry, NoTwoFamiliesRegisterOneName) {
  std::vector<std::string> names = registered_ops();
  const auto twice = std::adjacent_find(names.begin(), names.end());
  EXPECT_EQ(twice, names.end()) << "registered twice: " << *twice;
}

// The check itself, on tables built here: the first name met twice is named, whichever families hold it.
TEST(ProgramRegistry, IndexRefusesANameRegisteredTwice) {
  struct Case {
    std::vector<std::string> names;
    std::string error;  // empty: indexed
  };
  const std::vector<Case> cases = {
      {{"add", "exp", "psum"}, ""},
      {{"add", "exp", "add"}, "op registry: 'add' is registered twice"},
      {{"psum", "exp", "exp", "psum"}, "op registry: 'exp' is registered twice"},
      {{}, ""},
  };
  for (const Case& c : cases) {
    std::vector<OpInfo> ops;
    for (const std::string& name : c.names) ops.push_back({name, 1, 1, {}, {}, false, nullptr});
    std::string error;
    try {
      const OpIndex index = index_ops(ops);
      EXPECT_EQ(index.size(), ops.size());
      for (const OpInfo& info : ops) EXPECT_EQ(index.at(info.name), &info);
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

}  // namespace
}  // namespace weft::program
