// Fault injection: the WEFT_FAULT grammar and the faults' effects (see fault.hpp; docs/reliability.md
// "Fault injection"). Nothing here runs unless a plan is set.
#include "runtime/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/log.hpp"
#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "transport/rendezvous.hpp"
#include "weft/error.hpp"

namespace weft::detail {

namespace {

static_assert(std::endian::native == std::endian::little, "corrupt flips a bit of an element's top byte, its last");

constexpr std::size_t kMaxFaults = 64;  // a plan is a handful of faults; a bound keeps a typo cheap

struct SignalName {
  const char* name;
  int number;
};
constexpr SignalName kSignals[] = {{"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},
                                   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT}, {"SEGV", SIGSEGV}, {"BUS", SIGBUS},
                                   {"FPE", SIGFPE},   {"STOP", SIGSTOP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};

std::string signal_name(int number) {
  for (const SignalName& s : kSignals)
    if (s.number == number) return std::string("SIG") + s.name;
  return "signal " + std::to_string(number);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Every parse error names the setting, the whole plan, the fault and the rule broken.
class Parser {
 public:
  explicit Parser(std::string_view plan) : plan_(plan) {}

  [[noreturn]] void fail(std::string_view fault, const std::string& why) const {
    std::string where = fault == plan_ ? std::string() : " in \"" + std::string(fault) + "\"";
    throw InvalidArgument("WEFT_FAULT=" + std::string(plan_) + where + ": " + why +
                          " (a fault is replica=N|instance=N, at=N and one action: throw, hang[=SECONDS], "
                          "exit[=STATUS], kill, signal=NAME|NUMBER, mismatch[=shape|dtype|op] or corrupt, joined by "
                          "':'; "
                          "faults are separated by ';')");
  }

  // A whole number in [low, high].
  long long number(std::string_view fault, std::string_view key, std::string_view value, long long low,
                   long long high) const {
    const std::string text(value);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || n < low || n > high ||
        !(text[0] >= '0' && text[0] <= '9'))
      fail(fault, std::string(key) + "=" + text + " is not a whole number between " + std::to_string(low) + " and " +
                      std::to_string(high));
    return n;
  }

  Fault fault(std::string_view text) const {
    Fault f;
    f.text = std::string(text);
    bool have_target = false, have_at = false, have_action = false;
    std::string_view rest = text;
    while (true) {
      const std::size_t colon = rest.find(':');
      const std::string_view field = trim(rest.substr(0, colon));
      const std::size_t eq = field.find('=');
      const std::string_view key = field.substr(0, eq);
      const bool has_value = eq != std::string_view::npos;
      const std::string_view value = has_value ? field.substr(eq + 1) : std::string_view();
      auto action = [&](FaultAction a) {
        if (have_action) fail(text, "more than one action");
        have_action = true;
        f.action = a;
      };
      if (field.empty()) {
        fail(text, "an empty field");
      } else if (key == "replica" || key == "instance") {
        if (have_target) fail(text, "more than one target (replica= or instance=)");
        if (!has_value) fail(text, std::string(key) + " needs a number: " + std::string(key) + "=N");
        have_target = true;
        f.instance = key == "instance";
        f.target = static_cast<int>(number(text, key, value, 0, (1 << 30)));
      } else if (key == "at") {
        if (have_at) fail(text, "more than one at=");
        if (!has_value) fail(text, "at needs a collective number: at=N (from 0)");
        have_at = true;
        f.at = static_cast<std::uint64_t>(number(text, key, value, 0, (1LL << 62)));
      } else if (key == "throw" && !has_value) {
        action(FaultAction::throw_error);
      } else if (key == "hang") {
        action(FaultAction::hang);
        if (has_value) {
          const std::string s(value);
          char* end = nullptr;
          const double v = std::strtod(s.c_str(), &end);
          if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || !(v > 0) || v > 1e9)
            fail(text, "hang=" + s + " is not a number of seconds > 0 (hang alone lasts until the execution is aborted)");
          f.hang_s = v;
        }
      } else if (key == "exit") {
        action(FaultAction::exit);
        f.code = has_value ? static_cast<int>(number(text, key, value, 0, 255)) : 1;
      } else if (key == "kill" && !has_value) {
        action(FaultAction::signal);
        f.code = SIGKILL;
      } else if (key == "signal") {
        action(FaultAction::signal);
        std::string name(value);
        if (name.rfind("SIG", 0) == 0) name = name.substr(3);
        f.code = 0;
        for (const SignalName& s : kSignals)
          if (name == s.name) f.code = s.number;
        if (f.code == 0) {
          if (name.empty() || !(name[0] >= '0' && name[0] <= '9'))
            fail(text, "signal=" + std::string(value) +
                           " is not a signal: use a name (KILL, TERM, INT, HUP, QUIT, ABRT, SEGV, BUS, FPE, STOP, "
                           "USR1, USR2) or a number");
          f.code = static_cast<int>(number(text, key, value, 1, SIGRTMAX));
        }
      } else if (key == "corrupt" && !has_value) {
        action(FaultAction::corrupt);
      } else if (key == "mismatch") {
        action(FaultAction::mismatch);
        if (!has_value || value == "shape") f.field = MismatchField::shape;
        else if (value == "dtype") f.field = MismatchField::dtype;
        else if (value == "op") f.field = MismatchField::op;
        else fail(text, "mismatch=" + std::string(value) + " is not shape, dtype or op");
      } else {
        fail(text, "unknown field \"" + std::string(field) + "\"");
      }
      if (colon == std::string_view::npos) break;
      rest = rest.substr(colon + 1);
    }
    if (!have_target) fail(text, "no target: say replica=N or instance=N");
    if (!have_at) fail(text, "no collective number: say at=N (the target's collective, counted from 0)");
    if (!have_action) fail(text, "no action");
    return f;
  }

 private:
  std::string_view plan_;
};

// One element as the log shows it ("1", "inf", "-3").
std::string array_value_str(const Array& a, std::int64_t i) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", a.value_at(i));
  return text;
}

std::string target_name(const Fault& f) {
  return (f.instance ? "instance " : "replica ") + std::to_string(f.target);
}

}  // namespace

