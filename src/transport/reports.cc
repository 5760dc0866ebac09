// Report text shared by the transports and the rendezvous (reports.hpp).
#include "transport/reports.hpp"

#include <algorithm>
#include <sstream>

namespace weft::transport {

std::string list_str(const std::vector<int>& items) {
  std::string s = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(items[i]);
  }
  return s + "]";
}

std::string seconds_str(double seconds) {
  std::ostringstream os;
  os.precision(3);
  os << seconds << " s";
  return os.str();
}

std::string what_of(const PollContext& poll) { return poll.what ? poll.what() : std::string("a collective"); }

std::string stall_report(const std::vector<int>& procs, const std::vector<int>& missing, const PollContext& poll,
                         const std::function<std::string(int)>& process_name) {
  std::vector<int> arrived_ids, missing_ids;
  for (int p : procs) {
    const bool absent = std::find(missing.begin(), missing.end(), p) != missing.end();
    std::vector<int> ids = poll.replicas_of ? poll.replicas_of(p) : std::vector<int>{p};
    auto& into = absent ? missing_ids : arrived_ids;
    into.insert(into.end(), ids.begin(), ids.end());
  }
  std::sort(arrived_ids.begin(), arrived_ids.end());
  std::sort(missing_ids.begin(), missing_ids.end());
  std::string report = std::string(poll.replicas_of ? "arrived: " : "arrived: processes ") + list_str(arrived_ids) +
                       (poll.replicas_of ? "; missing: " : "; missing: processes ") + list_str(missing_ids);
  for (int p : missing) {
    report += "\n  " + process_name(p);
    if (poll.replicas_of) {
      const std::vector<int> ids = poll.replicas_of(p);
      report += ids.size() == 1 ? ", replica " + std::to_string(ids[0]) : ", replicas " + list_str(ids);
    }
    report += ": " + (poll.missing_progress.empty() ? std::string("has not reached it") : poll.missing_progress);
  }
  return report;
}

}  // namespace weft::transport
