// Starting the job (job.hpp): its directory ($WEFT_JOB_DIR, where instances leave their records), the
// environment every instance gets (the WEFT_ variables weftrun sets, exported with -x), mpirun's command
// line, and mpirun itself, in a session of its own that marks every process of the job.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/launcher_protocol.hpp"
#include "instance_wrapper.hpp"
#include "job.hpp"
#include "text.hpp"

extern char** environ;

namespace weftrun {
namespace {

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

}  // namespace

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

// -v: mpirun's command line, quoted for a shell; -vv: also the environment passed to every instance.
void Job::say_command(const std::vector<std::string>& command, const std::vector<std::string>& env) const {
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

}  // namespace weftrun
