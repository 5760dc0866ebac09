// weftrun's job: one run of PROGRAM as N instances under mpirun, from its start to its summary. The Job's
// work is spread over one file per concern:
//   job.cc          the run from end to end (Job::run), in the order the steps must happen
//   launch.cc       the job directory, the instances' environment, mpirun's command line, starting mpirun
//   output.cc       the job's output: mpirun's tagged pipes and the wrappers' direct streams, split into
//                   lines, tagged "[instance i]" and passed on, with what each instance's lines tell of errors
//   supervise.cc    the loop that watches the job: output, deadlines (--timeout, grace periods), signals,
//                   the end of mpirun, and the final sweep that leaves no process of the job behind
//   records.cc      what the instances' wrappers and runtimes left in $WEFT_JOB_DIR
//   root_cause.cc   which instance's error caused the failure (following the blame records of those that
//                   only waited for others)
//   summary.cc      the exit status and the failure summary weftrun prints at the end
//   janitor.cc      the process that cleans up when weftrun itself is killed
// The instance wrapper (instance_wrapper.cc) runs in the instances, not here; docs/weftrun.md is the manual.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpirun_report.hpp"
#include "options.hpp"
#include "tagged_output.hpp"

namespace weftrun {

using Clock = std::chrono::steady_clock;

inline constexpr int kTimeoutStatus = 124;
inline constexpr auto kTermGrace = std::chrono::milliseconds(1500);   // SIGTERM to the job, then SIGKILL
inline constexpr auto kDrainGrace = std::chrono::milliseconds(2000);  // mpirun gone, its pipes still open
inline constexpr auto kReapLimit = std::chrono::milliseconds(5000);   // final sweep: wait for the killed
// An instance's line that has no newline yet is handed out in pieces of this size (each with its tag) rather
// than held without limit: a program writing 200 MB without a newline must not make weftrun hold 200 MB.
inline constexpr std::size_t kMaxLine = std::size_t{1} << 20;

// What weftrun knows of one instance at the end: its records in $WEFT_JOB_DIR, what mpirun said of it, and
// what its output showed.
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

struct OutputChannel;  // output_channel.hpp
using OutputChannels = std::vector<std::unique_ptr<OutputChannel>>;

// The failure's root cause as the summary names it (root_cause.cc).
struct RootCause {
  int rank = -1;       // the instance; -1 if no instance reported an error
  std::string text;    // its "weft: error: ..." line
  // When the instance that reported only waited for another that said nothing: the whole sentence naming
  // the one it waited for (then `rank` is that one); empty otherwise.
  std::string blamed;
};

class Job {
 public:
  explicit Job(Options o) : o_(std::move(o)), instances_(static_cast<std::size_t>(o_.num_instances)) {}
  int run();

 private:
  // launch.cc
  bool make_job_dir();
  std::vector<std::string> build_environment();
  std::vector<std::string> build_command(const std::vector<std::string>& exported);
  void say_command(const std::vector<std::string>& command, const std::vector<std::string>& env) const;
  bool start(const std::vector<std::string>& command, const std::vector<std::string>& env);
  // janitor.cc
  void start_janitor();
  [[noreturn]] void run_janitor(int in, int ack);
  void tell_janitor(const std::string& text);
  void stop_janitor();
  void clean_up_files();
  // output.cc
  bool listen_for_output();
  OutputChannels open_mpirun_channels();
  void accept_instance_streams(OutputChannels& channels);
  void stop_listening(OutputChannels& channels);
  void feed(OutputChannel& ch, std::string_view data);
  void close_channel(OutputChannel& ch, bool drain);
  void on_line(const TaggedLine& line);
  void output_closed(int fd);
  // supervise.cc
  void supervise();
  bool enforce_deadlines(Clock::time_point now, Clock::time_point deadline);
  Clock::time_point next_wakeup(Clock::time_point now, Clock::time_point deadline) const;
  void relay_signals();
  void read_ready_channels(OutputChannels& channels, const std::vector<pollfd>& fds, std::size_t end,
                           std::vector<char>& buf);
  void reap();
  void begin_termination();
  void final_sweep();
  // records.cc
  void read_records();
  // root_cause.cc
  RootCause find_root_cause() const;
  void take_earliest_error_file(RootCause& root) const;
  void follow_blame(RootCause& root) const;
  // summary.cc
  int finish();
  void mark_improper_exits(const MpirunReport& report);
  int first_failed_instance(bool& any_failed) const;
  int report_clean_run() const;
  int failure_status(int first_failed, const MpirunReport& report) const;
  bool headline(const RootCause& root, int first_failed, const MpirunReport& report,
                std::vector<std::string>& lines) const;
  std::string root_cause_source(const RootCause& root) const;
  std::string first_failure(int first_failed) const;
  std::string first_failure_headline(int first_failed) const;
  std::string mpirun_failure_headline(const MpirunReport& report) const;
  std::string instance_state(int rank, int first_failed, const MpirunReport& report) const;
  std::string instance_start(int rank) const;
  std::string instance_end(int rank, int first_failed, const MpirunReport& report) const;
  std::string timeout_seconds() const;
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
  bool stdout_ok_ = true, stderr_ok_ = true;
  // The reader of our stdout or stderr went away (`weftrun ... | head`): the job ends, as `mpirun | head`
  // does when SIGPIPE kills mpirun, and weftrun exits 128 + SIGPIPE without a summary nobody would read.
  bool output_closed_ = false;
  bool watch_output_[2] = {false, false};  // stdout, stderr: pipes we can poll for a closed reader
  int leftovers_ = 0;
};

}  // namespace weftrun
