// The executor's shared runs at run time (WEFT_SHARED_RUNS; which runs: program/shared_runs.hpp). At a
// segment of shared runs every local replica of the execution posts to one rendezvous (the collectives'
// kind: deadlines, abort, departure, transport/rendezvous.hpp); the last to arrive allocates each shared
// run's results once per group of replicas (a class of the runs' replica classes, whose inputs the
// types prove equal); then each replica walks the segment: its block-aligned part of every shared run, from
// its own copies of the inputs, into the group's results (allocated by the first of the group to reach the
// run), and every other step itself, as always. A second
// barrier (the round's finish) ends the segment, after which every replica of a group holds the same result
// buffers. Why: a data-parallel step's update is the same on every replica; split, the local replicas do it
// once between them, and keep one copy of its results instead of one each.
//
// The replicas of a traced pmap run the same program (PmapOptions::shared_products, SessionOptions::
// shared_products say so), so they reach the same segments in the same order; a replica at another segment
// fails the round with a MismatchError naming it, one that returned with a PeerLostError, one that never
// comes is named by the stall warning and TimeoutError of the collectives' deadlines. The results are charged
// to the device of the replica that allocated them. Mode 2 also compares every replica's inputs of the shared
// runs that exist when the segment starts with its group's first's (a MismatchError if they differ: the types
// promised they were equal).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "program/fusion.hpp"
#include "program/shared_runs.hpp"
#include "transport/rendezvous.hpp"
#include "weft/array.hpp"

namespace weft::detail {

class Execution;

class RunSharing {
 public:
  RunSharing(Execution& execution, int mode);

  // Local replica `local` runs `segment` of `program` (`steps`: its steps; `program_id`: what the replicas
  // must agree on) over its `values`: its parts of the shared runs, and `run_step(s)` for every other step
  // s of the segment (the executor's own evaluation, liveness included). `release(s)` drops what the shared
  // step s leaves dead. On return the shared runs' results (whole: every replica's parts written) are in
  // `values`.
  void run_segment(int local, const void* program_id, std::size_t segment_index, const program::Program& program,
                   const std::vector<program::Step>& steps, const program::SharedSegment& segment,
                   std::vector<std::optional<Array>>& values, const std::function<void(std::size_t)>& run_step,
                   const std::function<void(std::size_t)>& release, const transport::Describe& what);

  bool abort(int local, const std::string& cause) { return rendezvous_.abort(local, cause); }
  void depart(int local) { rendezvous_.depart(local); }

 private:
  struct Request {
    const void* program_id;
    std::size_t segment_index;
    int group;  // the replica's class among the segment's (SharedSegment::classes)
    const program::Program* program;
    const std::vector<program::Step>* steps;
    const program::SharedSegment* segment;
    const std::vector<std::optional<Array>>* values;
  };
  // Per shared step of the segment: its materialized values and their data (written part by part), made by
  // the first replica of the group to reach the step (so that a long segment does not hold every result from
  // its start: a pipeline's spans the backward pass).
  struct Results {
    std::once_flag made;
    std::vector<Array> arrays;
    std::vector<std::byte*> data;
  };
  struct Group {
    std::unique_ptr<Results[]> results;
  };
  struct Outcome {
    std::vector<Group> groups;
    std::vector<int> group_of, rank, size;  // per local replica: its group, its part and the group's parts
  };
  std::shared_ptr<const Outcome> complete(std::span<const Request* const> requests) const;

  Execution& execution_;
  const int mode_;
  transport::Rendezvous<Request, Outcome> rendezvous_;
};

}  // namespace weft::detail
