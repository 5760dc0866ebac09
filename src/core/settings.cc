// The table of WEFT_* settings and the parsers every reader of them shares (settings.hpp).
#include "core/settings.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <strings.h>

#include "weft/error.hpp"
#include "weft/settings.hpp"

namespace weft::settings {
namespace {

using namespace std::string_view_literals;

constexpr std::string_view kSchedulers[] = {"fibers"sv, "threads"sv};
constexpr std::string_view kLogLevels[] = {"error"sv, "warn"sv, "info"sv, "debug"sv};
constexpr std::string_view kDebugLevels[] = {"OFF"sv, "WARN"sv, "INFO"sv, "TRACE"sv};
constexpr std::string_view kOffOn[] = {"0"sv, "1"sv};
constexpr std::string_view kOffOnChecked[] = {"0"sv, "1"sv, "2"sv};
// WEFT_GEMM's, in blas::Mode's order (src/array/blas.cc).
constexpr std::string_view kGemm[] = {"auto"sv, "eigen"sv, "openblas"sv, "onednn"sv};
// WEFT_FUSION's: "0" is another spelling of "off".
constexpr std::string_view kFusion[] = {"auto"sv, "off"sv, "0"sv};

constexpr std::string_view kRuntime = "Settings", kMatmul = "matmul's library", kLauncher = "Set by the launcher",
                           kPython = "The Python module's dtypes";

constexpr Spec kTable[] = {
    {Setting::device_count, "WEFT_DEVICE_COUNT", Kind::count, "a device count between 1 and 4096", {}, false, kRuntime},
    {Setting::device_memory, "WEFT_DEVICE_MEMORY", Kind::bytes, "a byte count (K, M, G suffixes; 0 = unlimited)", {},
     false, kRuntime},
    {Setting::collective_warn, "WEFT_COLLECTIVE_WARN", Kind::seconds, "a number of seconds >= 0", {}, false, kRuntime},
    {Setting::collective_timeout, "WEFT_COLLECTIVE_TIMEOUT", Kind::seconds, "a number of seconds >= 0", {}, false,
     kRuntime},
    {Setting::log, "WEFT_LOG", Kind::choice, "a log level", kLogLevels, false, kRuntime},
    {Setting::debug, "WEFT_DEBUG", Kind::choice, "a debug level", kDebugLevels, true, kRuntime},
    {Setting::debug_subsys, "WEFT_DEBUG_SUBSYS", Kind::plan, "a comma-separated list of init, coll, mem, launch", {},
     false, kRuntime},
    {Setting::debug_file, "WEFT_DEBUG_FILE", Kind::path, "a file name pattern (%h, %p, %r, %%)", {}, false, kRuntime},
    {Setting::trace, "WEFT_TRACE", Kind::path, "a file to write", {}, false, kRuntime},
    {Setting::trace_events, "WEFT_TRACE_EVENTS", Kind::count, "a number of events between 1 and 1000000000", {}, false,
     kRuntime},
    {Setting::flight_recorder, "WEFT_FLIGHT_RECORDER", Kind::count, "a number of collectives between 0 and 1000000",
     {}, false, kRuntime},
    {Setting::dump, "WEFT_DUMP", Kind::path, "an existing directory", {}, false, kRuntime},
    {Setting::scheduler, "WEFT_SCHEDULER", Kind::choice, "a scheduler", kSchedulers, false, kRuntime},
    {Setting::fiber_stack, "WEFT_FIBER_STACK", Kind::bytes, "a stack size of at least 64 KiB (K, M, G suffixes)", {},
     false, kRuntime},
    {Setting::split_bytes, "WEFT_SPLIT_BYTES", Kind::bytes, "a byte count (K, M, G suffixes)", {}, false, kRuntime},
    {Setting::ring_bytes, "WEFT_RING_BYTES", Kind::bytes, "a byte count (K, M, G suffixes)", {}, false, kRuntime},
    {Setting::verify, "WEFT_VERIFY", Kind::choice, "0 (off) or 1 (on)", kOffOn, false, kRuntime},
    {Setting::shared_products, "WEFT_SHARED_PRODUCTS", Kind::choice, "0 (off), 1 (on) or 2 (on, weights checked)",
     kOffOnChecked, false, kRuntime},
    {Setting::shared_runs, "WEFT_SHARED_RUNS", Kind::choice, "0 (off), 1 (on) or 2 (on, inputs checked)",
     kOffOnChecked, false, kRuntime},
    {Setting::flush_denormals, "WEFT_FLUSH_DENORMALS", Kind::choice, "0 (off: IEEE gradual underflow) or 1 (on: flush to zero)", kOffOn,
     false, kRuntime},
    {Setting::fault, "WEFT_FAULT", Kind::plan, "a fault plan", {}, false, kRuntime},
    {Setting::malloc_tuning, "WEFT_MALLOC_TUNING", Kind::choice, "0 (leave malloc alone) or 1 (tune it)", kOffOn,
     false, kRuntime},
    {Setting::gemm, "WEFT_GEMM", Kind::choice, "a matmul library", kGemm, false, kMatmul},
    {Setting::fusion, "WEFT_FUSION", Kind::choice, "a fusion mode", kFusion, false, kMatmul},
    {Setting::openblas, "WEFT_OPENBLAS", Kind::path, "an OpenBLAS library file", {}, false, kMatmul},
    {Setting::enable_x64, "WEFT_ENABLE_X64", Kind::choice, "0 (64-bit types off, JAX's default) or 1 (on)", kOffOn,
     false, kPython},
    {Setting::num_instances, "WEFT_NUM_INSTANCES", Kind::count, "a number of instances (a whole number >= 1)", {},
     false, kLauncher},
    {Setting::num_replicas, "WEFT_NUM_REPLICAS", Kind::count, "a number of replicas (a whole number >= 1)", {}, false,
     kLauncher},
    {Setting::job_dir, "WEFT_JOB_DIR", Kind::path, "weftrun's job directory", {}, false, kLauncher},
};

constexpr bool in_setting_order() {
  for (std::size_t i = 0; i < std::size(kTable); ++i)
    if (static_cast<std::size_t>(kTable[i].setting) != i) return false;
  return static_cast<std::size_t>(Setting::job_dir) + 1 == std::size(kTable);
}
static_assert(in_setting_order(), "settings::kTable lists every Setting once, in the enum's order");

bool same(const Spec& s, std::string_view a, std::string_view b) {
  if (!s.any_case) return a == b;
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// "a, b or c"
std::string listed(std::span<const std::string_view> choices) {
  std::string out;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (i) out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i];
  }
  return out;
}

}  // namespace

