// The host's own name, looked up as Open MPI looks it up at every launch. Where the name is neither in
// /etc/hosts nor answered by DNS at once (a minimal Debian or a container), each launch waits for the
// resolver (about 5 s here), which looks like a slow or stuck job and breaks time bounds that count from the
// launch. weftrun looks the name up beside the launch (a thread: the launch does not wait for it) and, when
// the lookup fails or takes a second or more, says so with the fix.
#pragma once
#include <memory>
#include <thread>

namespace weftrun {

class HostNameCheck {
 public:
  HostNameCheck();   // starts the lookup
  ~HostNameCheck();  // says what it found if it has finished (the job does not wait for a lookup still going)
  HostNameCheck(const HostNameCheck&) = delete;
  HostNameCheck& operator=(const HostNameCheck&) = delete;
  struct Lookup;  // the lookup's result

 private:
  std::shared_ptr<Lookup> result_;  // shared with the lookup thread, which may outlive the check
  std::thread lookup_;
};

}  // namespace weftrun
