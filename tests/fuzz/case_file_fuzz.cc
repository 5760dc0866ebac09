// Fuzz target: weft-conformance's case files (tools/weft-conformance: case_file.cc, collective_cases.cc,
// array_cases.cc, array_ops.cc, json_array.cc) on arbitrary text. A malformed file must be refused with a
// message (std::runtime_error naming it); a malformed case must come back as a "bad case" that fails on
// its own; nothing may crash, wrap a value silently or overflow the stack. Every case that parses is
// described (its PASS line), and host array-op cases with small inputs are run as weft-conformance runs
// them: a failure there must be an exception (weft's error), never a crash.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "case.hpp"
#include "case_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::unique_ptr<conformance::Case>> cases;
  try {
    cases = conformance::parse_case_text(text, "fuzz.json");
  } catch (const std::runtime_error&) {
    return 0;  // the file is refused as a whole, with a message
  }
  for (const auto& c : cases) {
    (void)c->describe();
    if (c->devices() < 0) std::abort();
    // Collective cases need a runtime (threads, one per device); the parse is what is fuzzed here. Host
    // cases run, unless their result could be large (one_hot's classes, a matmul of large sides).
    if (c->devices() == 0 && size < 4096) {
      try {
        (void)c->run(nullptr);
      } catch (const std::exception&) {
      }
    }
  }
  return 0;
}
