// The janitor (job.hpp): a process outside the job that outlives weftrun. weftrun killed with SIGKILL cannot
// clean up; mpirun then gets SIGTERM (PR_SET_PDEATHSIG) and aborts the job, but the job directory and, if
// mpirun dies too, Open MPI's session directory would stay. The janitor waits on a pipe only weftrun holds,
// which tells it mpirun's pid, then "q" once weftrun has cleaned up itself; end of file without "q" means
// weftrun died, and the janitor ends what is left of the job (SIGKILL after kTermGrace) and removes both
// directories. It is a grandchild that weftrun's child leaves an orphan before weftrun becomes a subreaper:
// whoever kills weftrun's process tree by walking parent links (CMake's execute_process and ctest on a
// timeout) must not find it.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <thread>

#include "job.hpp"
#include "processes.hpp"

namespace weftrun {

// What weftrun leaves on disk: the job directory and Open MPI's session directory of the job. Called by
// weftrun at the end, or by the janitor when weftrun could not.
void Job::clean_up_files() {
  std::error_code ec;
  std::filesystem::remove_all(job_dir_, ec);
  remove_mpi_session_dir(mpi_tmpdir_base_, mpirun_);
}

void Job::start_janitor() {
  int to[2], ack[2];
  if (pipe2(to, O_CLOEXEC) != 0) return;
  if (pipe2(ack, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    return;
  }
  const pid_t middle = fork();
  if (middle == 0) {
    if (fork() == 0) run_janitor(to[0], ack[1]);
    _exit(0);
  }
  close(to[0]);
  close(ack[1]);
  if (middle < 0) {
    close(to[1]);
    close(ack[0]);
    return;
  }
  waitpid(middle, nullptr, 0);
  janitor_pipe_ = to[1];
  janitor_ack_ = ack[0];
}

namespace {

// Away from the terminal's signals (weftrun relays those), holding none of weftrun's descriptors but `in`
// and `ack`: an inherited stdout would keep `weftrun | head` waiting for it.
void detach_janitor(int in, int ack) {
  setsid();
  prctl(PR_SET_NAME, "weftrun-janitor");
  for (int s : {SIGINT, SIGHUP, SIGPIPE}) std::signal(s, SIG_IGN);
  for (int s : {SIGTERM, SIGCHLD}) std::signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2; ++fd) dup2(null, fd);
  if (DIR* d = opendir("/proc/self/fd")) {
    std::vector<int> open_fds;
    while (dirent* e = readdir(d))
      if (std::isdigit(static_cast<unsigned char>(e->d_name[0]))) open_fds.push_back(std::atoi(e->d_name));
    closedir(d);
    for (int fd : open_fds)
      if (fd > 2 && fd != in && fd != ack) close(fd);
  }
}

}  // namespace

void Job::run_janitor(int in, int ack) {
  detach_janitor(in, ack);
  // "m<pid>;" gives mpirun's pid; "q" says weftrun cleaned up; end of file without it, that weftrun died.
  mpirun_ = -1;
  std::string said;
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
    if (said.find('q') != std::string::npos) _exit(0);
  }
  if (const std::size_t m = said.find('m'); m != std::string::npos) mpirun_ = std::atoi(said.c_str() + m + 1);
  // Give mpirun the grace weftrun would have given it, then kill what is left of its session.
  auto alive = [this] {
    for (const ProcInfo& p : list_processes())
      if (mpirun_ > 0 && p.sid == mpirun_ && p.state != 'Z') return true;
    return false;
  };
  const auto until = Clock::now() + kTermGrace;
  while (alive() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto kill_until = Clock::now() + kReapLimit;
  while (alive() && Clock::now() < kill_until) {
    for (const ProcInfo& p : list_processes())
      if (p.sid == mpirun_) ::kill(p.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  clean_up_files();
  _exit(0);
}

void Job::tell_janitor(const std::string& text) {
  if (janitor_pipe_ < 0) return;
  [[maybe_unused]] ssize_t w = ::write(janitor_pipe_, text.data(), text.size());
}

// weftrun has cleaned up: the janitor goes, and weftrun returns only once it has (its ack pipe closes).
void Job::stop_janitor() {
  if (janitor_pipe_ < 0) return;
  tell_janitor("q");
  close(janitor_pipe_);
  janitor_pipe_ = -1;
  pollfd p{janitor_ack_, POLLIN, 0};
  char byte;
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until && ::poll(&p, 1, 100) >= 0)
    if ((p.revents & (POLLIN | POLLHUP)) && ::read(janitor_ack_, &byte, 1) <= 0) break;
  close(janitor_ack_);
  janitor_ack_ = -1;
}

}  // namespace weftrun
