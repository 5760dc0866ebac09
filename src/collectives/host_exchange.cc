// Host-side exchanges between processes (host_exchange.hpp).
#include "collectives/host_exchange.hpp"

#include <exception>

namespace weft::collectives {
namespace {
std::vector<int> zero_to(int n) {
  std::vector<int> all(n);
  for (int p = 0; p < n; ++p) all[p] = p;
  return all;
}
}  // namespace

HostExchange::HostExchange(transport::Interprocess& job, double timeout_s)
    : job_(job), timeout_s_(timeout_s), everyone_(zero_to(job.size())) {}

transport::PollContext HostExchange::poll(std::string_view what) const {
  return transport::PollContext{timeout_s_, nullptr, [text = std::string(what)] { return text; }};
}

// A failed exchange is a failure of the job, as a failed run is: the other instances must not keep waiting.
template <class F>
void HostExchange::fate_shared(F&& exchange) {
  try {
    exchange();
  } catch (const std::exception& e) {
    job_.mark_failed("instance " + std::to_string(job_.rank()) + ": " + e.what());
    throw;
  }
}

bool HostExchange::agree(std::string_view what, std::uint64_t fingerprint) {
  bool same = false;
  const auto context = poll(what);
  fate_shared([&] { same = job_.agree(everyone_, fingerprint, context); });
  return same;
}

std::vector<std::byte> HostExchange::all_gather(std::string_view what, std::span<const std::byte> mine) {
  std::vector<std::byte> all(mine.size() * everyone_.size());
  const auto context = poll(what);
  fate_shared([&] {
    job_.allgatherv(everyone_, mine.data(), std::vector<std::size_t>(everyone_.size(), mine.size()), all.data(), context);
  });
  return all;
}

}  // namespace weft::collectives
