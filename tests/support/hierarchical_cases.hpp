// The hierarchical algorithms' test table, shared by the two programs that run it: over the in-process
// transport (tests/inproc/hierarchical_test.cc, one thread per simulated process) and over the MPI
// transport (tests/mpi/hierarchical_program.cc, under weftrun). Each case says how many replicas each
// process holds, the groups, the op, the dtype and the input shape; RunOnProcess calls
// collectives::plan_across_processes with requests built as src/runtime/replica.cc builds them, and
// Reference computes every replica's expected output with plain loops over all replicas' inputs.
//
// Comparison: "exact" inputs are small integers, plus multiples of 1/64 for floats, so every partial sum
// is exact whatever the order of summation (member order inside a process, then process order, the pair
// exchange's or the ring's segment order): those results must equal the reference bitwise, the mean's too
// (one division of an exact sum, rounded as the kernels round it). "Noisy" inputs are reals with full
// mantissas: the paths sum in different orders, so those are compared within (g+1)·ε·Σ|x| per element
// (g the group size, ε the dtype's epsilon), and the in-process test also checks that the members of a
// group agree bitwise with each other, whichever process holds them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/request.hpp"
#include "arrays.hpp"
#include "transport/interprocess.hpp"
#include "weft/array.hpp"
#include "weft/groups.hpp"

