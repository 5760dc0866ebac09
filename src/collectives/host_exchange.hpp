// Exchanges between the processes of a job outside the replicas' collectives: a session reading a variable
// back to the host, a checkpoint gathering remote-buffer entries, the start-up check that every instance has
// the same configuration. They are collectives too (every process calls them, in the same order as the
// others), so they go through this layer: agreement on one fingerprint (collectives/fingerprint.hpp) before
// data moves, deadlines from the options, and fate sharing — a process whose exchange fails tells the others
// at once (Interprocess::mark_failed), so none of them keeps waiting for it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/fingerprint.hpp"
#include "transport/interprocess.hpp"

namespace weft::collectives {

class HostExchange {
 public:
  // Over every process of `job`; each wait fails after `timeout_s` (0 = never) naming what it was doing.
  HostExchange(transport::Interprocess& job, double timeout_s);

  // True on every process when all passed the same fingerprint; `what` names the exchange in errors
  // ("session s: reading variable w back to the host").
  bool agree(std::string_view what, std::uint64_t fingerprint);
  bool agree(std::string_view what, const Fingerprint& fingerprint) { return agree(what, fingerprint.value()); }

  // Every process's `mine`, concatenated in process order; all blocks have mine's size (the caller agreed on
  // it first, or it is fixed).
  std::vector<std::byte> all_gather(std::string_view what, std::span<const std::byte> mine);

  // A disagreement found by the caller (agree() returned false) fails the job as a failed exchange does.
  template <class Error>
  [[noreturn]] void fail(const Error& error) {
    job_.mark_failed("instance " + std::to_string(job_.rank()) + ": " + error.what());
    throw error;
  }

  int process() const { return job_.rank(); }
  int processes() const { return job_.size(); }

 private:
  template <class F>
  void fate_shared(F&& exchange);
  transport::PollContext poll(std::string_view what) const;

  transport::Interprocess& job_;
  const double timeout_s_;
  const std::vector<int> everyone_;
};

}  // namespace weft::collectives
