// The fault soak (issue 8, item 15; docs/reliability.md "Fault injection"): random WEFT_FAULT plans on the
// generic fault program (tests/mpi/fault_program.cc), run many times, in one process (4 replicas) and under
// weftrun (2 instances x 2 replicas). For every run it checks what a user relies on after any fault:
//   - the run ends (non-zero, or killed by the injected signal) within the fault's bound;
//   - the first error names the right root cause: the replica or instance the plan chose, and how it failed;
//   - nothing is left behind: no process of the run (instances, mpirun, orted, weftrun's janitor: every
//     process that carries the run's private TMPDIR in its environment) and no file in that TMPDIR (weftrun's
//     job directory, Open MPI's session directory).
// The plans come from a seeded generator; the seed is printed, and WEFT_SOAK_SEED=S reruns the same plans
// (WEFT_SOAK_INPROC / WEFT_SOAK_WEFTRUN set the number of runs, default 20 and 5; WEFT_SOAK_ACTIONS=kill,exit
// draws only those actions: WEFT_SOAK_ACTIONS=kill WEFT_SOAK_WEFTRUN=20 is reliability R6's 20 kills in a row).
//
// Runs are child processes (fork/exec, signals, _exit): not an `inproc` test, and not run under TSan.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/replica_faults.hpp"

extern char** environ;

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

// ---- running a child with a deadline -----------------------------------------------------------------------

struct Run {
  int exit_status = -1;  // when it exited
  int signal = 0;        // when a signal ended it
  bool overran = false;  // still running at the bound: killed by the soak
  double seconds = 0;
  std::string output;    // stdout and stderr, interleaved
};

// Runs argv with `env` added to (and overriding) this process's environment, in its own process group;
// output to one pipe. At `bound_s` the group gets SIGTERM, 5 s later SIGKILL (weftrun ends its own session
// on SIGTERM). Every wait here has that deadline.
Run Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, double bound_s) {
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = name.rfind("WEFT_", 0) == 0;  // only the run's own settings
    for (const std::string& mine : env) overridden = overridden || mine.substr(0, mine.find('=')) == name;
    if (!overridden) environment.push_back(entry);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const auto start = Clock::now();
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }

  Run run;
  bool reaped = false, eof = false, termed = false;
  while (!reaped || !eof) {
    const double now = SecondsSince(start);
    if (!reaped && now > bound_s && !termed) {
      run.overran = true;
      termed = true;
      ::kill(-pid, SIGTERM);
    }
    if (now > bound_s + 5) {
      ::kill(-pid, SIGKILL);
      if (now > bound_s + 10) break;  // a grandchild keeps the pipe open: the leftover check names it
    }
    if (!eof) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n > 0) run.output.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || errno != EINTR) eof = true;
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!reaped) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        run.seconds = SecondsSince(start);
        if (WIFEXITED(status)) run.exit_status = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
      }
    }
  }
  ::close(fds[0]);
  if (!reaped) {
    int status = 0;
    ::waitpid(pid, &status, 0);  // SIGKILLed above
    run.seconds = SecondsSince(start);
  }
  return run;
}

// ---- leftovers -----------------------------------------------------------------------------------------------

// Processes (pid and command line) whose environment holds `marker` (TMPDIR=<the run's own directory>).
std::vector<std::string> ProcessesMarked(const std::string& marker) {
  std::vector<std::string> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* d = ::readdir(proc)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + d->d_name;
    std::ifstream environ_file(dir + "/environ", std::ios::binary);
    const std::string environ_text((std::istreambuf_iterator<char>(environ_file)), std::istreambuf_iterator<char>());
    if (environ_text.find(marker + '\0') == std::string::npos) continue;
    std::ifstream cmdline_file(dir + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), std::istreambuf_iterator<char>());
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    found.push_back(std::string(d->d_name) + " " + cmdline);
  }
  ::closedir(proc);
  return found;
}

// Waits up to `grace_s` for the run's processes to go (a janitor may take a moment after weftrun returned);
// returns what is still there, and kills it so that one failed run does not spoil the next.
std::vector<std::string> LeftoverProcesses(const std::string& marker, double grace_s) {
  const auto start = Clock::now();
  std::vector<std::string> left = ProcessesMarked(marker);
  while (!left.empty() && SecondsSince(start) < grace_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = ProcessesMarked(marker);
  }
  for (const std::string& p : left) ::kill(std::atoi(p.c_str()), SIGKILL);
  return left;
}

