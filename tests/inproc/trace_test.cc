// WEFT_TRACE: a Chrome-trace timeline with one span per collective per replica and a "wait" sub-span.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <weft/weft.hpp>

namespace {
namespace trace_test {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(Trace, OneSpanPerCollectivePerReplicaWithItsWait) {
  const std::string path = "/tmp/weft-trace-test-" + std::to_string(getpid()) + ".json";
  {
    weft::Runtime rt({.device_count = 4, .trace_path = path});
    auto f = weft::pmap([](weft::Replica& r, const weft::Array& x) { return r.pmax(r.psum(x, "i"), "i"); },
                        {.axis = "i", .runtime = &rt});
    f(weft::Array::ones({4, 3}));
  }  // the timeline is written when the runtime ends
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no trace written to " << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string trace = text.str();
  EXPECT_EQ(trace.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 0), 0u) << trace.substr(0, 200);
  EXPECT_EQ(count(trace, "\"name\": \"psum\""), 4);
  EXPECT_EQ(count(trace, "\"name\": \"pmax\""), 4);
  EXPECT_EQ(count(trace, "\"name\": \"wait\""), 8);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(count(trace, "\"tid\": " + std::to_string(r) + ","), 4) << "replica " << r;
  EXPECT_EQ(count(trace, "\"group\": \"[[0, 1, 2, 3]]\""), 8);
  EXPECT_NE(trace.find("]}\n"), std::string::npos) << "the JSON is not closed";
  std::remove(path.c_str());
}

}  // namespace trace_test
}  // namespace
