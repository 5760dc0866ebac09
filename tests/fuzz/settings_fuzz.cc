// Fuzz target: the WEFT_* settings (RuntimeOptions::resolved, src/runtime/runtime_options.cc; docs/settings.md).
// The input is lines NAME=VALUE; each NAME among the settings below is set to VALUE in the environment (the
// others are unset), then the options are resolved as every Runtime does at start-up. An invalid value must
// be an InvalidArgument naming its setting; a valid one must give options a runtime can use.
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "weft/error.hpp"
#include "weft/runtime.hpp"

namespace {
const char* const kSettings[] = {"WEFT_DEVICE_COUNT", "WEFT_DEVICE_MEMORY", "WEFT_COLLECTIVE_WARN",
                                 "WEFT_COLLECTIVE_TIMEOUT", "WEFT_LOG", "WEFT_TRACE_EVENTS",
                                 "WEFT_NUM_INSTANCES", "WEFT_NUM_REPLICAS", "WEFT_FAULT",
                                 "WEFT_FLIGHT_RECORDER", "WEFT_DUMP", "WEFT_DEBUG", "WEFT_DEBUG_SUBSYS",
                                 "WEFT_DEBUG_FILE", "WEFT_SCHEDULER"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const char* name : kSettings) ::unsetenv(name);
  std::string_view text(reinterpret_cast<const char*>(data), size);
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string line(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos || line.find('\0') != std::string::npos) continue;
    const std::string name = line.substr(0, eq);
    for (const char* known : kSettings)
      if (name == known) ::setenv(known, line.c_str() + eq + 1, 1);
  }
  weft::RuntimeOptions resolved;
  try {
    resolved = weft::RuntimeOptions{}.resolved();
  } catch (const weft::InvalidArgument&) {
    return 0;
  }
  const bool usable = resolved.device_count >= 1 && resolved.device_memory >= 0 && resolved.collective_warn_s >= 0 &&
                      resolved.collective_timeout_s >= 0 && resolved.trace_events >= 1 &&
                      (resolved.collective_timeout_s == 0 || resolved.collective_timeout_s >= resolved.collective_warn_s) &&
                      resolved.flight_recorder >= 0 && resolved.flight_recorder <= 1000000 &&
                      !(resolved.flight_recorder == 0 && !resolved.dump_dir.empty());
  if (!usable) std::abort();
  return 0;
}
