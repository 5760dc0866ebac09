// How the job ended, as weftrun reports it (job.hpp): the exit status, and for a failed job the summary on
// stderr, in this order: the headline (the timeout or signal that ended the job, else the root cause, else
// the first instance to fail, else what mpirun said), the first instance to fail, what mpirun reported, and
// one line per instance with its state. A clean run prints only mpirun's own words (warnings), verbatim.
// The messages are part of the interface: tests/launcher and the mpi fault tests match them.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include "core/launcher_protocol.hpp"
#include "job.hpp"
#include "text.hpp"

namespace weftrun {

int Job::finish() {
  read_records();
  if (output_closed_) return 128 + SIGPIPE;  // the summary's reader is gone (see output_closed)
  const MpirunReport report = parse_mpirun_report(mpirun_lines_);
  mark_improper_exits(report);
  bool any_failed = false;
  const int first_failed = first_failed_instance(any_failed);
  const bool mpirun_ok = reaped_ && WIFEXITED(mpirun_status_) && WEXITSTATUS(mpirun_status_) == 0;
  const bool failed = timed_out_ || interrupted_ || !mpirun_ok || any_failed;
  if (!failed) return report_clean_run();

  const int status = failure_status(first_failed, report);
  const RootCause root = find_root_cause();
  std::vector<std::string> lines;
  const bool first_failed_said = headline(root, first_failed, report, lines);
  if (first_failed >= 0 && !first_failed_said) {
    lines.push_back("the first instance to fail: " + first_failure(first_failed));
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
  for (int i = 0; i < static_cast<int>(instances_.size()); ++i) lines.push_back(instance_state(i, first_failed, report));
  for (const std::string& l : lines) say(l);
  return status;
}

void Job::mark_improper_exits(const MpirunReport& report) {
  const int n = static_cast<int>(instances_.size());
  for (const MpirunEvent& e : report.events)
    if (e.kind == MpirunEvent::improper_exit && e.rank >= 0 && e.rank < n)
      instances_[static_cast<std::size_t>(e.rank)].improper_exit = true;
}

// The first instance to end in failure, by the wrapper's clock (not counting those weftrun killed), or -1;
// `any_failed` says whether any instance ended with a failure status at all.
int Job::first_failed_instance(bool& any_failed) const {
  int first_failed = -1;
  any_failed = false;
  for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
    const Instance& inst = instances_[static_cast<std::size_t>(i)];
    any_failed = any_failed || inst.failed();
    if (inst.counts_as_failure() && (term_unix_ns_ == 0 || inst.end_ns < term_unix_ns_) &&
        (first_failed < 0 || inst.end_ns < instances_[static_cast<std::size_t>(first_failed)].end_ns))
      first_failed = i;
  }
  return first_failed;
}

// A clean run: mpirun's own words, if any (warnings), verbatim; nothing else.
int Job::report_clean_run() const {
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

// 124 on --timeout, 128 + n for weftrun's own signal n, else the first failed instance's status (128 + n for
// its signal n), else what mpirun reported or its own status; never 0.
int Job::failure_status(int first_failed, const MpirunReport& report) const {
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
  return status;
}

// The summary's first lines: what ended the job and its root cause. Returns whether they already named the
// first instance to fail.
bool Job::headline(const RootCause& root, int first_failed, const MpirunReport& report,
                   std::vector<std::string>& lines) const {
  if (timed_out_) {
    std::string m = "error: timeout: the job was killed after --timeout ";
    m += timeout_seconds();
    m += " s (exit status 124)";
    lines.push_back(m);
    if (!root.blamed.empty()) {
      lines.push_back("before that, the root cause: " + root.blamed);
    } else if (root.rank >= 0) {
      lines.push_back("before that, the root cause from " + root_cause_source(root));
    }
  } else if (interrupted_) {
    std::string m = "error: the job was killed because weftrun received ";
    m += signal_text(interrupted_);
    lines.push_back(m);
  } else if (!root.blamed.empty()) {
    lines.push_back("error: root cause: " + root.blamed);
  } else if (root.rank >= 0) {
    lines.push_back("error: root cause, from " + root_cause_source(root));
  } else if (first_failed >= 0) {
    lines.push_back(first_failure_headline(first_failed));
    return true;
  } else {
    lines.push_back(mpirun_failure_headline(report));
  }
  return false;
}

// "instance 1 (replicas [2, 3]): weft: error: ...": the instance that reported the root cause, and its line.
std::string Job::root_cause_source(const RootCause& root) const {
  std::string m = "instance ";
  m += std::to_string(root.rank);
  m += " (";
  m += replicas_of(root.rank, o_);
  m += "): ";
  m += root.text;
  return m;
}

// "instance 1 (pid 123) exited with status 3; it held replicas [2, 3]".
std::string Job::first_failure(int first_failed) const {
  std::string m = who(first_failed);
  m += " ";
  m += describe_end(first_failed);
  m += "; it held ";
  m += replicas_of(first_failed, o_);
  return m;
}

// No instance reported an error: the first to fail, how, and the most telling line it printed.
std::string Job::first_failure_headline(int first_failed) const {
  std::string m = "error: ";
  m += first_failure(first_failed);
  const Instance& inst = instances_[static_cast<std::size_t>(first_failed)];
  if (!inst.error_line.empty()) {
    m += "; it printed: ";
    m += inst.error_line;
  }
  return m;
}

// No instance reported anything and none has a failed exit record: mpirun's first report of a rank, else how
// mpirun itself ended (with the first line it printed that nothing recognised).
std::string Job::mpirun_failure_headline(const MpirunReport& report) const {
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
  return m;
}

// One line of the instances table: its replicas, whether it started, how it ended, and its error.
std::string Job::instance_state(int rank, int first_failed, const MpirunReport& report) const {
  const Instance& inst = instances_[static_cast<std::size_t>(rank)];
  std::string m = "  instance ";
  m += std::to_string(rank);
  m += " (";
  m += replicas_of(rank, o_);
  m += "): ";
  m += instance_start(rank);
  m += instance_end(rank, first_failed, report);
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
  return m;
}

// "registered (pid P on HOST)", or why it never did.
std::string Job::instance_start(int rank) const {
  const Instance& inst = instances_[static_cast<std::size_t>(rank)];
  std::string m;
  if (inst.registered) {
    m += "registered (pid ";
    m += std::to_string(inst.reg_pid);
    m += " on ";
    m += inst.reg_host;
    m += ")";
  } else {
    m += "never started (no instance-";
    m += std::to_string(rank);
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
  return m;
}

// "; exited with status N", "; killed by signal N (...)" and the like, from its exit record or from mpirun.
std::string Job::instance_end(int rank, int first_failed, const MpirunReport& report) const {
  const Instance& inst = instances_[static_cast<std::size_t>(rank)];
  std::string m;
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
    if (rank == first_failed) m += " (first to fail)";
  } else {
    bool said = false;
    for (const MpirunEvent& e : report.events)
      if (e.rank == rank && e.kind == MpirunEvent::signal) {
        m += "; killed by signal ";
        m += std::to_string(e.value);
        said = true;
        break;
      }
    if (!said && inst.launched) m += "; killed with the job (no exit record)";
  }
  return m;
}

// --timeout as the messages print it.
std::string Job::timeout_seconds() const {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", o_.timeout_s);
  return secs;
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

}  // namespace weftrun
