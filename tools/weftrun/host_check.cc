// The host name check (host_check.hpp).
#include "host_check.hpp"

#include <netdb.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "text.hpp"

namespace weftrun {

struct HostNameCheck::Lookup {
  std::atomic<bool> done{false};
  std::string warning;  // empty: the name resolves, at once
};

namespace {

void look_up(const std::shared_ptr<HostNameCheck::Lookup>& result) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return result->done.store(true);
  const auto start = std::chrono::steady_clock::now();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_CANONNAME;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(name, nullptr, &hints, &found);
  if (found) freeaddrinfo(found);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rc != 0 || seconds >= 1.0) {
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", seconds);
    result->warning = std::string("warning: this host's name '") + name + "' " +
                      (rc != 0 ? std::string("does not resolve (") + gai_strerror(rc) + ", after " + took + ")"
                               : std::string("took ") + took + " to resolve") +
                      ": Open MPI looks it up at every launch, and where the resolver does not answer at once "
                      "every instance starts that much later; name the host in /etc/hosts (e.g. '127.0.1.1 " +
                      name + "')";
  }
  result->done.store(true);
}

}  // namespace

HostNameCheck::HostNameCheck() : result_(std::make_shared<Lookup>()), lookup_([result = result_] { look_up(result); }) {}

HostNameCheck::~HostNameCheck() {
  if (result_->done.load()) {
    lookup_.join();
    if (!result_->warning.empty()) say(result_->warning);
  } else {
    lookup_.detach();  // the resolver still waits: the job has ended, and so will the lookup with weftrun
  }
}

}  // namespace weftrun
