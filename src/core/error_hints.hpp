// One-line hints for the most common runtime errors (reliability R23): the likely cause and the knob (or the
// code) to change, appended as the error's last line "  hint: ...". Kept here, in the core layer, because
// the errors are raised by several layers (the rendezvous in transport, the request check in runtime).
// Tests assert these texts (tests/inproc/error_hints_test.cc), written out independently.
#pragma once

namespace weft::hints {

// TimeoutError at a collective (the rendezvous' deadline).
inline constexpr const char* kCollectiveTimeout =
    "\n  hint: the missing replicas are still in their own code (a long computation, a deadlock, a wait on "
    "something outside weft) or took a path without this collective; if they are only slow, raise "
    "WEFT_COLLECTIVE_TIMEOUT (seconds; 0 = never)";

// TimeoutError at a collective whose missing replicas share a fiber worker with one that holds it.
inline constexpr const char* kWorkerHeld =
    "\n  hint: under WEFT_SCHEDULER=fibers the replicas of a worker thread take turns, so one that blocks in its "
    "own code (a lock held across a collective, a sleep, a blocking call) stops the others of its worker; "
    "synchronise replicas with collectives, not locks, or run them with WEFT_SCHEDULER=threads";

// PeerLostError: a replica returned from its function while others wait for it at a collective.
inline constexpr const char* kReturnedEarly =
    "\n  hint: the replicas took different paths: every replica must issue the same collectives in the same "
    "order (look for a return or a loop bound that depends on the replica's index or data)";

// MismatchError: the replicas' requests differ at one sequence number.
inline constexpr const char* kMismatch =
    "\n  hint: the replicas called different collectives at the same point (a branch on the replica's index or "
    "data, a skipped or extra collective, or inputs of different shapes or dtypes); every replica must call the "
    "same collective with the same shape, dtype, reduce op and groups";

}  // namespace weft::hints
