// Fuzz target: weftrun's command line (tools/weftrun/options.cc). The input is argv[1..], split at NUL
// bytes. A bad command line must be a UsageError (weftrun prints it and exits 2): no other exception, no
// crash; a command line that parses must describe a job weftrun can start: 1 <= N <= kMaxInstances, R a
// multiple of N, R/N devices per instance within a process's limit, a PROGRAM, an output filter naming an
// instance, and the replica ranges of the first and last instance computable without overflow.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size && args.size() <= 64; ++i) {
    if (data[i] == 0)
      args.emplace_back();
    else
      args.back() += static_cast<char>(data[i]);
  }
  weftrun::Options o;
  try {
    o = weftrun::parse_options(args);
  } catch (const weftrun::UsageError&) {
    return 0;
  }
  if (o.help) return 0;
  const bool sane = o.num_instances >= 1 && o.num_instances <= weftrun::kMaxInstances && o.num_replicas >= 1 &&
                    o.num_replicas % o.num_instances == 0 &&
                    o.num_replicas / o.num_instances <= weftrun::kMaxReplicasPerInstance && !o.program.empty() &&
                    o.only_output_from < o.num_instances && o.devices_per_replica == 1 && o.timeout_s >= 0;
  if (!sane) std::abort();
  (void)weftrun::replicas_of(0, o);
  (void)weftrun::replicas_of(o.num_instances - 1, o);
  return 0;
}
