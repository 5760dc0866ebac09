// Which instance's error caused a failed job (job.hpp): the earliest "weft: error:" line any instance printed
// (else the earliest instance-<i>.error record); and when that instance failed only because it waited for
// others (its instance-<i>.blame record), the one it waited for, since the cause is theirs.
#include <sys/stat.h>

#include "core/launcher_protocol.hpp"
#include "job.hpp"

namespace weftrun {

// The root cause first: the earliest "weft: error:" line of any instance (from its output, else from the
// instance-<i>.error files), with the instance and its replicas.
RootCause Job::find_root_cause() const {
  RootCause root;
  root.rank = root_rank_;
  root.text = root_line_;
  if (root.rank < 0) take_earliest_error_file(root);
  follow_blame(root);
  return root;
}

// No instance printed a "weft: error:" line: the instance-<i>.error file written first, if any.
void Job::take_earliest_error_file(RootCause& root) const {
  const int n = static_cast<int>(instances_.size());
  long long best = 0;
  for (int i = 0; i < n; ++i) {
    const Instance& inst = instances_[static_cast<std::size_t>(i)];
    if (inst.error_file.empty()) continue;
    struct stat st {};
    const std::string path = weft::launcher::record_path(job_dir_, i, weft::launcher::kError);
    const long long t =
        stat(path.c_str(), &st) == 0 ? st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec : 0;
    if (root.rank < 0 || t < best) {
      root.rank = i;
      best = t;
      root.text = weft::launcher::kErrorPrefix;
      root.text += inst.error_file;
    }
  }
}

// An instance that failed only because it waited for others (a collective they never reached, a member
// that left the job, the end of its program while they still ran) names them (instance-<i>.blame): the
// root cause is theirs. One of them that reported its own error has the precise cause (the stuck replica);
// otherwise the blamed instance is named, with what the waiting one reported.
void Job::follow_blame(RootCause& root) const {
  if (root.rank < 0 || instances_[static_cast<std::size_t>(root.rank)].blames.empty()) return;
  const Instance& waiting = instances_[static_cast<std::size_t>(root.rank)];
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
    root.rank = culprit;
    root.text = culprit_text;
    return;
  }
  const auto& [kind, k] = waiting.blames.front();
  std::string m = "instance " + std::to_string(k) + " (" + replicas_of(k, o_) + ") ";
  if (kind == "departed")
    m += "left the job (its program ended: it returned from main or called exit) while instance " +
         std::to_string(root.rank) + " waited for it in a collective";
  else if (kind == "unfinished")
    m += "did not end while instance " + std::to_string(root.rank) +
         ", whose program had ended, waited for it (WEFT_COLLECTIVE_TIMEOUT)";
  else
    m += "never reached the collective instance " + std::to_string(root.rank) +
         " waited in (stuck, stopped or too slow; WEFT_COLLECTIVE_TIMEOUT)";
  m += "; instance " + std::to_string(root.rank) + " reported: " + root.text;
  root.blamed = m;
  root.rank = k;
}

}  // namespace weftrun
