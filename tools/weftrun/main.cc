// weftrun: weft's launcher, in the role PopRun plays for Poplar. It runs PROGRAM as N instances under Open
// MPI's mpirun, each holding R/N of the job's R replicas, tags every output line with its instance, and when
// the job fails says first which instance failed and why (reliability R24). docs/weftrun.md is the manual.
//
//   weftrun [options] [--] PROGRAM [ARGS...]
//
// The command line is parsed in options.cc.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>


#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "core/launcher_protocol.hpp"
#include "instance_wrapper.hpp"
#include "mpirun_report.hpp"
#include "options.hpp"
#include "tagged_output.hpp"

extern char** environ;

namespace {

using namespace weftrun;
using Clock = std::chrono::steady_clock;

constexpr int kUsageError = 2;
constexpr int kTimeoutStatus = 124;
constexpr auto kTermGrace = std::chrono::milliseconds(1500);   // SIGTERM to the job, then SIGKILL
constexpr auto kDrainGrace = std::chrono::milliseconds(2000);  // mpirun gone, its pipes still open
constexpr auto kReapLimit = std::chrono::milliseconds(5000);   // final sweep: wait for the killed
// An instance's line that has no newline yet is handed out in pieces of this size (each with its tag) rather
// than held without limit: a program writing 200 MB without a newline must not make weftrun hold 200 MB.
constexpr std::size_t kMaxLine = std::size_t{1} << 20;

// ---------------------------------------------------------------------------------------------------------
// Small helpers

std::string signal_text(int sig) {
  std::string s = "signal ";
  s += std::to_string(sig);
  const char* name = strsignal(sig);
  if (name) {
    s += " (";
    s += name;
    s += ")";
  }
  return s;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  q += "'";
  return q;
}

// Case-insensitive search, as a lower-cased copy and std::string::find: a per-character std::search with
// tolower made a 1 MiB line cost ~40 ms per word, most of weftrun's time on long lines.
std::string lowered(std::string_view text) {
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Lines that get through --only-output-from-instance: errors, crashes, signals. `lower` is the line
// lower-cased.
bool looks_like_error_lower(const std::string& lower) {
  static constexpr std::string_view words[] = {
      "error",  "terminate called", "what():", "abort",      "signal", "segmentation fault", "killed",
      "fatal",  "core dumped",      "panic",   "sanitizer",  "exception", "traceback"};
  for (std::string_view w : words)
    if (lower.find(w) != std::string::npos) return true;
  return false;
}
bool looks_like_error(const std::string& line) { return looks_like_error_lower(lowered(line)); }

// How telling an error line is, for the summary: the runtime's root cause, then an exception's message, then
// any "error", then the rest; 0 for Open MPI's signal-handler boilerplate ("*** Process received signal ***",
// backtrace frames), which says nothing about the cause.
int error_score(const std::string& line) {
  if (line.find(weft::launcher::kErrorPrefix) != std::string::npos) return 5;
  if (line.find("***") != std::string::npos || line.find("] [") != std::string::npos) return 0;
  if (line.find("what():") != std::string::npos) return 4;
  const std::string lower = lowered(line);
  if (lower.find("error") != std::string::npos) return 3;
  for (std::string_view w : {"terminate called", "exception", "fatal", "panic", "sanitizer", "traceback"})
    if (lower.find(w) != std::string::npos) return 2;
  return looks_like_error_lower(lower) ? 1 : 0;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // errno says why; EPIPE: the reader went away (see Job::output_closed)
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void say(const std::string& line) {
  std::string s = "weftrun: ";
  s += line;
  s += '\n';
  write_all(2, s);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

// ---------------------------------------------------------------------------------------------------------
// Processes of the job

struct ProcInfo {
  pid_t pid = 0, ppid = 0, sid = 0;
  char state = 0;  // 'Z' for a zombie
};

std::vector<ProcInfo> list_processes() {
  std::vector<ProcInfo> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string path = "/proc/";
    path += e->d_name;
    path += "/stat";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // pid (comm) state ppid pgrp session ...   comm may contain spaces and parentheses: parse after the last ')'
    const char* close = std::strrchr(buf, ')');
    if (!close) continue;
    char state = 0;
    int ppid = 0, pgrp = 0, sid = 0;
    if (std::sscanf(close + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4) continue;
    out.push_back({static_cast<pid_t>(std::atoi(e->d_name)), ppid, sid, state});
  }
  closedir(d);
  return out;
}

// Every process of the job: mpirun started its own session, and everything it starts stays in it (Open MPI
// gives each rank its own process group, so a process-group kill would miss them); orphans of the job are
// reparented to weftrun (a child subreaper), wherever they are.
int signal_job(pid_t session, int sig) {
  int n = 0;
  const pid_t self = getpid();
  for (const ProcInfo& p : list_processes()) {
    if (p.pid == self) continue;
    if ((session > 0 && p.sid == session) || p.ppid == self) {
      if (::kill(p.pid, sig) == 0) ++n;
    }
  }
  return n;
}

// Open MPI's session directory of one mpirun: <base>/ompi.<node>.<uid>/pid.<mpirun pid>, with base its
// orte_tmpdir_base (by default $TMPDIR, $TEMP, $TMP or /tmp, in that order). mpirun removes it when it ends
// normally; killed (SIGKILL after the grace, or with weftrun) it cannot, and each killed job would leave one.
// The ompi.<node>.<uid> directory above is shared by the user's jobs: it goes only when empty, as mpirun
// itself does.
std::string mpi_tmpdir_base(const std::vector<std::string>& mpi_args) {
  for (std::size_t i = 0; i + 2 < mpi_args.size(); ++i)
    if ((mpi_args[i] == "--mca" || mpi_args[i] == "-mca") && mpi_args[i + 1] == "orte_tmpdir_base") return mpi_args[i + 2];
  for (const char* name : {"OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "/tmp";
}

void remove_mpi_session_dir(const std::string& base, pid_t mpirun) {
  if (mpirun <= 0) return;
  const std::string uid_suffix = "." + std::to_string(geteuid());
  const std::string pid_dir = "pid." + std::to_string(mpirun);
  DIR* d = opendir(base.c_str());
  if (!d) return;
  std::vector<std::string> tops;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("ompi.", 0) == 0 && name.size() > uid_suffix.size() &&
        name.compare(name.size() - uid_suffix.size(), uid_suffix.size(), uid_suffix) == 0)
      tops.push_back(base + "/" + name);
  }
  closedir(d);
  for (const std::string& top : tops) {
    std::error_code ec;
    if (!std::filesystem::exists(top + "/" + pid_dir, ec)) continue;
    std::filesystem::remove_all(top + "/" + pid_dir, ec);
    rmdir(top.c_str());  // only if no other job uses it
  }
}

// ---------------------------------------------------------------------------------------------------------
// The job

struct Instance {
  // from $WEFT_JOB_DIR
  bool registered = false, launched = false, ended = false;
  long reg_pid = 0, launch_pid = 0;
  std::string reg_host, launch_host;
  long long end_ns = 0;
  int exit_code = 0, exit_signal = 0;
  std::string error_file;  // first line of instance-<i>.error
  // instance-<i>.departed: its program ended and the runtime told the others (docs/weftrun.md)
  bool departed = false;
  // instance-<i>.blame: the instances it failed waiting for, and how ("missing", "departed", "unfinished")
  std::vector<std::pair<std::string, int>> blames;
  bool improper_exit = false;  // mpirun: it exited without MPI_Finalize while the others ran
  // from its output
  long lines = 0;
  std::string first_weft_error;
  std::string error_line;  // its most telling error line (error_score), the first of that score
  int error_line_score = 0;

  bool failed() const { return ended && (exit_signal != 0 || exit_code != 0); }
  // Ended in a way that failed the job: a failure status, or leaving early without finalizing MPI (even
  // with status 0); not a kill after its program had ended (killed with the job it had left).
  bool counts_as_failure() const {
    if (departed && exit_signal != 0) return false;
    return failed() || (ended && improper_exit);
  }
  long pid() const { return registered ? reg_pid : launched ? launch_pid : 0; }
};

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char c = static_cast<unsigned char>(sig);
  if (::write(g_signal_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

class Job {
 public:
  explicit Job(Options o) : o_(std::move(o)), instances_(static_cast<std::size_t>(o_.num_instances)) {}
  int run();

 private:
  bool make_job_dir();
  std::vector<std::string> build_environment();
  std::vector<std::string> build_command(const std::vector<std::string>& exported);
  bool start(const std::vector<std::string>& command, const std::vector<std::string>& env);
  void start_janitor();
  [[noreturn]] void run_janitor(int in, int ack);
  void tell_janitor(const std::string& text);
  void stop_janitor();
  void clean_up_files();
  struct Channel;
  void supervise();
  void feed(Channel& ch, std::string_view data);
  void close_channel(Channel& ch, bool drain);
  bool listen_for_output();
  void on_line(const TaggedLine& line);
  void reap();
  void begin_termination();
  void final_sweep();
  void read_records();
  int finish();
  Instance& instance(int rank);
  std::string who(int rank, long mpirun_pid = 0) const;
  std::string describe_end(int rank) const;
  std::string interpret(const MpirunEvent& e) const;

  Options o_;
  std::vector<Instance> instances_;
  std::string job_dir_;
  std::string mpi_tmpdir_base_;  // where Open MPI puts this job's session directory
  pid_t mpirun_ = -1;
  int janitor_pipe_ = -1;  // to the janitor: closed without a word only if weftrun dies
  int janitor_ack_ = -1;   // from the janitor: end of file once it has gone
  int out_fd_ = -1, err_fd_ = -1;
  int listen_fd_ = -1;  // $WEFT_JOB_DIR/output.sock: the instance wrappers' direct output streams
  bool reaped_ = false;
  int mpirun_status_ = 0;
  Clock::time_point reaped_at_{};
  bool terminating_ = false, killed_ = false, timed_out_ = false;
  int interrupted_ = 0;
  Clock::time_point term_at_{};
  long long term_unix_ns_ = 0;  // when weftrun began killing the job (timeout, signal); 0 if it did not
  std::vector<std::string> mpirun_lines_;
  int root_rank_ = -1;
  std::string root_line_;
  std::string blamed_root_;  // the root cause named from another instance's blame record (finish)
  bool stdout_ok_ = true, stderr_ok_ = true;
  // The reader of our stdout or stderr went away (`weftrun ... | head`): the job ends, as `mpirun | head`
  // does when SIGPIPE kills mpirun, and weftrun exits 128 + SIGPIPE without a summary nobody would read.
  bool output_closed_ = false;
  bool watch_output_[2] = {false, false};  // stdout, stderr: pipes we can poll for a closed reader
  void output_closed(int fd);
  int leftovers_ = 0;
};

Instance& Job::instance(int rank) {
  if (rank >= static_cast<int>(instances_.size())) instances_.resize(static_cast<std::size_t>(rank) + 1);
  return instances_[static_cast<std::size_t>(rank)];
}

bool Job::make_job_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = tmp && *tmp ? tmp : "/tmp";
  tmpl += "/weftrun-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::string m = "cannot create the job directory ";
    m += tmpl;
    m += ": ";
    m += std::strerror(errno);
    say(m);
    return false;
  }
  job_dir_ = buf.data();
  return true;
}

std::vector<std::string> Job::build_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto set = [&](const std::string& name, const std::string& value, bool note) {
    const auto it = env.find(name);
    if (note && it != env.end() && it->second != value) {
      std::string m = "note: ";
      m += name;
      m += "=";
      m += it->second;
      m += " in the environment is replaced by ";
      m += value;
      m += " for this job";
      say(m);
    }
    env[name] = value;
  };
  set(weft::launcher::kNumInstancesVariable, std::to_string(o_.num_instances), true);
  set(weft::launcher::kNumReplicasVariable, std::to_string(o_.num_replicas), true);
  set("WEFT_DEVICE_COUNT", std::to_string(o_.num_replicas / o_.num_instances), true);
  set(weft::launcher::kJobDirVariable, job_dir_, false);
  if (geteuid() == 0) {
    set("OMPI_ALLOW_RUN_AS_ROOT", "1", false);
    set("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", false);
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) {
    std::string kv = k;
    kv += '=';
    kv += v;
    out.push_back(std::move(kv));
  }
  return out;
}

// Whether one process can read another's memory with process_vm_readv (CMA) on this host, tried the way
// Open MPI's shared-memory transport does it: between two sibling processes, the target having allowed any
// tracer (Yama). Both probes are children of ours and end before we return.
bool cma_works() {
  static volatile long marker = 0;
  marker = 0x5eed5eedL;
  int ready[2], done[2];
  if (pipe(ready) != 0) return false;
  if (pipe(done) != 0) {
    close(ready[0]);
    close(ready[1]);
    return false;
  }
  const pid_t target = fork();
  if (target == 0) {
#ifdef PR_SET_PTRACER
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
    char byte = 1;
    [[maybe_unused]] ssize_t w = write(ready[1], &byte, 1);
    [[maybe_unused]] ssize_t r = read(done[0], &byte, 1);  // until the reader is done
    _exit(0);
  }
  char byte = 0;
  bool ok = target > 0 && read(ready[0], &byte, 1) == 1;
  if (ok) {
    const pid_t reader = fork();
    if (reader == 0) {
      long value = 0;
      iovec local{&value, sizeof value}, remote{const_cast<long*>(&marker), sizeof value};
      _exit(process_vm_readv(target, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof value) &&
                    value == 0x5eed5eedL
                ? 0
                : 1);
    }
    int status = 0;
    ok = reader > 0 && waitpid(reader, &status, 0) == reader && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  [[maybe_unused]] ssize_t w = write(done[1], &byte, 1);
  if (target > 0) waitpid(target, nullptr, 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  return ok;
}

std::vector<std::string> Job::build_command(const std::vector<std::string>& env) {
  std::vector<std::string> c = {"mpirun", "-np", std::to_string(o_.num_instances)};
  if (geteuid() == 0) c.emplace_back("--allow-run-as-root");
  // Always: more instances than cores (or than a host's slots) must still start; see docs/weftrun.md.
  c.emplace_back("--oversubscribe");
  c.insert(c.end(), {"--bind-to", "none"});
  // Open MPI 4.1's shared-memory BTL copies large messages with CMA (process_vm_readv), which needs ptrace
  // permission between sibling processes that containers often lack, and then fails mid-job; "none" copies
  // through the shared segment instead. A one-host job uses CMA only when a probe shows it works here.
  if (!o_.hosts.empty() || !o_.hostfile.empty() || !cma_works())
    c.insert(c.end(), {"--mca", "btl_vader_single_copy_mechanism", "none"});
  c.emplace_back("--tag-output");
  if (!o_.hosts.empty()) c.insert(c.end(), {"--host", o_.hosts});
  if (!o_.hostfile.empty()) c.insert(c.end(), {"--hostfile", o_.hostfile});
  for (const std::string& kv : env)
    if (kv.rfind("WEFT_", 0) == 0) c.insert(c.end(), {"-x", kv.substr(0, kv.find('='))});
  c.insert(c.end(), o_.mpi_args.begin(), o_.mpi_args.end());
  c.emplace_back("--");
  if (o_.wrapper) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    c.push_back(ec ? std::string("weftrun") : self.string());
    c.emplace_back(kWrapperFlag);
  }
  c.insert(c.end(), o_.program.begin(), o_.program.end());
  return c;
}

bool Job::start(const std::vector<std::string>& command, const std::vector<std::string>& env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    std::string m = "error: pipe: ";
    m += std::strerror(errno);
    say(m);
    return false;
  }
  std::vector<char*> argv, envp;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  mpirun_ = fork();
  if (mpirun_ < 0) {
    std::string m = "error: fork: ";
    m += std::strerror(errno);
    say(m);
    return false;
  }
  if (mpirun_ == 0) {
    // Its own session: its own process group, away from the terminal's signals (weftrun relays them), and a
    // session id that marks every process of the job.
    setsid();
    // If weftrun itself is killed (SIGKILL: nothing to relay), mpirun still hears of it and ends the job.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(127);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) std::signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    std::fprintf(stderr, "weftrun: error: cannot run mpirun: %s (is Open MPI installed and on PATH?)\n",
                 std::strerror(e));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  return true;
}

void Job::on_line(const TaggedLine& l) {
  if (l.rank < 0) {
    mpirun_lines_.push_back(l.text);
    return;
  }
  Instance& inst = instance(l.rank);
  inst.lines++;
  const bool error_like = looks_like_error(l.text);
  if (l.text.find(weft::launcher::kErrorPrefix) != std::string::npos) {
    if (root_rank_ < 0) {
      root_rank_ = l.rank;
      root_line_ = l.text;
    }
    if (inst.first_weft_error.empty()) inst.first_weft_error = l.text;
  }
  if (error_like) {
    const int score = error_score(l.text);
    if (score > inst.error_line_score) {
      inst.error_line_score = score;
      inst.error_line = l.text.substr(std::min(l.text.size(), l.text.find_first_not_of(" \t")));
    }
  }
  if (o_.only_output_from >= 0 && l.rank != o_.only_output_from && !error_like) return;
  std::string s = "[instance ";
  s += std::to_string(l.rank);
  s += "] ";
  s += l.text;
  s += '\n';
  const int fd = l.stream == Stream::out ? 1 : 2;
  bool& ok = l.stream == Stream::out ? stdout_ok_ : stderr_ok_;
  if (ok && !write_all(fd, s)) {
    ok = false;
    if (errno == EPIPE) output_closed(fd);
  }
}

void Job::output_closed(int fd) {
  if (output_closed_) return;
  output_closed_ = true;
  if (o_.verbose && fd == 1) say("the reader of stdout went away (broken pipe): ending the job");
  begin_termination();
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

// One source of output: one of mpirun's two pipes (tagged lines), or one instance
// stream connected by the instance wrapper (a header line, then the stream's bytes as the program wrote them).
struct Job::Channel {
  enum Kind { mpirun_pipe, instance_stream };
  Kind kind = mpirun_pipe;
  int fd = -1;
  std::unique_ptr<TaggedOutput> tagged;  // mpirun_pipe
  bool have_header = false;             // instance_stream
  std::size_t scanned = 0;              // buf[0, scanned) holds no newline: search only the new bytes
  int rank = -1;
  Stream stream = Stream::out;
  std::string buf;
};

void Job::feed(Channel& ch, std::string_view data) {
  if (ch.kind == Channel::mpirun_pipe) {
    ch.tagged->feed(data);
    return;
  }
  ch.buf.append(data);
  std::size_t from = 0;
  if (!ch.have_header) {
    // "weftrun-output <rank> <out|err>\n"
    const std::size_t nl = ch.buf.find('\n');
    if (nl == std::string::npos) {
      if (ch.buf.size() > 256) ch.buf.clear();  // not a wrapper: ignore it
      return;
    }
    int rank = -1;
    char stream[8] = {};
    if (std::sscanf(ch.buf.c_str(), "weftrun-output %9d %7s", &rank, stream) == 2 && rank >= 0 &&
        rank < o_.num_instances) {
      ch.have_header = true;
      ch.rank = rank;
      ch.stream = std::strcmp(stream, "err") == 0 ? Stream::err : Stream::out;
    }
    from = nl + 1;
  }
  if (!ch.have_header) {
    ch.buf.clear();
    return;
  }
  for (std::size_t nl = ch.buf.find('\n', std::max(from, ch.scanned)); nl != std::string::npos;
       nl = ch.buf.find('\n', from)) {
    on_line({ch.rank, ch.stream, ch.buf.substr(from, nl - from)});
    from = nl + 1;
  }
  // A line without its newline yet: past kMaxLine, out it goes in pieces (memory bounded, and the bytes
  // already searched are never searched again, so a long line costs linear time).
  while (ch.buf.size() - from >= kMaxLine) {
    on_line({ch.rank, ch.stream, ch.buf.substr(from, kMaxLine)});
    from += kMaxLine;
  }
  ch.buf.erase(0, from);
  ch.scanned = ch.buf.size();
}

void Job::close_channel(Channel& ch, bool drain) {
  if (ch.fd < 0) return;
  if (drain) {
    // Whatever is still buffered first.
    fcntl(ch.fd, F_SETFL, fcntl(ch.fd, F_GETFL) | O_NONBLOCK);
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(ch.fd, buf, sizeof buf);
      if (n <= 0) break;
      feed(ch, std::string_view(buf, static_cast<std::size_t>(n)));
    }
  }
  if (ch.kind == Channel::mpirun_pipe) ch.tagged->finish();
  if (ch.kind == Channel::instance_stream && ch.have_header && !ch.buf.empty()) {
    on_line({ch.rank, ch.stream, ch.buf});
    ch.buf.clear();
  }
  close(ch.fd);
  ch.fd = -1;
}

void Job::supervise() {
  std::vector<std::unique_ptr<Channel>> channels;
  for (auto [fd, stream] : {std::pair{out_fd_, Stream::out}, std::pair{err_fd_, Stream::err}}) {
    auto ch = std::make_unique<Channel>();
    ch->kind = Channel::mpirun_pipe;
    ch->fd = fd;
    ch->tagged = std::make_unique<TaggedOutput>(stream, o_.num_instances, [this](const TaggedLine& l) { on_line(l); });
    channels.push_back(std::move(ch));
  }
  out_fd_ = err_fd_ = -1;  // owned by the channels now
  for (int fd : {1, 2}) {
    struct stat st {};
    watch_output_[fd - 1] = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  }
  const auto started = Clock::now();
  const auto deadline =
      started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.timeout_s));
  std::vector<char> buf(1 << 16);

  auto accept_all = [&] {
    for (;;) {
      const int fd = listen_fd_ < 0 ? -1 : accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      auto ch = std::make_unique<Channel>();
      ch->kind = Channel::instance_stream;
      ch->fd = fd;
      channels.push_back(std::move(ch));
    }
  };
  auto open_streams = [&] {
    for (const auto& ch : channels)
      if (ch->fd >= 0) return true;
    return false;
  };

  for (;;) {
    if (reaped_) {
      // mpirun is gone, so is every wrapper: no new connections.
      if (listen_fd_ >= 0) {
        accept_all();
        close(listen_fd_);
        listen_fd_ = -1;
      }
      if (!open_streams()) break;
    }
    const auto now = Clock::now();
    // Deadlines.
    if (o_.timeout_s > 0 && !terminating_ && now >= deadline) {
      timed_out_ = true;
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", o_.timeout_s);
      std::string m = "error: timeout: the job did not finish within --timeout ";
      m += secs;
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
      for (auto& ch : channels) close_channel(*ch, true);
      break;
    }
    Clock::time_point next = now + std::chrono::seconds(1);
    if (o_.timeout_s > 0 && !terminating_) next = std::min(next, deadline);
    if (terminating_ && !killed_) next = std::min(next, term_at_ + kTermGrace);
    if (reaped_) next = std::min(next, reaped_at_ + kDrainGrace);
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
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
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      const ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof sigs);
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
    reap();
    for (std::size_t k = 0; k + 2 < watched_outputs; ++k) {
      Channel& ch = *channels[k];
      if (ch.fd < 0 || !(fds[k + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(ch.fd, buf.data(), buf.size());
      if (n > 0) {
        feed(ch, std::string_view(buf.data(), static_cast<std::size_t>(n)));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close_channel(ch, false);
      }
    }
    if (fds[1].revents & POLLIN) accept_all();
    for (std::size_t k = watched_outputs; k < fds.size(); ++k)
      if (fds[k].revents & POLLERR) output_closed(fds[k].fd);
    std::erase_if(channels, [](const std::unique_ptr<Channel>& ch) { return ch->fd < 0; });
  }
  for (auto& ch : channels) close_channel(*ch, true);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

bool Job::listen_for_output() {
  const std::string path = weft::launcher::output_socket_path(job_dir_);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;  // a long $TMPDIR: output goes through mpirun
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4096) != 0) {
    close(fd);
    return false;
  }
  listen_fd_ = fd;
  return true;
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

void Job::read_records() {
  for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
    Instance& inst = instances_[static_cast<std::size_t>(i)];
    auto record = [&](const char* suffix) { return read_file(weft::launcher::record_path(job_dir_, i, suffix)); };
    if (const auto t = record(weft::launcher::kRegistered)) {
      inst.registered = true;
      char host[256] = {};
      long pid = 0;
      if (std::sscanf(t->c_str(), "%ld %255s", &pid, host) >= 1) {
        inst.reg_pid = pid;
        inst.reg_host = host;
      }
    }
    if (const auto t = record(weft::launcher::kLaunched)) {
      char host[256] = {};
      long pid = 0;
      if (std::sscanf(t->c_str(), "%ld %255s", &pid, host) >= 1) {
        inst.launched = true;
        inst.launch_pid = pid;
        inst.launch_host = host;
      }
    }
    if (const auto t = record(weft::launcher::kExit)) {
      long long ns = 0;
      long pid = 0;
      char kind[16] = {};
      int value = 0;
      if (std::sscanf(t->c_str(), "%lld %ld %15s %d", &ns, &pid, kind, &value) == 4) {
        inst.ended = true;
        inst.end_ns = ns;
        if (std::strcmp(kind, "signal") == 0)
          inst.exit_signal = value;
        else
          inst.exit_code = value;
      }
    }
    if (const auto t = record(weft::launcher::kError)) inst.error_file = first_line(*t);
    if (record(weft::launcher::kDeparted)) inst.departed = true;
    if (const auto t = record(weft::launcher::kBlame)) {
      std::istringstream in(*t);
      std::string kind;
      int who = -1;
      while (in >> kind >> who)
        if (who >= 0 && who < static_cast<int>(instances_.size()) && who != i) inst.blames.emplace_back(kind, who);
    }
  }
}

std::string Job::who(int rank, long mpirun_pid) const {
  std::string s = "instance ";
  s += std::to_string(rank);
  long pid = rank >= 0 && rank < static_cast<int>(instances_.size())
                 ? instances_[static_cast<std::size_t>(rank)].pid()
                 : 0;
  if (pid == 0) pid = mpirun_pid;  // Open MPI 4.1 says "PID 0" for local ranks
  if (pid > 0) {
    s += " (pid ";
    s += std::to_string(pid);
    s += ")";
  }
  return s;
}

std::string Job::describe_end(int rank) const {
  const Instance& inst = instances_[static_cast<std::size_t>(rank)];
  std::string s;
  if (inst.improper_exit && !inst.failed()) {
    s = "left the job: it exited with status 0 without finalizing MPI while the other instances were still "
        "running (_exit, or a program that never ends the weft runtime)";
  } else if (inst.exit_signal) {
    s = "was killed by ";
    s += signal_text(inst.exit_signal);
  } else {
    s = "exited with status ";
    s += std::to_string(inst.exit_code);
  }
  return s;
}

std::string Job::interpret(const MpirunEvent& e) const {
  std::string s;
  const bool known = e.rank >= 0 && e.rank < o_.num_instances;
  switch (e.kind) {
    case MpirunEvent::signal:
      s = who(e.rank, e.pid);
      s += " was killed by signal ";
      s += std::to_string(e.value);
      if (!e.signal_name.empty()) {
        s += " (";
        s += e.signal_name;
        s += ")";
      }
      break;
    case MpirunEvent::exit_code:
      s = who(e.rank, e.pid);
      s += " was the first to exit with a non-zero status (";
      s += std::to_string(e.value);
      s += ")";
      break;
    case MpirunEvent::improper_exit:
      s = who(e.rank, e.pid);
      s += " exited without MPI_Finalize after MPI_Init (or never called MPI_Init while the others did)";
      break;
    case MpirunEvent::mpi_abort:
      s = who(e.rank, e.pid);
      s += " called MPI_Abort on ";
      s += e.node;
      s += " with error code ";
      s += std::to_string(e.value);
      break;
    case MpirunEvent::aborted_job:
      s = std::to_string(e.value);
      s += e.value == 1 ? " process" : " processes";
      s += " returned a non-zero exit code, so mpirun aborted the job";
      return s;
  }
  if (known) {
    s += "; it held ";
    s += replicas_of(e.rank, o_);
  }
  return s;
}

int Job::finish() {
  read_records();
  if (output_closed_) return 128 + SIGPIPE;  // the summary's reader is gone (see output_closed)
  const MpirunReport report = parse_mpirun_report(mpirun_lines_);
  const int n = static_cast<int>(instances_.size());
  for (const MpirunEvent& e : report.events)
    if (e.kind == MpirunEvent::improper_exit && e.rank >= 0 && e.rank < n)
      instances_[static_cast<std::size_t>(e.rank)].improper_exit = true;

  // The first instance to end in failure, by the wrapper's clock (not counting those weftrun killed).
  int first_failed = -1;
  bool any_failed = false;
  for (int i = 0; i < n; ++i) {
    const Instance& inst = instances_[static_cast<std::size_t>(i)];
    any_failed = any_failed || inst.failed();
    if (inst.counts_as_failure() && (term_unix_ns_ == 0 || inst.end_ns < term_unix_ns_) &&
        (first_failed < 0 || inst.end_ns < instances_[static_cast<std::size_t>(first_failed)].end_ns))
      first_failed = i;
  }
  const bool mpirun_ok = reaped_ && WIFEXITED(mpirun_status_) && WEXITSTATUS(mpirun_status_) == 0;
  const bool failed = timed_out_ || interrupted_ || !mpirun_ok || any_failed;

  if (!failed) {
    // A clean run: mpirun's own words, if any (warnings), verbatim; nothing else.
    for (const std::string& l : mpirun_lines_) {
      std::string s = l;
      s += '\n';
      write_all(2, s);
    }
    if (o_.verbose && leftovers_) {
      std::string m = "killed ";
      m += std::to_string(leftovers_);
      m += " leftover process(es) of the job";
      say(m);
    }
    return 0;
  }

  // Exit status.
  int status = 1;
  if (timed_out_) {
    status = kTimeoutStatus;
  } else if (interrupted_) {
    status = 128 + interrupted_;
  } else if (first_failed >= 0) {
    const Instance& inst = instances_[static_cast<std::size_t>(first_failed)];
    status = inst.exit_signal ? 128 + inst.exit_signal : inst.exit_code;
  } else {
    bool set = false;
    for (const MpirunEvent& e : report.events) {
      if (e.kind == MpirunEvent::exit_code && e.value > 0) {
        status = e.value & 0xff;
        set = true;
        break;
      }
      if (e.kind == MpirunEvent::signal) {
        status = 128 + e.value;
        set = true;
        break;
      }
    }
    if (!set && reaped_) {
      if (WIFEXITED(mpirun_status_) && WEXITSTATUS(mpirun_status_) != 0) status = WEXITSTATUS(mpirun_status_);
      if (WIFSIGNALED(mpirun_status_)) status = 128 + WTERMSIG(mpirun_status_);
    }
  }
  if (status == 0) status = 1;

  // The root cause first: the earliest "weft: error:" line of any instance (from its output, else from the
  // instance-<i>.error files), with the instance and its replicas.
  int root = root_rank_;
  std::string root_text = root_line_;
  if (root < 0) {
    long long best = 0;
    for (int i = 0; i < n; ++i) {
      const Instance& inst = instances_[static_cast<std::size_t>(i)];
      if (inst.error_file.empty()) continue;
      struct stat st {};
      const std::string path = weft::launcher::record_path(job_dir_, i, weft::launcher::kError);
      const long long t =
          stat(path.c_str(), &st) == 0 ? st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec : 0;
      if (root < 0 || t < best) {
        root = i;
        best = t;
        root_text = weft::launcher::kErrorPrefix;
        root_text += inst.error_file;
      }
    }
  }
  // An instance that failed only because it waited for others (a collective they never reached, a member
  // that left the job, the end of its program while they still ran) names them (instance-<i>.blame): the
  // root cause is theirs. One of them that reported its own error has the precise cause (the stuck replica);
  // otherwise the blamed instance is named, with what the waiting one reported.
  if (root >= 0 && !instances_[static_cast<std::size_t>(root)].blames.empty()) {
    const Instance& waiting = instances_[static_cast<std::size_t>(root)];
    int culprit = -1;
    std::string culprit_text;
    for (const auto& [kind, k] : waiting.blames) {
      const Instance& b = instances_[static_cast<std::size_t>(k)];
      if (!b.first_weft_error.empty())
        culprit_text = b.first_weft_error;
      else if (!b.error_file.empty())
        culprit_text = std::string(weft::launcher::kErrorPrefix) + b.error_file;
      if (!culprit_text.empty() && b.blames.empty()) {
        culprit = k;
        break;
      }
      culprit_text.clear();
    }
    if (culprit >= 0) {
      root = culprit;
      root_text = culprit_text;
    } else {
      const auto& [kind, k] = waiting.blames.front();
      std::string m = "instance " + std::to_string(k) + " (" + replicas_of(k, o_) + ") ";
      if (kind == "departed")
        m += "left the job (its program ended: it returned from main or called exit) while instance " +
             std::to_string(root) + " waited for it in a collective";
      else if (kind == "unfinished")
        m += "did not end while instance " + std::to_string(root) +
             ", whose program had ended, waited for it (WEFT_COLLECTIVE_TIMEOUT)";
      else
        m += "never reached the collective instance " + std::to_string(root) +
             " waited in (stuck, stopped or too slow; WEFT_COLLECTIVE_TIMEOUT)";
      m += "; instance " + std::to_string(root) + " reported: " + root_text;
      blamed_root_ = m;
      root = k;
    }
  }
  std::vector<std::string> lines;
  bool first_failed_said = false;
  if (timed_out_) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", o_.timeout_s);
    std::string m = "error: timeout: the job was killed after --timeout ";
    m += secs;
    m += " s (exit status 124)";
    lines.push_back(m);
    if (!blamed_root_.empty()) {
      lines.push_back("before that, the root cause: " + blamed_root_);
    } else if (root >= 0) {
      std::string r = "before that, the root cause from instance ";
      r += std::to_string(root);
      r += " (";
      r += replicas_of(root, o_);
      r += "): ";
      r += root_text;
      lines.push_back(r);
    }
  } else if (interrupted_) {
    std::string m = "error: the job was killed because weftrun received ";
    m += signal_text(interrupted_);
    lines.push_back(m);
  } else if (!blamed_root_.empty()) {
    lines.push_back("error: root cause: " + blamed_root_);
  } else if (root >= 0) {
    std::string m = "error: root cause, from instance ";
    m += std::to_string(root);
    m += " (";
    m += replicas_of(root, o_);
    m += "): ";
    m += root_text;
    lines.push_back(m);
  } else if (first_failed >= 0) {
    std::string m = "error: ";
    m += who(first_failed);
    m += " ";
    m += describe_end(first_failed);
    m += "; it held ";
    m += replicas_of(first_failed, o_);
    const Instance& inst = instances_[static_cast<std::size_t>(first_failed)];
    if (!inst.error_line.empty()) {
      m += "; it printed: ";
      m += inst.error_line;
    }
    lines.push_back(m);
    first_failed_said = true;
  } else {
    const MpirunEvent* e = nullptr;
    for (const MpirunEvent& ev : report.events)
      if (ev.kind != MpirunEvent::aborted_job) {
        e = &ev;
        break;
      }
    std::string m = "error: ";
    if (e) {
      m += interpret(*e);
    } else {
      m += "the job failed: mpirun ";
      if (!reaped_)
        m += "did not end";
      else if (WIFSIGNALED(mpirun_status_)) {
        m += "was killed by ";
        m += signal_text(WTERMSIG(mpirun_status_));
      } else {
        m += "exited with status ";
        m += std::to_string(WEXITSTATUS(mpirun_status_));
      }
      if (!report.other_lines.empty()) {
        m += ": ";
        m += report.other_lines.front();
      }
    }
    lines.push_back(m);
  }
  if (first_failed >= 0 && !first_failed_said) {
    std::string m = "the first instance to fail: ";
    m += who(first_failed);
    m += " ";
    m += describe_end(first_failed);
    m += "; it held ";
    m += replicas_of(first_failed, o_);
    lines.push_back(m);
  }
  // What mpirun reported.
  for (const MpirunEvent& e : report.events) {
    std::string m = "mpirun reported: ";
    m += interpret(e);
    lines.push_back(m);
  }
  for (const std::string& l : report.other_lines) {
    std::string m = "mpirun: ";
    m += l;
    lines.push_back(m);
  }
  // Every instance's state.
  lines.emplace_back("instances:");
  for (int i = 0; i < n; ++i) {
    const Instance& inst = instances_[static_cast<std::size_t>(i)];
    std::string m = "  instance ";
    m += std::to_string(i);
    m += " (";
    m += replicas_of(i, o_);
    m += "): ";
    if (inst.registered) {
      m += "registered (pid ";
      m += std::to_string(inst.reg_pid);
      m += " on ";
      m += inst.reg_host;
      m += ")";
    } else {
      m += "never started (no instance-";
      m += std::to_string(i);
      m += weft::launcher::kRegistered;
      if (inst.launched) {
        m += "; launched as pid ";
        m += std::to_string(inst.launch_pid);
        m += " on ";
        m += inst.launch_host;
      } else if (o_.wrapper) {
        m += "; its process was never launched";
      }
      m += ")";
    }
    if (inst.departed) m += "; its program ended (it left the job)";
    if (inst.ended) {
      m += "; ";
      if (inst.improper_exit && !inst.failed()) {
        m += "exited with status 0 without finalizing MPI (it left the job)";
      } else if (inst.exit_signal) {
        m += "killed by ";
        m += signal_text(inst.exit_signal);
      } else {
        m += "exited with status ";
        m += std::to_string(inst.exit_code);
      }
      if (i == first_failed) m += " (first to fail)";
    } else {
      bool said = false;
      for (const MpirunEvent& e : report.events)
        if (e.rank == i && e.kind == MpirunEvent::signal) {
          m += "; killed by signal ";
          m += std::to_string(e.value);
          said = true;
          break;
        }
      if (!said && inst.launched) m += "; killed with the job (no exit record)";
    }
    if (!inst.error_file.empty()) {
      m += "; error: ";
      m += inst.error_file;
    } else if (!inst.first_weft_error.empty()) {
      m += "; error: ";
      m += inst.first_weft_error;
    } else if (!inst.error_line.empty()) {
      m += "; it printed: ";
      m += inst.error_line;
    }
    lines.push_back(m);
  }
  for (const std::string& l : lines) say(l);
  return status;
}

int Job::run() {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    say("error: cannot create a pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(s, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  if (!make_job_dir()) return 1;
  mpi_tmpdir_base_ = mpi_tmpdir_base(o_.mpi_args);
  // Before becoming a subreaper: the janitor must be nobody's descendant (see start_janitor).
  start_janitor();
  // Orphans of the job become our children, so we can kill and reap them at the end.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  if (o_.wrapper) listen_for_output();
  const std::vector<std::string> env = build_environment();
  const std::vector<std::string> command = build_command(env);
  if (o_.verbose >= 1) {
    std::string m;
    for (const std::string& a : command) {
      if (!m.empty()) m += ' ';
      m += shell_quote(a);
    }
    say(m);
  }
  if (o_.verbose >= 2) {
    say("environment passed to every instance (-x):");
    for (const std::string& kv : env)
      if (kv.rfind("WEFT_", 0) == 0) {
        std::string m = "  ";
        m += kv;
        say(m);
      }
    if (geteuid() == 0) say("mpirun's own environment also has OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  int status = 1;
  if (start(command, env)) {
    tell_janitor("m" + std::to_string(mpirun_) + ";");
    supervise();
    final_sweep();
    status = finish();
  }
  clean_up_files();
  stop_janitor();
  return status;
}

void Job::clean_up_files() {
  std::error_code ec;
  std::filesystem::remove_all(job_dir_, ec);
  remove_mpi_session_dir(mpi_tmpdir_base_, mpirun_);
}

// The janitor: a process outside the job that outlives weftrun. weftrun killed with SIGKILL cannot clean
// up; mpirun then gets SIGTERM (PR_SET_PDEATHSIG) and aborts the job, but the job directory and, if mpirun
// dies too, Open MPI's session directory would stay. The janitor waits on a pipe only weftrun holds, which
// tells it mpirun's pid, then "q" once weftrun has cleaned up itself; end of file without "q" means weftrun
// died, and the janitor ends what is left of the job (SIGKILL after kTermGrace) and removes both directories.
// It is a grandchild that weftrun's child leaves an orphan before weftrun becomes a subreaper: whoever kills
// weftrun's process tree by walking parent links (CMake's execute_process and ctest on a timeout) must not
// find it.
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

void Job::run_janitor(int in, int ack) {
  // Away from the terminal's signals (weftrun relays those), holding none of weftrun's descriptors: an
  // inherited stdout would keep `weftrun | head` waiting for it.
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

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], kWrapperFlag) == 0) return run_instance_wrapper(argc, argv);
  Options options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "weftrun: error: %s\nweftrun: run 'weftrun --help' for the options\n", e.what());
    return kUsageError;
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  for (const std::string& note : options.notes) std::fprintf(stderr, "weftrun: note: %s\n", note.c_str());
  Job job(std::move(options));
  return job.run();
}
