// Fault injection (WEFT_FAULT, RuntimeOptions::fault; docs/reliability.md "Fault injection"; issue 8, item 15).
//
// A fault plan makes a chosen replica, or a chosen instance of a weftrun job, misbehave at a chosen collective:
// throw, hang, exit, be killed by a signal, send a mismatched request, or corrupt its data silently. Every failure path the runtime and
// weftrun promise to handle (reliability R1, R2, R3, R8, R10), and the wrong results that only a checker
// of results can see (R19), can so be reproduced from outside an unchanged
// program: by the tests (one generic program instead of one bespoke program per fault), and by users
// replaying an incident.
//
// The plan is parsed and validated once, with the other settings (RuntimeOptions::resolved), and bound to
// the job when the Runtime starts. The collective funnel (replica.cc, run_collective) makes one call,
// FaultPlan::at_collective, behind a null check: without a plan a collective pays one predictable branch.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/request.hpp"
#include "weft/array.hpp"

namespace weft::detail {

struct ReplicaState;

enum class FaultAction { throw_error, hang, exit, signal, mismatch, corrupt };
enum class MismatchField { shape, dtype, op };

struct Fault {
  bool instance = false;        // the target is an instance (its first local replica acts), not a replica
  int target = 0;               // global replica id (Replica::index()) or instance index
  std::uint64_t at = 0;         // the target replica's collective number, counted from 0 (as seq and histories are)
  FaultAction action = FaultAction::throw_error;
  int code = 0;                 // exit: the exit status; signal: the signal number (kill = SIGKILL)
  double hang_s = 0;            // hang: how long; 0 = until the execution is aborted
  MismatchField field = MismatchField::shape;
  std::string text;             // the fault as written, for messages
};

class FaultPlan {
 public:
  // "replica=2:at=5:throw;instance=1:at=3:kill". Throws InvalidArgument "WEFT_FAULT=<text>: <why>" (the
  // grammar is in docs/reliability.md). An empty text is an empty plan.
  static std::vector<Fault> parse(std::string_view text);

  // A plan for a runtime of `replicas` global devices in a job of `instances` processes, this one being
  // `instance`. A target that does not exist in the job is an InvalidArgument naming it.
  FaultPlan(std::string_view text, int instance, int instances, int replicas);

  // The funnel's hook, before the request is validated: counts the replica's collective and, when a fault
  // targets it, acts (throws, sleeps, ends the process, or points req.input at `substitute`, an altered copy
  // or view of the input that the caller keeps alive for the collective).
  void at_collective(ReplicaState& st, collectives::Request& req, std::optional<Array>& substitute);

 private:
  void act(const Fault& f, ReplicaState& st, collectives::Request& req, std::optional<Array>& substitute,
           std::uint64_t n);
  std::vector<Fault> faults_;
  int instance_ = 0;
  int replicas_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // collectives entered, per global replica
};

}  // namespace weft::detail