std::vector<Fault> FaultPlan::parse(std::string_view text) {
  const Parser parser(text);
  std::vector<Fault> faults;
  if (trim(text).empty()) return faults;
  std::string_view rest = text;
  while (true) {
    const std::size_t semi = rest.find(';');
    const std::string_view one = trim(rest.substr(0, semi));
    if (one.empty()) parser.fail(text, "an empty fault (two ';' in a row, or one at an end)");
    if (faults.size() == kMaxFaults) parser.fail(text, "more than " + std::to_string(kMaxFaults) + " faults");
    faults.push_back(parser.fault(one));
    for (std::size_t i = 0; i + 1 < faults.size(); ++i)
      if (faults[i].instance == faults.back().instance && faults[i].target == faults.back().target &&
          faults[i].at == faults.back().at)
        parser.fail(text, "two faults for " + target_name(faults.back()) + " at collective #" +
                              std::to_string(faults.back().at));
    if (semi == std::string_view::npos) break;
    rest = rest.substr(semi + 1);
  }
  return faults;
}

FaultPlan::FaultPlan(std::string_view text, int instance, int instances, int replicas)
    : faults_(parse(text)), instance_(instance), replicas_(replicas),
      counts_(std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(replicas))) {
  for (const Fault& f : faults_) {
    const int limit = f.instance ? instances : replicas;
    if (f.target >= limit)
      throw InvalidArgument("WEFT_FAULT=" + std::string(text) + ": " + target_name(f) + " (in \"" + f.text +
                            "\") is not in this job, which has " + std::to_string(limit) +
                            (f.instance ? " instance" : " replica") + (limit == 1 ? "" : "s") +
                            (f.instance ? "" : " (devices)"));
  }
}

void FaultPlan::at_collective(ReplicaState& st, collectives::Request& req, std::optional<Array>& substitute) {
  if (st.index >= replicas_) return;  // (an execution has at most one replica per device)
  // Only this replica's thread counts its collectives; relaxed is enough, the atomic only keeps runs of one
  // replica on different worker threads (executions over other devices) well defined.
  const std::uint64_t n = counts_[st.index].fetch_add(1, std::memory_order_relaxed);
  for (const Fault& f : faults_) {
    if (f.at != n) continue;
    const bool targeted = f.instance ? f.target == instance_ && st.local == 0 : f.target == st.index;
    if (targeted) act(f, st, req, substitute, n);
  }
}