std::vector<std::string> LeftoverFiles(const fs::path& dir) {
  std::vector<std::string> left;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    left.push_back(it->path().string());
  return left;
}

// ---- plans and what each must say ------------------------------------------------------------------------

struct Plan {
  std::string text;     // the WEFT_FAULT value
  std::string action;   // throw, hang, exit, kill, signal, stop (signal=STOP), mismatch
  int replica = 0;      // the replica that acts
  int instance = 0;     // its instance
  int at = 0;
  int code = 0;         // exit status or signal number
  std::string field;    // mismatch: shape, dtype or op
};

struct Setup {
  bool weftrun;
  int instances, replicas_per_instance;
  double timeout_s;  // WEFT_COLLECTIVE_TIMEOUT of the runs
};

Plan RandomPlan(std::mt19937_64& rng, const Setup& s) {
  auto pick = [&rng](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  const int replicas = s.instances * s.replicas_per_instance;
  std::vector<std::string> actions = s.weftrun ? std::vector<std::string>{"throw", "hang", "exit", "kill", "stop", "mismatch"}
                                               : std::vector<std::string>{"throw", "hang", "exit", "kill", "signal", "mismatch"};
  if (const char* only = std::getenv("WEFT_SOAK_ACTIONS")) {
    const std::string wanted = std::string(",") + only + ",";
    std::erase_if(actions, [&](const std::string& a) { return wanted.find("," + a + ",") == std::string::npos; });
    if (actions.empty()) throw std::runtime_error(std::string("WEFT_SOAK_ACTIONS=") + only + " names no action of this setup");
  }
  Plan p;
  p.action = actions[pick(static_cast<int>(actions.size()))];
  p.at = pick(20);  // the program makes 20 collectives
  // Faults that end or freeze a process read naturally per instance; the others per replica (either works
  // for both). A stopped process (one process alone would never end) only under weftrun, where the others
  // time out and name it.
  const bool by_instance = p.action == "exit" || p.action == "kill" || p.action == "stop" || pick(4) == 0;
  std::string target;
  if (by_instance) {
    p.instance = pick(s.instances);
    p.replica = p.instance * s.replicas_per_instance;  // an instance's first replica acts for it
    target = "instance=" + std::to_string(p.instance);
  } else {
    p.replica = pick(replicas);
    p.instance = p.replica / s.replicas_per_instance;
    target = "replica=" + std::to_string(p.replica);
  }
  std::string action = p.action;
  if (p.action == "exit") {
    p.code = 2 + pick(100);  // not 1: that is the program's own status after an error
    action += "=" + std::to_string(p.code);
  } else if (p.action == "kill") {
    p.code = SIGKILL;
  } else if (p.action == "signal") {
    // Signals that end a process without a core dump.
    const std::vector<std::pair<std::string, int>> signals = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP},
                                                              {"USR1", SIGUSR1}};
    const auto& [name, number] = signals[pick(static_cast<int>(signals.size()))];
    p.code = number;
    action += "=" + name;
  } else if (p.action == "stop") {
    p.code = SIGSTOP;
    action = "signal=STOP";
  } else if (p.action == "mismatch") {
    const std::vector<std::string> fields = {"shape", "dtype", "op"};
    p.field = fields[pick(3)];
    action += "=" + p.field;
  }
  p.text = target + ":at=" + std::to_string(p.at) + ":" + action;
  return p;
}

