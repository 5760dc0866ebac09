// Every WEFT_* environment variable weft reads, in one table (its name, the kind of value it takes, the values
// it accepts, where docs/settings.md documents it), and the one reader of the environment for them: an empty
// variable is unset, and a value the setting does not know is an InvalidArgument naming the variable and what
// it accepts, never a silent default (issue 45, item 13: WEFT_FUSION=OFF once left fusion on). In core, the
// lowest layer, because its readers span every layer: the runtime's options, the matmul library (array),
// fusion (program), the launcher protocol, the Python module (weft/settings.hpp: WEFT_ENABLE_X64).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace weft::settings {

enum class Setting {
  // The runtime's (RuntimeOptions::resolved(), docs/settings.md's first table).
  device_count, device_memory, collective_warn, collective_timeout, log, debug, debug_subsys, debug_file, trace,
  trace_events, flight_recorder, dump, scheduler, fiber_stack, split_bytes, ring_bytes, verify, shared_products,
  shared_runs, flush_denormals, fault, malloc_tuning,
  // matmul's library and fusion ("matmul's library").
  gemm, fusion, openblas,
  // The Python module's (read by `import weft` through weft::setting_choice).
  enable_x64,
  // Set by weftrun ("Set by the launcher").
  num_instances, num_replicas, job_dir,
};

enum class Kind {
  count,    // a whole number in a range
  bytes,    // a byte count with an optional K/M/G suffix
  seconds,  // a number of seconds >= 0
  choice,   // one of `choices`
  path,     // a file or directory (checked where it is used)
  plan,     // a small language of its own (WEFT_FAULT's plans, WEFT_DEBUG_SUBSYS's lists)
};

struct Spec {
  Setting setting;
  std::string_view variable;
  Kind kind;
  std::string_view accepted;                  // what it accepts, as the messages say it
  std::span<const std::string_view> choices;  // Kind::choice: every accepted spelling
  bool any_case;                              // Kind::choice: compared ignoring case
  std::string_view section;                   // the docs/settings.md section that documents it
};

// The table, in Setting's order.
std::span<const Spec> table();
const Spec& spec(Setting s);

// The variable's text, or nullptr when it is absent or empty (empty is unset, for every setting).
const char* value(Setting s);

// Kind::choice: the index into spec(s).choices of the variable's value, or `unset` when it has none; any other
// value is an InvalidArgument "WEFT_X=value is not <accepted>: use a, b or c".
std::size_t choice(Setting s, std::size_t unset);
// The same for a value given some other way (the same words in the message).
std::size_t choice_of(Setting s, std::string_view text);

// The one rule for whitespace in every WEFT_* number: around it ignored, inside it a mistake.
std::string trimmed(std::string_view text);
// "NAME=given" parsed as the kinds above; each failure an InvalidArgument naming NAME and what it accepts.
double parse_seconds(std::string_view name, const char* given);
std::int64_t parse_bytes(std::string_view name, const char* given, std::string_view zero = "0 = unlimited",
                         std::string_view limit = "a device holds at most 2^63 - 1 bytes");
long long parse_count(std::string_view name, const char* given, long long low, long long high, const std::string& what);

}  // namespace weft::settings
