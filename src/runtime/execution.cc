// Executions (execution.hpp): one run of a program over this process's replicas. Each replica runs on its
// device's worker (a thread, or a fiber), its failure aborts the others' collectives, and the caller gets one
// error that names the root cause first and then, in a line each, what the other replicas saw.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error_hints.hpp"
#include "core/log.hpp"
#include "runtime/admission.hpp"
#include "runtime/denormals.hpp"
#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "runtime/launcher_records.hpp"
#include "runtime/shared_products.hpp"
#include "runtime/shared_runs.hpp"
#include "runtime/stack_guard.hpp"
#include "weft/error.hpp"

namespace weft::detail {

namespace {

std::vector<int> local_replicas_of(const Runtime::Impl& rt, const std::vector<Device>& devices) {
  std::vector<int> local;
  for (std::size_t r = 0; r < devices.size(); ++r)
    if (devices[r].process_index == rt.process_index) local.push_back(static_cast<int>(r));
  return local;
}

collectives::Participants participants_of(const Execution& ex, const Runtime::Impl& rt) {
  collectives::Participants p;
  p.execution_name = ex.name;
  p.num_replicas = ex.num_replicas();
  p.local_replicas = ex.local_replicas;
  p.process_of.reserve(ex.devices.size());
  for (const Device& d : ex.devices) p.process_of.push_back(d.process_index);
  p.name = [&ex](int replica) { return ex.replica_name(replica); };
  p.account_of = [&rt, &ex](int replica) { return rt.accounts[ex.devices[replica].id]; };
  if (rt.fibers) {
    // A replica that holds its fiber worker starves the others of that worker: timeout and stall reports say
    // so instead of blaming them (fiber_scheduler.hpp).
    const double held_s = std::min(1.0, rt.options.collective_timeout_s > 0 ? rt.options.collective_timeout_s / 2 : 1.0);
    p.absence_note = [&rt, &ex, held_s] {
      std::string note;
      for (const detail::Hold& hold : rt.fibers->holds(held_s))
        note += (note.empty() ? "" : "; ") +
                detail::describe_hold(hold, [&ex](int task) { return ex.replica_name(ex.local_replicas[task]); });
      return note;
    };
  }
  return p;
}

// An array op's error (a shape mismatch) has no call site: say which replica and where it was. (The op
// functions cannot take a std::source_location: operators have fixed arity.)
void locate_in_replica_code(ErrorRecord& error, const std::string& position) {
  if (error.kind != ErrorKind::invalid_argument && error.kind != ErrorKind::out_of_memory) return;
  const std::size_t eol = error.message.find('\n');
  error.message.insert(eol == std::string::npos ? error.message.size() : eol,
                       " (in the replica's own code, " + position + ")");
}

// Another replica's failure as one line of the root cause's report: only its first line (details, reports and
// histories, belong to the root cause), and the root cause is printed once: an abort it caused, or the same
// error seen by another replica (every replica of a mismatched round raises it), is listed without repeating it.
std::string other_failure_line(const std::string& who, const std::string& root_who, const std::string& message,
                               const std::string& root_text) {
  std::string text = message.substr(0, message.find('\n'));
  const std::string aborted = who + " aborted because " + root_who + " failed";
  if (text.rfind(aborted, 0) == 0) text = aborted;
  // (A timeout every waiter saw differs from the root cause's only in the replica it names.)
  std::string as_root = text;
  for (std::size_t at = as_root.find(who); at != std::string::npos; at = as_root.find(who, at + root_who.size()))
    as_root.replace(at, who.size(), root_who);
  if (text == root_text || as_root == root_text) text = "the same error";
  // Errors raised by the runtime already start with the replica's name.
  return text.rfind(who, 0) == 0 ? text : who + ": " + text;
}

}  // namespace

Execution::Execution(Runtime::Impl& rt, std::string execution_name, Mesh m, std::vector<Device> devs,
                     GroupCache& group_cache)
    : runtime(rt),
      name(std::move(execution_name)),
      mesh(std::move(m)),
      devices(std::move(devs)),
      local_replicas(local_replicas_of(rt, devices)),
      groups(group_cache),
      communicator(participants_of(*this, rt),
                   transport::Deadlines{rt.options.collective_warn_s, rt.options.collective_timeout_s}, rt.job,
                   rt.stats.collectives,
                   collectives::Thresholds{static_cast<std::size_t>(rt.options.split_bytes),
                                           static_cast<std::size_t>(rt.options.ring_bytes)},
                   rt.options.verify != 0) {}

Execution::~Execution() = default;

void Execution::share(int product_mode, int run_mode) {
  if (local_replicas.size() <= 1) return;
  if (product_mode > 0) products = std::make_unique<ProductSharing>(*this, product_mode);
  if (run_mode > 0) runs = std::make_unique<RunSharing>(*this, run_mode);
}

std::string Execution::replica_name(int replica) const {
  return "replica " + std::to_string(replica) + " (" + to_string(devices[replica]) + ")";
}

void Execution::run(const std::function<void(Replica&)>& body) {
  if (t_current_execution)
    throw InvalidArgument(name + ": cannot start a program from inside " + t_current_execution->name +
                          " (a replica's function); use one program over a multi-axis mesh instead");
  // Numbered before the early return below, so that every instance of a job numbers its executions alike.
  serial = runtime.execution_serial.fetch_add(1);
  const int n = static_cast<int>(local_replicas.size());
  if (n == 0) return;  // none of this program's devices belongs to this process
  Admitted admitted(runtime, name);
  // A replica's stack overflow is reported while the execution runs, and SIGSEGV is the host's again after.
  const detail::OverflowReportsInstalled overflow_reports;
  if (log_enabled(LogLevel::debug, LogSubsys::coll))
    log(LogLevel::debug, LogSubsys::coll,
        name + " #" + std::to_string(serial) + ": starts on " + std::to_string(n) + " local replica" + (n == 1 ? "" : "s") +
            " of " + std::to_string(num_replicas()));
  remaining_ = n;
  errors_.assign(n, std::nullopt);
  runtime.stats.executions++;
  std::vector<std::function<void()>> tasks;
  tasks.reserve(n);
  for (int li = 0; li < n; ++li) tasks.emplace_back([this, li, &body] { run_replica(li, body); });
  if (runtime.fibers && !on_threads) {
    // The watchdog reports a replica that holds its worker from outside (fiber_scheduler.hpp).
    detail::Watch watch{runtime.options.collective_warn_s, runtime.options.collective_timeout_s,
                        [this](int task) { return replica_name(local_replicas[task]); }, name,
                        [this](int task, const std::string& report) {
                          fail_from_outside(task, {ErrorKind::timeout, report + hints::kWorkerHeld});
                        }};
    runtime.fibers->run(tasks, watch);  // returns once every replica has
  } else {
    detail::ensure_thread_workers(runtime);
    for (int li = 0; li < n; ++li) runtime.workers[devices[local_replicas[li]].id]->submit(tasks[li]);
  }
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  if (root_cause_ >= 0) throw_root_cause();
}

void Execution::run_replica(int li, const std::function<void(Replica&)>& body) {
  const int r = local_replicas[li];
  // Arrays the replica computes are charged to its device (a device thread has this already; a fiber
  // worker serves several devices).
  ScopedMemoryAccount on_device(runtime.accounts[devices[r].id]);
  FlightRing* flight = runtime.flight ? runtime.flight->rings[devices[r].id].get() : nullptr;
  ReplicaState state{this, r, li, &devices[r], flight};
  Replica replica(&state);
  t_current_execution = this;
  t_error_from_collective = false;
  set_log_replica(r);  // WEFT_DEBUG lines of this thread name the replica
  std::optional<ErrorRecord> error;
  try {
    // JAX's FPU modes when asked (denormals.hpp); restored before the thread or fiber serves anything else.
    const ScopedFlushDenormals flush(runtime.options.flush_denormals == 1);
    body(replica);
    communicator.depart(li);
    if (products) products->depart(li);
    if (runs) runs->depart(li);
  } catch (...) {
    error = current_error();
    if (!t_error_from_collective) locate_in_replica_code(*error, communicator.position_of(li));
  }
  t_current_execution = nullptr;
  set_log_replica(-1);
  if (error) record_failure(li, flight, std::move(*error));
  std::lock_guard lock(mutex_);
  if (--remaining_ == 0) done_cv_.notify_all();
}

void Execution::record_failure(int li, FlightRing* flight, ErrorRecord error) {
  const int r = local_replicas[li];
  // The first failure poisons the execution; the others' pending waits end with its cause.
  const bool first = communicator.abort(li, error.message);
  if (products) products->abort(li, error.message);
  if (runs) runs->abort(li, error.message);
  // Other instances may wait for this one in a collective: tell them now, not once every local
  // replica has returned (one stuck in user code would hold the news until it returns).
  if (first && runtime.process_count > 1)
    report_to_launcher(runtime, name + ": " + replica_name(r) + " failed: " + error.message);
  // R21: the replica's last collectives, written by its own thread (the ring's only writer) after the
  // others were released by the abort above; a failed write is logged, never thrown.
  if (flight && !runtime.options.dump_dir.empty())
    flight->dump(runtime.options.dump_dir, {runtime.process_index, runtime.process_count, r, devices[r].id,
                                            serial, name, num_replicas(), error.message});
  std::lock_guard lock(mutex_);
  if (!errors_[li]) errors_[li] = std::move(error);  // (fail_from_outside may have said it first)
  if (first) root_cause_ = li;
}

void Execution::fail_from_outside(int li, ErrorRecord error) {
  const bool first = communicator.abort(li, error.message);
  if (products) products->abort(li, error.message);
  if (runs) runs->abort(li, error.message);
  if (first && runtime.process_count > 1)
    report_to_launcher(runtime, name + ": " + replica_name(local_replicas[li]) + " failed: " + error.message);
  std::lock_guard lock(mutex_);
  if (!first) return;
  errors_[li] = std::move(error);
  root_cause_ = li;
}

void Execution::throw_root_cause() const {
  const int root = local_replicas[root_cause_];
  const std::string root_who = replica_name(root);
  // Errors raised by the runtime already start with the replica's name: it is said once.
  std::string root_message = errors_[root_cause_]->message;
  if (root_message.rfind(root_who + ": ", 0) == 0) root_message.erase(0, root_who.size() + 2);
  std::string message = name + ": " + root_who + " failed: " + root_message;
  // The root cause's hint (R23, core/error_hints.hpp) goes last, after the other replicas' lines: the advice
  // ends the report.
  std::string hint;
  if (const std::size_t at = message.find("\n  hint: "); at != std::string::npos) {
    const std::size_t end = std::min(message.find('\n', at + 1), message.size());
    hint = message.substr(at, end - at);
    message.erase(at, end - at);
  }
  const std::string& root_error = errors_[root_cause_]->message;
  const std::string root_text = root_error.substr(0, root_error.find('\n'));
  // (reported to the launcher when it happened, in record_failure)
  // The replicas that saw the root cause's own error are one line ("replicas 1, 2, 3: the same error"), not
  // one line each: the report stays as short with 64 replicas as with 2.
  std::vector<int> same;
  for (int li = 0; li < static_cast<int>(errors_.size()); ++li) {
    if (li == root_cause_ || !errors_[li]) continue;
    const std::string who = replica_name(local_replicas[li]);
    const std::string line = other_failure_line(who, root_who, errors_[li]->message, root_text);
    if (line == who + ": the same error") {
      same.push_back(local_replicas[li]);
    } else {
      message += "\n  " + line;
    }
  }
  if (same.size() == 1) {
    message += "\n  " + replica_name(same[0]) + ": the same error";
  } else if (!same.empty()) {
    std::string list;
    for (const int r : same) list += (list.empty() ? "" : ", ") + std::to_string(r);
    message += "\n  replicas " + list + ": the same error";
  }
  message += hint;
  throw_error(errors_[root_cause_]->kind, message);
}

}  // namespace weft::detail
