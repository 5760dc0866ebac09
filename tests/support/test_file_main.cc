// The main() of the GoogleTest programs unit_tests and inproc_tests (tests/CMakeLists.txt): each links every
// tests/<dir>/*_test.cc of its directory into one program, compiled in unity batches so that GoogleTest's and
// weft's headers are parsed once per batch rather than once per file (most of ./test's build). One run still
// runs one file's tests, as when each file was its own program:
//
//   unit_tests --weft_test_file=array_test.cc [--gtest_filter=...] [other --gtest_ flags]
//
// selects the tests whose TEST/TEST_F/TEST_P/TYPED_TEST sits in that file (TestInfo::file(), which a unity
// batch keeps: it includes each file by its path), within --gtest_filter when one is given. Each ctest entry
// (unit_array_test, ...) is such a run, so a file keeps its own process: its process state, its exit, its
// timeout. A run that selects no test fails, naming the files the program holds: a misspelt file name or a
// filter that matches nothing must not pass silently.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kFileFlag = "--weft_test_file=";

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// GoogleTest's glob: '*' any run of characters, '?' any one character.
bool glob_matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1, n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool any_matches(std::string_view patterns, std::string_view name) {
  while (true) {
    const size_t colon = patterns.find(':');
    if (glob_matches(patterns.substr(0, colon), name)) return true;
    if (colon == std::string_view::npos) return false;
    patterns.remove_prefix(colon + 1);
  }
}

// --gtest_filter's rule: POSITIVE[-NEGATIVE], each a ':'-separated list of globs; an empty POSITIVE is '*'.
bool filter_selects(std::string_view filter, std::string_view name) {
  const size_t dash = filter.find('-');
  const std::string_view positive = filter.substr(0, dash);
  if (!positive.empty() && !any_matches(positive, name)) return false;
  return dash == std::string_view::npos || !any_matches(filter.substr(dash + 1), name);
}

int usage_error(const std::string& what, const std::set<std::string, std::less<>>& files) {
  std::string known;
  for (const std::string& f : files) known += " " + f;
  std::fprintf(stderr, "%s\nthis program holds the tests of:%s\n", what.c_str(), known.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // takes out the --gtest_ flags it knows
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, kFileFlag.size()) == kFileFlag) {
      file = arg.substr(kFileFlag.size());
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (expected --weft_test_file=NAME_test.cc and --gtest_ flags)\n",
                   argv[0], argv[i]);
      return 2;
    }
  }

  ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  std::set<std::string, std::less<>> files;
  const std::string user_filter = GTEST_FLAG_GET(filter);
  std::string selected;
  int count = 0;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      const std::string_view in = base_name(info.file());
      files.emplace(in);
      const std::string name = std::string(suite.name()) + "." + info.name();
      if (in != file || !filter_selects(user_filter, name)) continue;
      selected += (count++ ? ":" : "") + name;
    }
  }
  if (file.empty()) return usage_error(std::string(argv[0]) + ": name the test file: --weft_test_file=NAME_test.cc", files);
  if (count == 0) {
    if (files.count(file) == 0)
      return usage_error(std::string(argv[0]) + ": --weft_test_file=" + file + ": no test of this program is in that file",
                         files);
    return usage_error(std::string(argv[0]) + ": --weft_test_file=" + file + " with --gtest_filter=" + user_filter +
                           " selects no test",
                       files);
  }
  GTEST_FLAG_SET(filter, selected);
  return RUN_ALL_TESTS();
}