void FaultPlan::act(const Fault& f, ReplicaState& st, collectives::Request& req, std::optional<Array>& substitute,
                    std::uint64_t n) {
  Execution& ex = *st.execution;
  // "WEFT_FAULT "replica=2:at=5:hang": replica 2 (CpuDevice(id=2, process=1)) ... before its collective #5,
  // psum(float32[4], axes (i), op=sum) at prog.cc:12"
  const std::string who = "WEFT_FAULT \"" + f.text + "\": " + ex.replica_name(st.index);
  const std::string where = " before its collective #" + std::to_string(n) + ", " + collectives::describe(req);
  switch (f.action) {
    case FaultAction::throw_error:
      // Like an exception of the user's code, so that the runtime's handling of foreign errors is what runs.
      throw std::runtime_error(who + " throws" + where);
    case FaultAction::hang: {
      // Stuck in user code: no collective, no heartbeat. It ends when the others gave up on this replica
      // (their timeout or failure aborted the execution, here or in another instance) or after hang=SECONDS,
      // and the replica then enters its collective, which fails at once if the execution was aborted.
      log(LogLevel::warn, who + " hangs" + where +
                              (f.hang_s > 0 ? " for " + transport::seconds_str(f.hang_s)
                                            : " until the execution is aborted"));
      const auto start = std::chrono::steady_clock::now();
      auto aborted = [&] { return ex.communicator.aborted(); };
      while (!aborted()) {
        if (f.hang_s > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= f.hang_s)
          break;
        // A fiber yields its worker meanwhile: the fault models a replica stuck on something outside weft,
        // not one that also stalls the replicas sharing its thread (docs/design.md "Schedulers").
        transport::sleep_replica(std::chrono::milliseconds(10));
      }
      return;
    }
    case FaultAction::exit: {
      // _exit, not exit: the process vanishes under its peers as a crashing one does (exit from a replica's
      // thread would run static destructors while the other replicas still run).
      log(LogLevel::warn, who + " ends instance " + std::to_string(ex.runtime.process_index) + " (pid " +
                              std::to_string(::getpid()) + ") with _exit(" + std::to_string(f.code) + ")" + where);
      std::fflush(nullptr);
      ::_exit(f.code);
    }
    case FaultAction::signal: {
      log(LogLevel::warn, who + " sends " + signal_name(f.code) + " to instance " +
                              std::to_string(ex.runtime.process_index) + " (pid " + std::to_string(::getpid()) + ")" +
                              where);
      std::fflush(nullptr);
      ::kill(::getpid(), f.code);
      // A signal that does not end the process (STOP, then CONT; a handled one): the replica goes on.
      return;
    }
    case FaultAction::mismatch: {
      const Array& x = *req.input;
      const bool reduces = req.kind == collectives::Kind::all_reduce || req.kind == collectives::Kind::reduce_scatter;
      std::string change;
      if (f.field == MismatchField::op && reduces) {
        // A different reduce op, valid for every dtype.
        req.reduce = req.reduce == ReduceOp::max ? ReduceOp::min : ReduceOp::max;
        change = "another reduce op";
      } else if (f.field == MismatchField::dtype) {
        substitute = x.astype(x.dtype() == DType::f64 ? DType::f32 : DType::f64);
        change = "dtype " + std::string(dtype_name(substitute->dtype()));
      } else {
        // A trailing dimension of 1: the element count and every axis counted from the start are kept, so
        // the request stays valid on its own and differs from the others' only in its shape.
        Shape shape = x.shape();
        shape.push_back(1);
        substitute = x.reshape(shape);
        change = "shape " + shape_str(shape) + (f.field == MismatchField::op ? " (mismatch=op on a collective without a reduce op)" : "");
      }
      if (substitute) req.input = &*substitute;
      log(LogLevel::warn, who + " sends " + change + where);
      return;
    }
    case FaultAction::corrupt: {
      // Silent data corruption: one bit of the replica's contribution flips. The request still matches the
      // others', so the runtime cannot notice; only a checker of results can (weft-bench's #wrong, R19). The
      // bit is element 0's highest exponent bit for floats (1 becomes inf, 0 becomes 2), bit 6 of its most
      // significant byte for integers (a change of 2^30 for int32), its value bit for bools.
      const Array& x = *req.input;
      if (x.size() == 0) {
        log(LogLevel::warn, who + " has no element to corrupt" + where);
        return;
      }
      substitute = x.copy();
      std::byte* element = substitute->mutable_bytes();
      if (x.dtype() == DType::boolean) element[0] ^= std::byte{0x01};
      else element[dtype_size(x.dtype()) - 1] ^= std::byte{0x40};  // little endian: the last byte is the top one
      req.input = &*substitute;
      log(LogLevel::warn, who + " corrupts element 0 of its input (" + array_value_str(x, 0) + " becomes " +
                              array_value_str(*substitute, 0) + ")" + where);
      return;
    }
  }
}

}  // namespace weft::detail
