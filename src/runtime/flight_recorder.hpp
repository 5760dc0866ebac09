// Flight recorder (reliability R21; WEFT_FLIGHT_RECORDER, WEFT_DUMP; docs/reliability.md "Flight recorder").
//
// Each local device keeps a fixed ring of the last N collectives its replicas entered (seq, op, group, dtype,
// element count, state, wall-clock times, call site), across executions. When a replica's function fails
// (a timeout, an abort, a mismatch, its own exception) and WEFT_DUMP names a directory, the replica writes
// its ring as JSON to <dir>/weft-flight.<instance>.<replica>.json before leaving; scripts/flight_analyze.py
// lines the dumps up and names who never reached the stuck collective.
//
// Why per device and written by the replica itself: a device runs its replicas on one worker thread, one at
// a time, so a ring has exactly one writer and its dump is written by that same thread: no lock, no atomic,
// nothing shared with other replicas. The cost per collective is two clock reads and filling one slot
// (no allocation: the call site and op name are static strings, the execution name is copied into a fixed
// buffer; the group is a shared pointer the request already holds).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error_kind.hpp"
#include "weft/dtype.hpp"
#include "weft/groups.hpp"

namespace weft::detail {

class FlightRing {
 public:
  enum class State : std::uint8_t { started, completed, failed };
  struct Record {
    std::uint64_t execution = 0;  // the runtime's execution serial (pmap calls and session runs, from 0)
    std::uint64_t seq = 0;        // the collective's sequence number in that execution (as reports print it)
    const char* api = "";
    const char* file = "";
    unsigned line = 0;
    DType dtype = DType::f32;
    std::int64_t count = 0;  // elements of this replica's input
    std::shared_ptr<const ReplicaGroups> groups;
    int replica = 0;   // global replica index in the execution
    int replicas = 0;  // replicas of the execution
    State state = State::started;
    // The execution had already been aborted (here or in another instance) when the replica entered: it
    // never met the others at this collective, it only came late.
    bool entered_after_abort = false;
    std::int64_t start_us = 0, end_us = 0;  // wall clock, microseconds since the epoch
    char execution_name[48] = {};           // truncated
    ErrorKind error_kind = ErrorKind::error;
    std::string error;  // first line of the failure; empty unless failed (cleared, not freed, on reuse)
  };

  // The records are allocated as collectives fill them, up to `capacity` (issue 21, item 11: 10^6 records
  // on 8 devices were 1.4 GB up front); running out of memory growing them is an OutOfMemoryError naming
  // WEFT_FLIGHT_RECORDER.
  explicit FlightRing(int capacity) : capacity_(static_cast<std::size_t>(capacity)) {}

  // Opens a record for a collective the replica entered; it stays "started" until complete() or fail().
  // Throws OutOfMemoryError when the ring cannot grow.
  void start(std::uint64_t execution, const std::string& execution_name, std::uint64_t seq, const char* api,
             const char* file, unsigned line, DType dtype, std::int64_t count,
             const std::shared_ptr<const ReplicaGroups>& groups, int replica, int replicas, bool after_abort);
  void complete();
  // Marks the open record (if any) failed with `error`'s kind and first line.
  void fail(const ErrorRecord& error);

  // The ring as JSON (oldest record first), with what identifies the writer.
  struct Context {
    int instance = 0, instances = 1, replica = 0, device = 0;
    std::uint64_t execution = 0;
    std::string execution_name;
    int replicas = 0;
    std::string error;  // the replica's failure, first line
  };
  std::string to_json(const Context& context) const;

  // Writes to_json to <dir>/weft-flight.<instance>.<replica>.json through io::AtomicFile (a temporary of an
  // unpredictable name, O_EXCL|O_NOFOLLOW, renamed: a reader never sees half a dump, and a name planted in a
  // shared directory is never written through); not fsynced. Never throws: a failure is logged as a "weft: error: WEFT_DUMP:"
  // line naming the file and the reason. Returns whether the dump was written.
  bool dump(const std::string& dir, const Context& context) const;

 private:
  std::size_t capacity_;
  std::vector<Record> records_;  // grows to capacity_, then is reused oldest first
  std::uint64_t entered_ = 0;  // records started over the ring's life; the newest is at (entered_ - 1) % N
  bool open_ = false;
};

// The rings of this process's devices (null entries for other processes' devices).
struct FlightRecorder {
  FlightRecorder(int devices, int first_local, int local, int capacity) : rings(static_cast<std::size_t>(devices)) {
    for (int d = first_local; d < first_local + local; ++d) rings[d] = std::make_unique<FlightRing>(capacity);
  }
  std::vector<std::unique_ptr<FlightRing>> rings;  // by device id
};

}  // namespace weft::detail
