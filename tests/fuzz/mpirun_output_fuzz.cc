// Fuzz target: what weftrun reads from mpirun (tools/weftrun/tagged_output.cc, mpirun_report.cc): the
// tagged output of the instances, cut into chunks anywhere, and mpirun's own failure reports. The first
// input byte picks the number of instances (1-8) and the chunk size (1-32 bytes); the rest is fed to a
// TaggedOutput of each pipe. Every line handed out must belong to an instance of the job or to mpirun
// (rank -1), and mpirun's lines then go through parse_mpirun_report, as weftrun's summary does: no
// exception, no crash, whatever the text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "mpirun_report.hpp"
#include "tagged_output.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int instances = 1 + (data[0] & 7);
  const std::size_t chunk = 1 + (data[0] >> 3);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> mpirun_lines;
  for (weftrun::Stream pipe : {weftrun::Stream::out, weftrun::Stream::err}) {
    weftrun::TaggedOutput out(pipe, instances, [&](const weftrun::TaggedLine& line) {
      if (line.rank < -1 || line.rank >= instances) std::abort();
      if (line.rank < 0) mpirun_lines.push_back(line.text);
    });
    for (std::size_t at = 0; at < text.size(); at += chunk) out.feed(text.substr(at, chunk));
    out.finish();
  }
  const weftrun::MpirunReport report = weftrun::parse_mpirun_report(mpirun_lines);
  for (const weftrun::MpirunEvent& e : report.events)
    if (e.kind != weftrun::MpirunEvent::aborted_job && e.rank < 0) std::abort();
  return 0;
}