std::span<const Spec> table() { return kTable; }

const Spec& spec(Setting s) { return kTable[static_cast<std::size_t>(s)]; }

const char* value(Setting s) {
  const char* v = std::getenv(std::string(spec(s).variable).c_str());
  return (v && *v) ? v : nullptr;
}

std::size_t choice_of(Setting s, std::string_view text) {
  const Spec& sp = spec(s);
  const std::string word = trimmed(text);  // whitespace around a value is ignored, as around a number
  for (std::size_t i = 0; i < sp.choices.size(); ++i)
    if (same(sp, sp.choices[i], word)) return i;
  throw InvalidArgument(std::string(sp.variable) + "=" + std::string(text) + " is not " + std::string(sp.accepted) +
                        ": use " + listed(sp.choices) + (sp.any_case ? " (any case)" : "") +
                        " (docs/settings.md, \"" + std::string(sp.section) + "\")");
}

std::size_t choice(Setting s, std::size_t unset) {
  const char* v = value(s);
  return v ? choice_of(s, v) : unset;
}

std::string trimmed(std::string_view text) {
  constexpr std::string_view space = " \t\n\r\f\v";
  const std::size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return std::string(text.substr(first, text.find_last_not_of(space) - first + 1));
}

double parse_seconds(std::string_view name, const char* given) {
  const std::string text = trimmed(given);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= 0) || std::isinf(v))
    throw InvalidArgument(std::string(name) + "=" + given + " is not a number of seconds >= 0");
  return v;
}

// Whole bytes only, and representable: "1e30" or "inf" must not quietly become "unlimited" (0) or wrap.
std::int64_t parse_bytes(std::string_view name, const char* given, std::string_view zero, std::string_view limit) {
  const std::string what = std::string(name) + "=" + given;
  const std::string trimmed_text = trimmed(given);
  const char* text = trimmed_text.c_str();
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  const std::string_view suffix = end;
  double scale = 0;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  if (end == text || scale == 0 || !std::isfinite(v) || v < 0)
    throw InvalidArgument(what + " is not a byte count (a number >= 0 with an optional K, M or G suffix; " +
                          std::string(zero) + ")");
  const double bytes = v * scale;
  if (bytes >= 9223372036854775808.0)
    throw InvalidArgument(what + " is too large: " + std::string(limit) + " (" + std::string(zero) + ")");
  if (bytes != std::floor(bytes)) throw InvalidArgument(what + " is not a whole number of bytes");
  return static_cast<std::int64_t>(bytes);
}

long long parse_count(std::string_view name, const char* given, long long low, long long high, const std::string& what) {
  const std::string text = trimmed(given);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || n < low || n > high)
    throw InvalidArgument(std::string(name) + "=" + given + " is not " + what);
  return n;
}

}  // namespace weft::settings

namespace weft {

std::string setting_choice(std::string_view variable) {
  for (const settings::Spec& s : settings::table()) {
    if (s.variable != variable) continue;
    if (s.kind != settings::Kind::choice) {
      throw InvalidArgument(std::string(variable) + " takes " + std::string(s.accepted) + ", not a choice of values");
    }
    const std::size_t index = settings::choice(s.setting, s.choices.size());
    return index == s.choices.size() ? std::string() : std::string(s.choices[index]);
  }
  throw InvalidArgument(std::string(variable) + " is not a weft setting (docs/settings.md lists them)");
}

}  // namespace weft