namespace weft::testing {

enum class GroupLayout {
  all,       // one group of every replica, in order
  reversed,  // one group of every replica, in reverse order (ranks in group differ from replica ids)
  strided,   // groups of 2 members R/2 apart (each spans processes unless a process holds both)
  blocks,    // consecutive groups of 2 (some inside one process: the shared-memory path)
};

struct HierarchicalCase {
  std::vector<int> split;  // replicas per process: {1, 3} = process 0 holds replica 0, process 1 holds 1..3
  collectives::Kind kind = collectives::Kind::all_reduce;
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  Shape shape;  // every replica's input: [rows, cols]
  GroupLayout layout = GroupLayout::all;
  bool noisy = false;  // full-mantissa reals, compared within a tolerance (see above)
  bool tiled = false;  // all_gather: tiled along axis 1 instead of stacked on a new axis 0
  std::string path;    // which path of hierarchical.cc the case is for, for its name
  // Left out of the sanitizer builds, which run 5-10x slower: a 4 MiB ring is seconds there, and the ring
  // cases kept (three processes, two) exercise the same code for the race and memory checks.
  bool heavy = false;
  // Where the algorithms change (WEFT_SPLIT_BYTES, WEFT_RING_BYTES): the small-threshold cases take the pair
  // exchange and the ring on buffers of a few KiB, so every path runs quickly, under the sanitizers too.
  collectives::Thresholds sizes{};
};

// The thresholds of the small-threshold cases: split (and pair) from 1 KiB, the ring from 8 KiB.
inline constexpr collectives::Thresholds kSmallThresholds{1024, 8 * 1024};

inline const char* LayoutName(GroupLayout layout) {
  switch (layout) {
    case GroupLayout::all: return "all";
    case GroupLayout::reversed: return "reversed";
    case GroupLayout::strided: return "strided";
    case GroupLayout::blocks: return "blocks";
  }
  return "?";
}

// "p1_3_all_reduce_sum_float32_1025x1024_all_ring": unique in the table, and a valid gtest name.
inline std::string CaseName(const HierarchicalCase& c) {
  std::ostringstream name;  // a stream: GCC 12's -Wrestrict misfires on chains of std::string +
  name << "p";
  for (std::size_t i = 0; i < c.split.size(); ++i) name << (i ? "_" : "") << c.split[i];
  name << "_" << collectives::kind_name(c.kind);
  if (c.kind == collectives::Kind::all_reduce || c.kind == collectives::Kind::reduce_scatter)
    name << "_" << reduce_op_name(c.op);
  name << "_" << dtype_name(c.dtype) << "_" << c.shape[0] << "x" << c.shape[1] << "_" << LayoutName(c.layout);
  if (c.tiled) name << "_tiled";
  if (c.noisy) name << "_noisy";
  if (!c.path.empty()) name << "_" << c.path;
  if (c.sizes.split_bytes != collectives::Thresholds::kDefaultSplitBytes ||
      c.sizes.ring_bytes != collectives::Thresholds::kDefaultRingBytes)
    name << "_split" << c.sizes.split_bytes << "_ring" << c.sizes.ring_bytes;
  return name.str();
}

// The pair exchange and the ring again, with kSmallThresholds: the same paths on buffers of 1.5 and 8.25
// KiB (segments of unequal length for 3 processes), cheap enough for every build.
inline std::vector<HierarchicalCase> SmallThresholdCases() {
  using collectives::Kind;
  const Kind ar = Kind::all_reduce;
  const Shape tiny = {4, 12};       // 192 bytes of float32: below the split, the transport's allreduce
  const Shape mid = {16, 24};       // 1.5 KiB of float32: the pair exchange between two processes
  const Shape ring = {33, 64};      // 8 KiB + 256 bytes of float32
  const Shape ring_f64 = {17, 64};  // 8 KiB + 512 bytes of float64
  std::vector<HierarchicalCase> cases;
  auto add = [&](std::vector<int> split, Kind kind, ReduceOp op, DType dtype, Shape shape, GroupLayout layout,
                 bool noisy, std::string path) {
    HierarchicalCase c{std::move(split), kind, op, dtype, std::move(shape), layout, noisy, false, std::move(path)};
    c.sizes = kSmallThresholds;
    cases.push_back(std::move(c));
  };
  add({1, 2, 1}, ar, ReduceOp::sum, DType::f32, tiny, GroupLayout::all, false, "transport");
  for (const auto& split : std::vector<std::vector<int>>{{2, 2}, {1, 3}}) {
    add(split, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, false, "pair");
    add(split, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, true, "pair");
  }
  add({1, 2, 1}, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, false, "transport");
  add({1, 2, 1}, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::strided, false, "pair");
  add({1, 3}, ar, ReduceOp::mean, DType::i32, mid, GroupLayout::all, false, "gather");
  add({1, 3}, ar, ReduceOp::sum, DType::f32, ring, GroupLayout::all, false, "ring");
  add({2, 2}, ar, ReduceOp::sum, DType::f32, ring, GroupLayout::reversed, true, "ring");
  add({1, 2, 1}, ar, ReduceOp::sum, DType::f32, ring, GroupLayout::all, true, "ring");
  add({1, 1, 1, 1}, ar, ReduceOp::sum, DType::i32, ring, GroupLayout::all, false, "ring");
  add({2, 2}, ar, ReduceOp::mean, DType::f64, ring_f64, GroupLayout::all, false, "ring");
  add({1, 2, 1}, ar, ReduceOp::max, DType::i32, ring, GroupLayout::strided, false, "ring");
  add({2, 1, 2, 1}, ar, ReduceOp::sum, DType::f64, ring_f64, GroupLayout::blocks, false, "ring");
  return cases;
}

// The table. Sizes pick the paths of hierarchical.cc: small all-reduces go through the transport's
// allreduce; 256 KiB to 4 MiB between exactly two processes take the pair exchange (Thresholds::split_bytes);
// 4 MiB and more take the ring (Thresholds::ring_bytes); floating max/min and integer means are not reduced by
// either transport (can_reduce) and take the allgatherv exchange, as every other kind does. Then the same
// paths with small thresholds (SmallThresholdCases).
inline std::vector<HierarchicalCase> HierarchicalCases() {
  using collectives::Kind;
  const std::vector<std::vector<int>> splits = {{2, 2}, {1, 3}, {1, 2, 1}, {2, 2, 2}, {1, 1, 1, 1}, {2, 1, 2, 1}};
  const Shape small = {24, 12};      // 1152 bytes of float32; 24 rows split among groups of 2, 3, 4 or 6
  const Shape mid = {64, 2048};      // 512 KiB of float32
  const Shape ring = {1025, 1024};   // 4 MiB + 4 KiB of float32: segments of unequal length for 3 processes
  const Shape ring_f64 = {513, 1024};
  std::vector<HierarchicalCase> cases;
  for (const auto& split : splits) {
    const int replicas = std::accumulate(split.begin(), split.end(), 0);
    for (GroupLayout layout : {GroupLayout::all, GroupLayout::strided, GroupLayout::reversed, GroupLayout::blocks}) {
      if (replicas % 2 && (layout == GroupLayout::strided || layout == GroupLayout::blocks)) continue;
      auto add = [&](Kind kind, ReduceOp op, DType dtype, Shape shape, std::string path, bool noisy = false,
                     bool tiled = false) {
        cases.push_back({split, kind, op, dtype, std::move(shape), layout, noisy, tiled, std::move(path)});
      };
      // Every kind at a small size, in every layout.
      add(Kind::all_reduce, ReduceOp::sum, DType::f32, small, "transport");
      add(Kind::all_reduce, ReduceOp::max, DType::f32, small, "gather");
      add(Kind::all_reduce, ReduceOp::max, DType::i32, small, "transport");
      add(Kind::all_gather, ReduceOp::sum, DType::f32, small, "gather");
      add(Kind::reduce_scatter, ReduceOp::sum, DType::f32, small, "gather");
      add(Kind::all_to_all, ReduceOp::sum, DType::i32, small, "gather");
      add(Kind::ppermute, ReduceOp::sum, DType::f32, small, "gather");
      if (layout != GroupLayout::all) continue;
      // More dtypes and ops in the plain layout.
      add(Kind::all_reduce, ReduceOp::sum, DType::f64, small, "transport");
      add(Kind::all_reduce, ReduceOp::sum, DType::i32, small, "transport");
      add(Kind::all_reduce, ReduceOp::mean, DType::f32, small, "transport");
      add(Kind::all_reduce, ReduceOp::mean, DType::f64, small, "transport");
      add(Kind::all_reduce, ReduceOp::mean, DType::i32, small, "gather");
      add(Kind::all_reduce, ReduceOp::sum, DType::f32, small, "transport", /*noisy=*/true);
      add(Kind::all_gather, ReduceOp::sum, DType::i32, small, "gather", false, /*tiled=*/true);
      add(Kind::reduce_scatter, ReduceOp::max, DType::i32, small, "gather");
    }
  }
  // Mid-size: the pair exchange between two processes, the transport's allreduce among more, and large
  // exchanges of inputs. Few cases: these and the ring's take most of the test's time (TSan's too).
  const Kind ar = Kind::all_reduce;
  for (const auto& split : std::vector<std::vector<int>>{{2, 2}, {1, 3}}) {
    cases.push_back({split, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, false, false, "pair"});
    cases.push_back({split, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, true, false, "pair"});
  }
  cases.push_back({{1, 2, 1}, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, false, false, "transport"});
  cases.push_back({{1, 1, 1, 1}, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::all, true, false, "transport"});
  cases.push_back({{1, 2, 1}, ar, ReduceOp::sum, DType::f32, mid, GroupLayout::strided, false, false, "pair"});
  cases.push_back({{1, 3}, ar, ReduceOp::mean, DType::i32, mid, GroupLayout::all, false, false, "gather"});
  cases.push_back({{1, 3}, Kind::all_gather, ReduceOp::sum, DType::f32, mid, GroupLayout::all, false, false, "gather"});
  // The ring, for each process count, with uneven splits; exact and noisy sums, two dtypes, a mean, and
  // two groups of two processes each (one process in both).
  cases.push_back({{1, 3}, ar, ReduceOp::sum, DType::f32, ring, GroupLayout::all, false, false, "ring", true});
  cases.push_back({{1, 2, 1}, ar, ReduceOp::sum, DType::f32, ring, GroupLayout::all, true, false, "ring"});
  cases.push_back({{1, 1, 1, 1}, ar, ReduceOp::sum, DType::i32, ring, GroupLayout::all, false, false, "ring", true});
  cases.push_back({{2, 2}, ar, ReduceOp::mean, DType::f64, ring_f64, GroupLayout::all, false, false, "ring"});
  cases.push_back({{1, 2, 1}, ar, ReduceOp::max, DType::i32, ring, GroupLayout::strided, false, false, "ring", true});
  for (HierarchicalCase& c : SmallThresholdCases()) cases.push_back(std::move(c));
  return cases;
}

// Everything a process needs to run a case and check it: every replica's input (each process makes all of
// them: the reference needs them, and the MPI processes share nothing), as arrays and as doubles.
struct CaseData {
  int num_replicas = 0;
  std::vector<int> process_of;  // per global replica
  std::shared_ptr<const ReplicaGroups> groups;
  Permutation perm;  // ppermute: position k sends to k + 1 in its group, except the last (its target gets zeros)
  std::vector<Array> inputs;
  std::vector<std::vector<double>> values;  // inputs[r] as doubles
};

// Input element i of replica r: deterministic, different for every (replica, index) so a misplaced chunk shows.
inline double InputValue(const HierarchicalCase& c, int replica, std::int64_t i) {
  std::uint64_t x = static_cast<std::uint64_t>(replica + 1) * 0x9E3779B97F4A7C15ull ^
                    static_cast<std::uint64_t>(i + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  if (c.noisy) return static_cast<double>(x >> 11) * 0x1p-52 - 1.0;  // [-1, 1), 52 bits of mantissa
  const double k = static_cast<double>((x >> 40) % 17) - 8.0;
  return is_floating(c.dtype) ? k + static_cast<double>((x >> 20) % 64) / 64.0 : k;
}

inline CaseData PrepareCase(const HierarchicalCase& c) {
  CaseData d;
  for (std::size_t p = 0; p < c.split.size(); ++p)
    for (int k = 0; k < c.split[p]; ++k) d.process_of.push_back(static_cast<int>(p));
  const int n = d.num_replicas = static_cast<int>(d.process_of.size());
  std::vector<std::vector<int>> lists;
  switch (c.layout) {
    case GroupLayout::all:
    case GroupLayout::reversed:
      lists.emplace_back(n);
      std::iota(lists[0].begin(), lists[0].end(), 0);
      if (c.layout == GroupLayout::reversed) std::reverse(lists[0].begin(), lists[0].end());
      break;
    case GroupLayout::strided:
      for (int r = 0; r < n / 2; ++r) lists.push_back({r, r + n / 2});
      break;
    case GroupLayout::blocks:
      for (int r = 0; r < n; r += 2) lists.push_back({r, r + 1});
      break;
  }
  d.groups = std::make_shared<const ReplicaGroups>(ReplicaGroups::from_lists(n, lists));
  const int g = d.groups->group_size();
  for (int k = 0; k + 1 < g; ++k) d.perm.emplace_back(k, k + 1);
  const std::int64_t count = num_elements(c.shape);
  for (int r = 0; r < n; ++r) {
    std::vector<double> v(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = InputValue(c, r, i);
    d.inputs.push_back(Array::from_doubles(v, c.shape, c.dtype));
    d.values.push_back(d.inputs.back().to_doubles());  // as the dtype holds them (noisy float32 is rounded)
  }
  return d;
}

inline const char* ApiName(collectives::Kind kind) {
  switch (kind) {
    case collectives::Kind::all_reduce: return "all_reduce";
    case collectives::Kind::all_gather: return "all_gather";
    case collectives::Kind::reduce_scatter: return "reduce_scatter";
    case collectives::Kind::all_to_all: return "all_to_all";
    case collectives::Kind::ppermute: return "ppermute";
  }
  return "?";
}

// The request of replica r, as src/runtime/replica.cc makes it for the ReplicaGroups APIs
// (Replica::all_reduce, all_gather, reduce_scatter, all_to_all, ppermute over a grouping).
inline collectives::Request MakeRequest(const HierarchicalCase& c, const CaseData& d, int replica) {
  collectives::Request r;
  r.kind = c.kind;
  r.api_name = ApiName(c.kind);
  r.reduce = c.op;
  r.groups = d.groups;
  r.input = &d.inputs[static_cast<std::size_t>(replica)];
  r.replica = replica;
  switch (c.kind) {
    case collectives::Kind::all_gather:
      r.axis = c.tiled ? 1 : 0;
      r.tiled = c.tiled;
      break;
    case collectives::Kind::reduce_scatter:
      r.axis = 0;
      r.tiled = true;
      break;
    case collectives::Kind::all_to_all:
      r.axis = 0;
      r.concat_axis = 1;
      r.tiled = true;
      break;
    case collectives::Kind::ppermute: r.perm = &d.perm; break;
    case collectives::Kind::all_reduce: break;
  }
  return r;
}

// Runs case `c` as process job.rank() of a job whose processes hold the replicas c.split says: the round
// of the hierarchical path exactly as the runtime runs it by default (verify_across_processes and
// plan_across_processes, then each local
// replica's part if the plan splits the work). Returns the outputs at the global indices of this process's
// replicas (empty arrays elsewhere). Every process of the job calls it with the same case and round.
// `ring_ran`, when given, says whether the round's all-reduce went around the ring on this process.
inline std::vector<Array> RunOnProcess(const HierarchicalCase& c, const CaseData& d, transport::Interprocess& job,
                                       std::uint64_t round, const transport::PollContext& poll,
                                       bool* ring_ran = nullptr) {
  const int me = job.rank();
  std::vector<collectives::Request> storage;
  storage.reserve(static_cast<std::size_t>(d.num_replicas));
  std::vector<const collectives::Request*> requests(static_cast<std::size_t>(d.num_replicas), nullptr);
  for (int r = 0; r < d.num_replicas; ++r) {
    if (d.process_of[static_cast<std::size_t>(r)] != me) continue;
    storage.push_back(MakeRequest(c, d, r));
    collectives::validate(storage.back());
    requests[static_cast<std::size_t>(r)] = &storage.back();
  }
  std::vector<int> processes(c.split.size());
  std::iota(processes.begin(), processes.end(), 0);
  auto account_of = [](int) { return std::shared_ptr<MemoryAccount>(); };
  collectives::verify_across_processes(requests, job, processes, poll, round);  // on by default (WEFT_VERIFY)
  std::shared_ptr<collectives::Plan> plan =
      collectives::plan_across_processes(requests, d.process_of, job, account_of, poll, c.sizes);
  if (ring_ran) *ring_ran = plan->ring;
  std::vector<Array> out(static_cast<std::size_t>(d.num_replicas));
  for (int r = 0; r < d.num_replicas; ++r)
    if (requests[static_cast<std::size_t>(r)] && plan->split_work) collectives::execute_part(*plan, r);
  for (int r = 0; r < d.num_replicas; ++r)
    if (requests[static_cast<std::size_t>(r)]) out[static_cast<std::size_t>(r)] = plan->outputs[static_cast<std::size_t>(r)];
  return out;
}

// An Interprocess that counts the calls it forwards, so a test can check which path of hierarchical.cc a
// case took (ring and pair: sendrecv; small all-reduce: allreduce; everything else: allgatherv). With
// `share_memory` false it answers shared_regions with none, as for processes on different hosts, so the
// pair exchange that copies the partials runs too.
class CountingInterprocess final : public transport::Interprocess {
 public:
  explicit CountingInterprocess(transport::Interprocess& inner, bool share_memory = true)
      : inner_(inner), share_memory_(share_memory) {}
  int allreduces = 0, sendrecvs = 0, allgathervs = 0, agreements = 0;
  int shared = 0;  // shared_regions calls that gave regions

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string host() const override { return inner_.host(); }
  bool can_reduce(DType dtype, ReduceOp op) const override { return inner_.can_reduce(dtype, op); }
  void allreduce(const std::vector<int>& procs, void* data, std::int64_t count, DType dtype, ReduceOp op,
                 const transport::PollContext& poll) override {
    ++allreduces;
    inner_.allreduce(procs, data, count, dtype, op, poll);
  }
  void sendrecv(const std::vector<int>& procs, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, const transport::PollContext& poll) override {
    ++sendrecvs;
    inner_.sendrecv(procs, to, send, send_bytes, from, recv, recv_bytes, poll);
  }
  std::vector<std::byte*> shared_regions(const std::vector<int>& procs, std::size_t bytes,
                                         const transport::PollContext& poll) override {
    if (!share_memory_) return {};
    std::vector<std::byte*> regions = inner_.shared_regions(procs, bytes, poll);
    shared += !regions.empty();
    return regions;
  }
  void allgatherv(const std::vector<int>& procs, const void* send, const std::vector<std::size_t>& bytes, void* recv,
                  const transport::PollContext& poll) override {
    ++allgathervs;
    inner_.allgatherv(procs, send, bytes, recv, poll);
  }
  void mark_failed(const std::string& cause) override { inner_.mark_failed(cause); }
  bool peer_failed() const override { return inner_.peer_failed(); }
  bool agree(const std::vector<int>& procs, std::uint64_t fingerprint, const transport::PollContext& poll) override {
    ++agreements;
    return inner_.agree(procs, fingerprint, poll);
  }

 private:
  transport::Interprocess& inner_;
  const bool share_memory_;
};

// "" when the calls this process made fit the path the case is for, else what does not. A process in no
// group spanning processes moves no data; the others must have used exactly the path's calls, and gone
// around the ring (RunOnProcess's `ring_ran`) exactly when the case is for the ring.
inline std::string CheckPath(const HierarchicalCase& c, const CaseData& d, int process, const CountingInterprocess& calls,
                             bool ring_ran) {
  int spanning = 0;  // groups of this process's replicas that span processes
  for (const auto& members : d.groups->groups()) {
    bool mine = false, others = false;
    for (int m : members) (d.process_of[static_cast<std::size_t>(m)] == process ? mine : others) = true;
    spanning += mine && others;
  }
  const bool spans = spanning > 0;
  const bool ok = !spans ? calls.allreduces + calls.sendrecvs + calls.allgathervs == 0
                  : c.path == "ring" || c.path == "pair" ? calls.sendrecvs > 0 && calls.allreduces + calls.allgathervs == 0
                  : c.path == "transport"                ? calls.allreduces > 0 && calls.sendrecvs + calls.allgathervs == 0
                  : c.path == "gather" ? calls.allgathervs > 0 && calls.allreduces + calls.sendrecvs == 0
                                       : false;
  // The pair exchange is one message each way per group (two, both empty, through shared memory); the ring
  // has 2 (P - 1) steps.
  const int pair_messages = calls.shared > 0 ? 2 * spanning : spanning;
  if (ok && ring_ran == (spans && c.path == "ring") && !(c.path == "pair" && (calls.sendrecvs != pair_messages || (calls.shared > 0 && calls.shared != spanning))) &&
      calls.agreements == 1)
    return "";
  return CaseName(c) + ": process " + std::to_string(process) + " took another path than \"" + c.path + "\": " +
         std::to_string(calls.agreements) + " agree, " + std::to_string(calls.allreduces) + " allreduce, " +
         std::to_string(calls.sendrecvs) + " sendrecv, " + std::to_string(calls.allgathervs) + " allgatherv, " +
         std::to_string(calls.shared) + " shared_regions calls" + (ring_ran ? ", went around the ring" : "");
}

// What replica r must get: dtype, shape and values (as doubles), and per element the tolerance (empty:
// bitwise).
struct Expected {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> values;
  std::vector<double> tolerance;
};

// `v` as `dtype` holds it (float32 rounds; integers wrap).
inline double RoundTo(DType dtype, double v) {
  if (dtype == DType::f32) return static_cast<double>(static_cast<float>(v));
  if (dtype == DType::f64) return v;
  return WrapTo(static_cast<std::int64_t>(v), dtype);
}

// The naive reference: plain loops over the members' inputs, row-major [rows, cols] indexing.
inline Expected Reference(const HierarchicalCase& c, const CaseData& d, int replica) {
  using collectives::Kind;
  const ReplicaGroups& groups = *d.groups;
  const std::vector<int>& members = groups.members(groups.group_of(replica));
  const int g = static_cast<int>(members.size());
  const int k = groups.rank_in_group(replica);
  const std::int64_t rows = c.shape[0], cols = c.shape[1];
  auto x = [&](int position, std::int64_t row, std::int64_t col) {
    return d.values[static_cast<std::size_t>(members[static_cast<std::size_t>(position)])]
                   [static_cast<std::size_t>(row * cols + col)];
  };
  Expected e;
  e.dtype = c.dtype;
  const double eps = c.dtype == DType::f32 ? 0x1p-23 : 0x1p-52;
  // Reduces element (row, col) of every member's input (positions in `members` order).
  auto reduce = [&](std::int64_t row, std::int64_t col, double* tolerance) {
    double acc = x(0, row, col), magnitude = std::abs(acc);
    for (int m = 1; m < g; ++m) {
      const double v = x(m, row, col);
      magnitude += std::abs(v);
      switch (c.op) {
        case ReduceOp::sum:
        case ReduceOp::mean: acc += v; break;
        case ReduceOp::prod: acc *= v; break;
        case ReduceOp::max: acc = std::max(acc, v); break;
        case ReduceOp::min: acc = std::min(acc, v); break;
      }
    }
    if (c.op == ReduceOp::mean) {
      if (c.dtype == DType::f64) return acc / g;
      // float32 and integer means divide in float32 (the kernels' output dtype): an exact sum, one rounding.
      const double mean = static_cast<double>(static_cast<float>(acc) / static_cast<float>(g));
      if (tolerance) *tolerance = (g + 1) * eps * magnitude / g;
      return c.noisy ? acc / g : mean;
    }
    if (tolerance) *tolerance = (g + 1) * eps * magnitude;
    return c.noisy ? acc : RoundTo(c.dtype, acc);
  };
  switch (c.kind) {
    case Kind::all_reduce: {
      if (c.op == ReduceOp::mean && !is_floating(c.dtype)) e.dtype = DType::f32;
      e.shape = c.shape;
      e.values.resize(static_cast<std::size_t>(rows * cols));
      if (c.noisy) e.tolerance.resize(e.values.size());
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
          const auto at = static_cast<std::size_t>(i * cols + j);
          e.values[at] = reduce(i, j, c.noisy ? &e.tolerance[at] : nullptr);
        }
      break;
    }
    case Kind::all_gather:
      if (!c.tiled) {  // stacked: [g, rows, cols], block m is member m's input
        e.shape = {g, rows, cols};
        for (int m = 0; m < g; ++m)
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j) e.values.push_back(x(m, i, j));
      } else {  // tiled along axis 1: [rows, g * cols]
        e.shape = {rows, g * cols};
        for (std::int64_t i = 0; i < rows; ++i)
          for (int m = 0; m < g; ++m)
            for (std::int64_t j = 0; j < cols; ++j) e.values.push_back(x(m, i, j));
      }
      break;
    case Kind::reduce_scatter: {  // tiled along axis 0: member k gets rows [k * rows/g, (k+1) * rows/g) reduced
      const std::int64_t chunk = rows / g;
      e.shape = {chunk, cols};
      for (std::int64_t i = 0; i < chunk; ++i)
        for (std::int64_t j = 0; j < cols; ++j) e.values.push_back(reduce(k * chunk + i, j, nullptr));
      break;
    }
    case Kind::all_to_all: {  // split axis 0, concatenate axis 1: [rows/g, g * cols]
      const std::int64_t chunk = rows / g;
      e.shape = {chunk, g * cols};
      for (std::int64_t i = 0; i < chunk; ++i)
        for (int m = 0; m < g; ++m)
          for (std::int64_t j = 0; j < cols; ++j) e.values.push_back(x(m, k * chunk + i, j));
      break;
    }
    case Kind::ppermute: {  // position k receives from the position sending to it, else zeros
      e.shape = c.shape;
      int source = -1;
      for (auto [s, t] : d.perm)
        if (t == k) source = s;
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) e.values.push_back(source < 0 ? 0.0 : x(source, i, j));
      break;
    }
  }
  return e;
}