// The first line of `text` that contains `prefix`, or "".
std::string LineWith(const std::string& text, const std::string& prefix) {
  const std::size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  const std::size_t begin = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

std::string Replicas(int instance, int per) {
  std::string out = "[";
  for (int k = 0; k < per; ++k) out += (k ? ", " : "") + std::to_string(instance * per + k);
  return out + "]";
}

// What the mismatched request looks like in the report: "psum(float32[4,1]", "psum(float64[4]", "op=max)".
std::string MismatchedCall(const Plan& p) {
  if (p.field == "shape") return "called psum(float32[4,1], ";
  if (p.field == "dtype") return "called psum(float64[4], ";
  return "called psum(float32[4], axes (i), op=max)";
}

std::string MismatchedField(const Plan& p) {
  return p.field == "shape" ? "shape differs" : p.field == "dtype" ? "dtype differs" : "reduce op differs";
}

// Checks one run of `plan`: ends in time, the right root cause, the right exit. Expectations are written
// from the plan, independently of the runtime's code.
void CheckRun(const Setup& s, const Plan& p, const Run& run, double bound_s) {
  const std::string& out = run.output;
  EXPECT_FALSE(run.overran) << "still running after " << bound_s << " s";
  EXPECT_LT(run.seconds, bound_s);
  const std::string actor = FaultActor(p.text, p.replica, p.instance);
  const std::string place = FaultPlace(p.at);
  const std::string replica = "replica " + std::to_string(p.replica) + " (CpuDevice(id=" + std::to_string(p.replica) +
                              ", process=" + std::to_string(p.instance) + "))";
  if (!s.weftrun) {
    // One process: the program prints the pmap's error ("fault_program: error: <root cause>") and exits 1,
    // or the injected exit / signal ends it.
    const std::string error = LineWith(out, "fault_program: error: ");
    if (p.action == "throw") {
      EXPECT_EQ(run.exit_status, 1);
      EXPECT_TRUE(Contains(error, "fault_program: error: pmap: " + replica + " failed: std::runtime_error: " + actor +
                                      " throws" + place))
          << "error line: " << error;
    } else if (p.action == "hang") {
      EXPECT_EQ(run.exit_status, 1);
      ExpectContains(error, {"timed out after " + std::to_string(static_cast<int>(s.timeout_s)) + " s",
                             "seq " + std::to_string(p.at) + ";", "missing: [" + std::to_string(p.replica) + "]"});
      EXPECT_FALSE(Contains(error, "pmap: " + replica + " failed")) << "the hung replica is not who timed out: " << error;
      EXPECT_GE(run.seconds, s.timeout_s * 0.9) << "the timeout fired early";
      ExpectContains(out, {actor + " hangs" + place});
    } else if (p.action == "mismatch") {
      EXPECT_EQ(run.exit_status, 1);
      ExpectContains(error, {"collective mismatch in pmap", replica + " " + MismatchedCall(p), MismatchedField(p)});
    } else if (p.action == "exit") {
      EXPECT_EQ(run.exit_status, p.code);
      ExpectContains(out, {actor + " ends instance 0 (pid ", ") with _exit(" + std::to_string(p.code) + ")" + place});
    } else {  // kill, signal
      EXPECT_EQ(run.signal, p.code) << "exit status " << run.exit_status;
      ExpectContains(out, {actor + " sends SIG"});
    }
    return;
  }
  // weftrun: its summary's first "weftrun: error:" line is the root cause; weftrun exits non-zero.
  EXPECT_NE(run.exit_status, 0);
  EXPECT_EQ(run.signal, 0) << "weftrun itself was killed";
  const std::string root = LineWith(out, "weftrun: error: ");
  const std::string from = "weftrun: error: root cause, from instance " + std::to_string(p.instance) + " (replicas " +
                           Replicas(p.instance, s.replicas_per_instance) + "): ";
  const std::string held = "; it held replicas " + Replicas(p.instance, s.replicas_per_instance);
  if (p.action == "throw") {
    ExpectContains(root, {from, actor + " throws" + place});
  } else if (p.action == "hang") {
    ExpectContains(root, {from, "timed out after", "missing: [" + std::to_string(p.replica) + "]"});
  } else if (p.action == "mismatch") {
    ExpectContains(root, {from, "collective mismatch in pmap", replica + " " + MismatchedCall(p), MismatchedField(p)});
  } else if (p.action == "stop") {
    // It cannot speak: the others time out waiting for it, and weftrun names it.
    ExpectContains(root, {"weftrun: error: root cause: instance " + std::to_string(p.instance) + " (replicas " +
                          Replicas(p.instance, s.replicas_per_instance) + ") never reached the collective"});
  } else if (p.action == "exit") {
    ExpectContains(root, {"weftrun: error: instance " + std::to_string(p.instance) + " (pid ",
                          ") exited with status " + std::to_string(p.code) + held});
  } else {  // kill
    ExpectContains(root, {"weftrun: error: instance " + std::to_string(p.instance) + " (pid ",
                          ") was killed by signal 9 (Killed)" + held});
  }
}

// One seed for the whole program (both tests), fresh unless WEFT_SOAK_SEED gives it.
std::uint64_t SeedFromEnvironment() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* s = std::getenv("WEFT_SOAK_SEED")) return static_cast<std::uint64_t>(std::strtoull(s, nullptr, 10));
    return static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ULL;
  }();
  return seed;
}

