// The signals weftrun hears, as bytes on a pipe (signal_relay.hpp).
#include "signal_relay.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <initializer_list>

namespace weftrun {
namespace {

int g_signal_pipe[2] = {-1, -1};

// Async-signal-safe: one write, errno kept.
void on_signal(int sig) {
  const int saved = errno;
  const unsigned char c = static_cast<unsigned char>(sig);
  if (::write(g_signal_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

}  // namespace

bool install_signal_relay() {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(s, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}

int signal_relay_fd() { return g_signal_pipe[0]; }

}  // namespace weftrun