inline std::string Num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// The references of a process's replicas, computed once per group where every member gets the same output
// (all_reduce, all_gather). One per thread: it is not synchronized.
class References {
 public:
  References(const HierarchicalCase& c, const CaseData& d) : c_(c), d_(d) {}
  const Expected& of(int replica) {
    const bool shared = c_.kind == collectives::Kind::all_reduce || c_.kind == collectives::Kind::all_gather;
    const int key = shared ? -1 - d_.groups->group_of(replica) : replica;
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, Reference(c_, d_, replica)).first;
    return it->second;
  }

 private:
  const HierarchicalCase& c_;
  const CaseData& d_;
  std::map<int, Expected> cache_;
};

// "" when `got` is what replica r must get, else what differs (dtype, shape, or the first few elements).
inline std::string Compare(const HierarchicalCase& c, const CaseData& d, int replica, const Array& got,
                           References& references) {
  const Expected& want = references.of(replica);
  const std::string who = CaseName(c) + ": replica " + std::to_string(replica) + " (process " +
                          std::to_string(d.process_of[static_cast<std::size_t>(replica)]) + ")";
  if (got.dtype() != want.dtype)
    return who + ": dtype " + std::string(dtype_name(got.dtype())) + ", expected " + std::string(dtype_name(want.dtype));
  if (got.shape() != want.shape) return who + ": shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape);
  const std::vector<double> values = got.to_doubles();
  std::string report;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bool ok = want.tolerance.empty() ? values[i] == want.values[i]
                                           : std::abs(values[i] - want.values[i]) <= want.tolerance[i];
    if (ok) continue;
    if (++wrong <= 3)
      report += "\n  [" + std::to_string(i) + "] got " + Num(values[i]) + ", expected " + Num(want.values[i]) +
                (want.tolerance.empty() ? " (bitwise)" : " (within " + Num(want.tolerance[i]) + ")");
  }
  if (!wrong) return "";
  return who + ": " + std::to_string(wrong) + " of " + std::to_string(values.size()) + " elements differ" + report;
}

}  // namespace weft::testing