int CountFromEnvironment(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// What starting the instances costs here before any of weft runs (a job of `true` under weftrun): the runs'
// bounds count from the instances' start, not the launcher's, so a machine whose launches are slow (a host
// name that does not resolve: Open MPI waits ~5 s for the resolver at every launch) does not fail them.
double LaunchSeconds(const Setup& s, const fs::path& work) {
  if (!s.weftrun) return 0;
  const Run run = Spawn({WEFTRUN, "--num-instances", std::to_string(s.instances), "true"},
                        {"TMPDIR=" + work.string()}, 60);
  EXPECT_EQ(run.exit_status, 0) << "weftrun cannot start a job of `true`:\n" << run.output;
  return run.seconds;
}

void Soak(const Setup& s, int runs, const char* label) {
  const std::uint64_t seed = SeedFromEnvironment();
  std::printf("fault soak (%s): seed %llu, %d runs; rerun these plans with WEFT_SOAK_SEED=%llu\n", label,
              static_cast<unsigned long long>(seed), runs, static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  std::mt19937_64 rng(seed + (s.weftrun ? 1 : 0));
  const fs::path work = fs::absolute(fs::path("fault_soak") / label);
  fs::create_directories(work);
  const double launch_s = LaunchSeconds(s, work);
  if (s.weftrun) std::printf("  starting %d instances of `true` takes %.2f s here: added to every bound\n", s.instances, launch_s);
  const auto start = Clock::now();
  for (int i = 0; i < runs; ++i) {
    const Plan p = RandomPlan(rng, s);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", run " + std::to_string(i) + ": WEFT_FAULT=" + p.text);
    const fs::path tmp = work / ("run-" + std::to_string(i));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    const std::string timeout = std::to_string(static_cast<int>(s.timeout_s));
    std::vector<std::string> env = {"TMPDIR=" + tmp.string(), "WEFT_FAULT=" + p.text, "WEFT_COLLECTIVE_WARN=" + timeout,
                                    "WEFT_COLLECTIVE_TIMEOUT=" + timeout};
    std::vector<std::string> argv;
    if (s.weftrun) {
      argv = {WEFTRUN, "--num-instances", std::to_string(s.instances), "--num-replicas",
              std::to_string(s.instances * s.replicas_per_instance), WEFT_FAULT_PROGRAM, "ok"};
    } else {
      argv = {WEFT_FAULT_PROGRAM, "ok"};
      env.push_back("WEFT_DEVICE_COUNT=" + std::to_string(s.replicas_per_instance));
    }
    // A hang or a stop lasts the timeout (and across processes up to 1 s more for the missing one to speak); the
    // rest end at once. Start-up under load (2 busy cores) is the slack.
    const double bound =
        (p.action == "hang" || p.action == "stop" ? 2 * s.timeout_s : 0) + (s.weftrun ? 10 : 5) + launch_s;
    const Run run = Spawn(argv, env, bound);
    std::printf("  run %2d  WEFT_FAULT=%-34s %5.2f s  %s\n", i, p.text.c_str(), run.seconds,
                run.signal ? ("signal " + std::to_string(run.signal)).c_str() : ("exit " + std::to_string(run.exit_status)).c_str());
    std::fflush(stdout);
    CheckRun(s, p, run, bound);
    const std::vector<std::string> processes = LeftoverProcesses("TMPDIR=" + tmp.string(), 2.0);
    EXPECT_TRUE(processes.empty()) << "processes left behind:\n" << ::testing::PrintToString(processes);
    const std::vector<std::string> files = LeftoverFiles(tmp);
    EXPECT_TRUE(files.empty()) << "files left behind:\n" << ::testing::PrintToString(files);
    if (::testing::Test::HasFailure()) {
      std::printf("---- output of run %d ----\n%s---- end of output ----\n", i, run.output.c_str());
      return;  // the first failing run, reproducible from the seed; the rest would only repeat it
    }
    fs::remove_all(tmp);
  }
  std::printf("fault soak (%s): %d runs in %.1f s\n", label, runs, SecondsSince(start));
}

TEST(FaultSoak, OneProcess) {
  Soak({.weftrun = false, .instances = 1, .replicas_per_instance = 4, .timeout_s = 1},
       CountFromEnvironment("WEFT_SOAK_INPROC", 20), "one-process");
}

TEST(FaultSoak, UnderWeftrun) {
  Soak({.weftrun = true, .instances = 2, .replicas_per_instance = 2, .timeout_s = 2},
       CountFromEnvironment("WEFT_SOAK_WEFTRUN", 5), "weftrun");
}

}  // namespace
}  // namespace weft::testing
