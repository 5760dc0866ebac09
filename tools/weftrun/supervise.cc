// Watching the job (job.hpp): one poll loop over the job's output, the signals weftrun receives and the
// deadlines (--timeout; the grace between SIGTERM and SIGKILL; how long mpirun's streams may stay open once it
// has ended), until mpirun has ended and its output is drained; then the final sweep, which kills and reaps
// whatever of the job is left, so that nothing of it outlives weftrun.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <thread>

#include "job.hpp"
#include "output_channel.hpp"
#include "processes.hpp"
#include "signal_relay.hpp"
#include "text.hpp"

namespace weftrun {

void Job::supervise() {
  OutputChannels channels = open_mpirun_channels();
  const auto started = Clock::now();
  const auto deadline =
      started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.timeout_s));
  std::vector<char> buf(1 << 16);
  auto open_streams = [&] {
    for (const auto& ch : channels)
      if (ch->fd >= 0) return true;
    return false;
  };

  for (;;) {
    if (reaped_) {
      stop_listening(channels);
      if (!open_streams()) break;
    }
    const auto now = Clock::now();
    if (!enforce_deadlines(now, deadline)) {
      for (auto& ch : channels) close_channel(*ch, true);
      break;
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_wakeup(now, deadline) - now).count();

    std::vector<pollfd> fds;
    fds.push_back({signal_relay_fd(), POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& ch : channels) fds.push_back({ch->fd, POLLIN, 0});
    // Our own stdout and stderr, when they are pipes: POLLERR says the reader closed its end, even while the
    // instances are silent (no write to fail with EPIPE).
    const std::size_t watched_outputs = fds.size();
    for (int fd : {1, 2})
      if (watch_output_[fd - 1] && !output_closed_) fds.push_back({fd, 0, 0});
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait_ms + 1, 0, 1000)));
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & POLLIN) relay_signals();
    reap();
    read_ready_channels(channels, fds, watched_outputs, buf);
    if (fds[1].revents & POLLIN) accept_instance_streams(channels);
    for (std::size_t k = watched_outputs; k < fds.size(); ++k)
      if (fds[k].revents & POLLERR) output_closed(fds[k].fd);
    std::erase_if(channels, [](const std::unique_ptr<OutputChannel>& ch) { return ch->fd < 0; });
  }
  for (auto& ch : channels) close_channel(*ch, true);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

// The deadlines that have passed: --timeout kills the job, the grace after that ends in SIGKILL, and a job
// whose mpirun has ended but whose streams stay open past kDrainGrace is killed and no longer waited for
// (false: supervision stops).
bool Job::enforce_deadlines(Clock::time_point now, Clock::time_point deadline) {
  if (o_.timeout_s > 0 && !terminating_ && now >= deadline) {
    timed_out_ = true;
    std::string m = "error: timeout: the job did not finish within --timeout ";
    m += timeout_seconds();
    m += " s; killing every process of the job";
    say(m);
    begin_termination();
  }
  if (terminating_ && !killed_ && now >= term_at_ + kTermGrace) {
    killed_ = true;
    signal_job(mpirun_, SIGKILL);
  }
  if (reaped_ && now >= reaped_at_ + kDrainGrace) {
    // Something of the job still holds an output stream open: it goes, and so does waiting for it.
    signal_job(mpirun_, SIGKILL);
    return false;
  }
  return true;
}

// When the loop must next wake without any event: the next deadline, and at most a second from now.
Clock::time_point Job::next_wakeup(Clock::time_point now, Clock::time_point deadline) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  if (o_.timeout_s > 0 && !terminating_) next = std::min(next, deadline);
  if (terminating_ && !killed_) next = std::min(next, term_at_ + kTermGrace);
  if (reaped_) next = std::min(next, reaped_at_ + kDrainGrace);
  return next;
}

// The signals weftrun received: the first ends the job (SIGTERM, then SIGKILL after the grace); a second one
// skips the grace. SIGCHLD only wakes the loop, which reaps.
void Job::relay_signals() {
  unsigned char sigs[64];
  const ssize_t n = ::read(signal_relay_fd(), sigs, sizeof sigs);
  for (ssize_t k = 0; k < n; ++k) {
    const int s = sigs[k];
    if (s == SIGCHLD) continue;  // reaped below
    if (!interrupted_ && !timed_out_) {
      interrupted_ = s;
      std::string m = "error: interrupted by ";
      m += signal_text(s);
      m += "; killing every process of the job";
      say(m);
      begin_termination();
    } else if (!killed_) {
      killed_ = true;  // a second signal: no more grace
      signal_job(mpirun_, SIGKILL);
    }
  }
}

// The channels the poll found readable (fds[2, end) are the channels, in order): their new bytes, or their end.
void Job::read_ready_channels(OutputChannels& channels, const std::vector<pollfd>& fds, std::size_t end,
                              std::vector<char>& buf) {
  for (std::size_t k = 0; k + 2 < end; ++k) {
    OutputChannel& ch = *channels[k];
    if (ch.fd < 0 || !(fds[k + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = ::read(ch.fd, buf.data(), buf.size());
    if (n > 0) {
      feed(ch, std::string_view(buf.data(), static_cast<std::size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_channel(ch, false);
    }
  }
}

void Job::reap() {
  for (;;) {
    int status = 0;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p <= 0) return;
    if (p == mpirun_) {
      reaped_ = true;
      mpirun_status_ = status;
      reaped_at_ = Clock::now();
    }
  }
}

void Job::begin_termination() {
  if (terminating_) return;
  terminating_ = true;
  term_at_ = Clock::now();
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  term_unix_ns_ = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  // SIGTERM to mpirun, which relays it once to every rank's process group (signalling them ourselves as well
  // would deliver it twice); whatever is left after kTermGrace gets SIGKILL from us.
  if (!reaped_)
    ::kill(mpirun_, SIGTERM);
  else
    signal_job(mpirun_, SIGTERM);
}

void Job::final_sweep() {
  // Nothing of the job outlives weftrun: whatever is left in mpirun's session, or reparented to us, is killed
  // and waited for.
  const auto until = Clock::now() + kReapLimit;
  bool first = true;
  for (;;) {
    const int n = signal_job(mpirun_, SIGKILL);
    if (first) leftovers_ = n;
    first = false;
    reap();
    int status = 0;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    // n counts every process of the session and every child of ours, zombies included: 0 means everything
    // of the job is gone and reaped.
    if (n == 0) return;
    if (Clock::now() >= until) {
      say("warning: some processes of the job could not be reaped");
      return;
    }
    if (p <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace weftrun
