// A replica that overflows its stack (deep recursion, large arrays on the stack) hits the guard page below
// it, and the process dies of SIGSEGV. Without help that is a bare "Segmentation fault"; with a handler on a
// signal stack of its own (the overflowing stack has no room left), the process prints one line first:
//   weft: fatal: replica 3 overflowed its stack (8 MiB, a fiber): deep recursion or large arrays on the
//   stack in its own code; raise it with WEFT_FIBER_STACK (bytes, K/M/G; RuntimeOptions::fiber_stack_bytes)
// and then dies of the same signal as before (the default action, so cores and exit statuses stay as they
// were). A fault anywhere else goes to the handler that was there before, or the default action. Not in the
// sanitizer builds, whose runtimes report overflows themselves.
#pragma once
#include <cstddef>

namespace weft::detail {

// While any of these lives (Execution::run holds one for its execution, on the calling thread), SIGSEGV goes
// to the overflow report first; when the last ends the handler found before is back (one installed meanwhile
// by someone else stays). weft leaves SIGSEGV's disposition as it found it.
class OverflowReportsInstalled {
 public:
  OverflowReportsInstalled();
  ~OverflowReportsInstalled();
  OverflowReportsInstalled(const OverflowReportsInstalled&) = delete;
  OverflowReportsInstalled& operator=(const OverflowReportsInstalled&) = delete;
};

// On each thread that runs replicas, for as long as it does: a signal stack for the report if the thread has
// none, removed again when this ends (the thread may be the embedder's: a pmap's caller runs replicas too).
class ReplicaSignalStack {
 public:
  ReplicaSignalStack();
  ~ReplicaSignalStack();
  ReplicaSignalStack(const ReplicaSignalStack&) = delete;
  ReplicaSignalStack& operator=(const ReplicaSignalStack&) = delete;

 private:
  [[maybe_unused]] bool own_ = false;
};

// The stack this thread runs a replica on now: its guard region [guard_begin, guard_end) (a fault there, or
// just below it, is an overflow), its size, and whether it is a fiber's (WEFT_FIBER_STACK) or the thread's own
// (ulimit -s). The replica is the log's (set_log_replica), read when the fault comes.
void enter_replica_stack(const void* guard_begin, const void* guard_end, std::size_t bytes, bool fiber);
void leave_replica_stack();
// For a thread that runs replicas on its own stack: enter_replica_stack with that stack's guard.
void enter_own_thread_stack();

}  // namespace weft::detail
