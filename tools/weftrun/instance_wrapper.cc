#include "instance_wrapper.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "core/launcher_protocol.hpp"
#include "core/record_files.hpp"

namespace weftrun {
namespace {

std::string record_path(const char* suffix) {
  const weft::launcher::LaunchEnvironment& launch = weft::launcher::launch_environment();
  if (launch.job_dir.empty() || launch.rank.empty()) return {};
  return weft::launcher::record_path(launch.job_dir, launch.rank, suffix);
}

// Written to a temporary of an unpredictable name (O_EXCL|O_NOFOLLOW) and renamed, so a reader never sees
// half a record and nothing is written through a planted symlink (core/record_files.hpp). A failure (e.g. a
// remote host without the launcher's job directory) means running without records.
void write_record(const char* suffix, const std::string& text) {
  const std::string path = record_path(suffix);
  if (!path.empty()) weft::launcher::write_record(path, text);
}

// A stream straight to weftrun through $WEFT_JOB_DIR/output.sock, or -1 (no such socket here, e.g. another
// host: then PROGRAM keeps the stdout/stderr mpirun gave us, and its lines arrive through --tag-output).
int connect_output(const char* stream) {
  const weft::launcher::LaunchEnvironment& launch = weft::launcher::launch_environment();
  if (launch.job_dir.empty() || launch.rank.empty()) return -1;
  const std::string path = weft::launcher::output_socket_path(launch.job_dir);
  const std::string& rank = launch.rank;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  std::string header = "weftrun-output ";
  header += rank;
  header += ' ';
  header += stream;
  header += '\n';
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      send(fd, header.data(), header.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(header.size())) {
    close(fd);
    return -1;
  }
  shutdown(fd, SHUT_RD);
  return fd;
}

long long unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace

int run_instance_wrapper(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "weftrun: error: %s needs a PROGRAM\n", kWrapperFlag);
    return 2;
  }
  // Signals to forward, and SIGCHLD, are taken synchronously with sigwaitinfo.
  sigset_t wait_set, old_mask;
  sigemptyset(&wait_set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD}) sigaddset(&wait_set, s);
  sigprocmask(SIG_BLOCK, &wait_set, &old_mask);

  // PROGRAM's stdout and stderr go straight to weftrun when they can: mpirun's --tag-output (Open MPI 4.1)
  // drops output when a rank writes many short lines quickly, and cannot tell its tags from look-alike text.
  int out_fd = connect_output("out");
  int err_fd = out_fd < 0 ? -1 : connect_output("err");
  if (err_fd < 0 && out_fd >= 0) {
    close(out_fd);
    out_fd = -1;
  }

  const pid_t self = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "weftrun: error: cannot fork %s: %s\n", argv[2], std::strerror(errno));
    return 126;
  }
  if (child == 0) {
    // If the wrapper dies (SIGKILL from mpirun's cleanup), PROGRAM must not outlive it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self) _exit(137);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (out_fd >= 0) {
      std::fflush(stdout);
      dup2(out_fd, 1);
      dup2(err_fd, 2);
    }
    execvp(argv[2], argv + 2);
    const int e = errno;
    std::fprintf(stderr, "weftrun: error: cannot execute %s: %s\n", argv[2], std::strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }

  if (out_fd >= 0) {
    close(out_fd);
    close(err_fd);
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string launched = std::to_string(child);
  launched += ' ';
  launched += host;
  launched += '\n';
  write_record(weft::launcher::kLaunched, launched);

  int status = 0;
  for (;;) {
    siginfo_t info{};
    const int s = sigwaitinfo(&wait_set, &info);
    if (s < 0) continue;  // EINTR
    if (s == SIGCHLD) {
      const pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) break;
      continue;
    }
    // Open MPI signals a rank's whole process group (its default), and PROGRAM is in ours: a signal from
    // our parent (mpirun / orted) has reached PROGRAM already. Anything else is forwarded.
    if (info.si_code == SI_USER && info.si_pid == getppid()) continue;
    kill(child, s);
  }

  std::string record = std::to_string(unix_ns());
  record += ' ';
  record += std::to_string(child);
  record += WIFSIGNALED(status) ? " signal " : " exit ";
  record += std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  record += '\n';
  write_record(weft::launcher::kExit, record);

  if (WIFSIGNALED(status)) {
    // End by the same signal, without a core file of the wrapper.
    const int sig = WTERMSIG(status);
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, nullptr);
    kill(getpid(), sig);
    _exit(128 + sig);
  }
  return WEXITSTATUS(status);
}

}  // namespace weftrun
