// weft-bench: collective bandwidth benchmarks in the style of nccl-tests.
//
//   weft-bench --op allreduce --devices 8 --sizes 4K,1M,64M [--budget-ms 200] [--reps 5] [--iters N]
//              [--warmup N] [--dtype float32] [--no-check] [--json] [--verbose]
//   weft-bench --op dispatch [--devices 8]  (the cost of one call of an empty pmapped function)
//   weft-bench --op psum_call [--devices 8] [--traced]  (one call of a pmapped function that psums a scalar;
//              --traced: of pmap(jit(f)), the function traced once into a program every replica runs)
//   weft-bench --op membw [--devices 2]     (host copy bandwidth, the ceiling for in-process collectives)
//   weft-bench --op allreduce --sweep [--sweep-devices 2,4,...,64] [--sizes 4K,...,256M] [--max-memory 6G]
//              (every size at every device count, one JSON line each; points whose buffers would pass
//              --max-memory are reported as skipped; scripts/plot_benchmarks.py draws them)
//
// Per size: every replica's input is placed on its device before timing; a first pmap call then runs, in every
// replica, warm-up collectives in doubling batches until a tenth of the budget has passed, which plan the
// iterations of a repetition (~budget-ms; fixed with --iters); a second call of the same program runs `reps`
// repetitions, each started by a barrier and timed by the first replica of each process, the slowest
// process's time counting (a pmax).
// The reported time is the median over repetitions: the scheme of bench/mpi_collectives.c, so both sides
// are measured alike (OSU / nccl-tests conventions). So the number is the collective itself, not pmap
// launch, placement or readback (docs/benchmarks.md explains why one replica's clock is enough). The last
// iteration's outputs are then compared, element by element and for every replica, with values computed
// independently here on the host; any wrong element makes the exit status non-zero.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <weft/weft.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using weft::Array;
using weft::DType;
using weft::Replica;

constexpr const char* kAxis = "i";
// Input values are (replica + 1) + (index % kPeriod): small integers, so float sums are exact, and a chunk
// put at the wrong offset or taken from the wrong replica shows up as a wrong value.
constexpr int kPeriod = 97;
constexpr std::int64_t kMembwDefaultBytes = std::int64_t{512} << 20;
constexpr int kMembwDefaultThreads = 2;
constexpr int kMembwDefaultIters = 20;

// ---- command line ------------------------------------------------------------------------------------

enum class Op { allreduce, all_gather, reduce_scatter, all_to_all, ppermute, dispatch, psum_call, membw };

const std::map<std::string, Op> kOpNames = {
    {"allreduce", Op::allreduce},   {"all_gather", Op::all_gather}, {"reduce_scatter", Op::reduce_scatter},
    {"all_to_all", Op::all_to_all}, {"ppermute", Op::ppermute},     {"dispatch", Op::dispatch},
    {"membw", Op::membw},           {"psum_call", Op::psum_call},
};

std::string op_name(Op op) {
  for (const auto& [name, value] : kOpNames)
    if (value == op) return name;
  return "?";
}

struct Options {
  Op op = Op::allreduce;
  int devices = 8;
  std::vector<std::int64_t> sizes;  // bytes of one replica's input buffer
  int iters = 0;            // 0: planned from the warm-up so that a repetition lasts ~budget_ms
  int warmup = 0;           // extra untimed calls before the planning warm-up
  int reps = 5;             // repetitions; the median counts
  double budget_ms = 200;
  DType dtype = DType::f32;
  bool check = true;
  bool json = false;
  bool verbose = false;
  bool traced = false;         // dispatch, psum_call: pmap(jit(f)) (weft/jit.hpp) instead of pmap(f)
  bool devices_given = false;  // --devices on the command line (else: 8, or the job's devices under weftrun)
  std::int64_t max_memory = 0;  // --sweep: skip points whose buffers would need more (0: no limit)
};

// "4K" -> 4096, "64M" -> 67108864, "1G", "100" (binary multiples, as nccl-tests' -b/-e).
std::int64_t parse_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || text.size() - digits > 1 || digits > 15)
    throw CLI::ValidationError("--sizes", "bad size '" + text + "' (expected a number with an optional K, M or G)");
  std::int64_t value = std::stoll(text.substr(0, digits));
  if (digits < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[digits]))) {
      case 'K': value <<= 10; break;
      case 'M': value <<= 20; break;
      case 'G': value <<= 30; break;
      default:
        throw CLI::ValidationError("--sizes", "bad size suffix in '" + text + "' (use K, M or G)");
    }
  }
  if (value <= 0) throw CLI::ValidationError("--sizes", "sizes must be positive, got '" + text + "'");
  return value;
}

std::vector<std::int64_t> parse_sizes(const std::string& list) {
  std::vector<std::int64_t> sizes;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty()) sizes.push_back(parse_size(item));
  if (sizes.empty()) throw CLI::ValidationError("--sizes", "no sizes given");
  return sizes;
}

// ---- element codecs: how a value (a small integer, as double) is stored in each dtype ------------------

// Integers wrap modulo 2^bits, exactly as the runtime's integer sums do, so the host expectation of a
// reduction that overflows (int8 with many replicas) is still exact.
template <class T>
struct NumericCodec {
  using Storage = T;
  static T encode(double v) {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(v);
    else
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<std::int64_t>(v)));
  }
  static double decode(T v) { return static_cast<double>(v); }
};

struct HalfCodec {
  using Storage = std::uint16_t;
  static Storage encode(double v) { return weft::double_to_half(v); }
  static double decode(Storage v) { return weft::half_to_float(v); }
};

struct BFloat16Codec {
  using Storage = std::uint16_t;
  static Storage encode(double v) { return weft::double_to_bf16(v); }
  static double decode(Storage v) { return weft::bf16_to_float(v); }
};

// Calls f(Codec{}) for the codec of `dtype`.
template <class F>
decltype(auto) visit_codec(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(NumericCodec<float>{});
    case DType::f64: return f(NumericCodec<double>{});
    case DType::f16: return f(HalfCodec{});
    case DType::bf16: return f(BFloat16Codec{});
    case DType::i8: return f(NumericCodec<std::int8_t>{});
    case DType::i32: return f(NumericCodec<std::int32_t>{});
    case DType::i64: return f(NumericCodec<std::int64_t>{});
    case DType::u8: return f(NumericCodec<std::uint8_t>{});
    case DType::boolean: break;
  }
  // bool sums change dtype (to int32) and every input would be `true`: nothing useful to measure.
  throw weft::InvalidArgument("weft-bench does not support dtype bool");
}

// Encoded input values and reduction results, indexed by (index % kPeriod). Rows 0..n-1: replica r's
// inputs; row n: the sum over all replicas, computed from the *stored* inputs (so rounding of 16-bit floats
// is accounted for) and rounded once, as the runtime accumulates in a wider type and rounds once.
template <class Codec>
struct ValueTable {
  using S = typename Codec::Storage;
  std::vector<std::array<S, kPeriod>> rows;

  explicit ValueTable(int replicas) : rows(replicas + 1) {
    for (int q = 0; q < kPeriod; ++q) {
      double sum = 0;
      for (int r = 0; r < replicas; ++r) {
        rows[r][q] = Codec::encode((r + 1) + q);
        sum += Codec::decode(rows[r][q]);
      }
      rows[replicas][q] = Codec::encode(sum);
    }
  }
  int sum_row() const { return static_cast<int>(rows.size()) - 1; }
};

// Writes row[(first + i) % kPeriod] to out[i] for i in [0, count).
template <class S>
void fill_periodic(S* out, std::int64_t count, const std::array<S, kPeriod>& row, std::int64_t first) {
  int q = static_cast<int>(first % kPeriod);
  for (std::int64_t i = 0; i < count; ++i) {
    out[i] = row[q];
    if (++q == kPeriod) q = 0;
  }
}

// Counts i in [0, count) with out[i] != row[(first + i) % kPeriod].
template <class S>
std::int64_t count_periodic_mismatches(const S* out, std::int64_t count, const std::array<S, kPeriod>& row,
                                       std::int64_t first) {
  std::int64_t wrong = 0;
  int q = static_cast<int>(first % kPeriod);
  for (std::int64_t i = 0; i < count; ++i) {
    wrong += out[i] != row[q];
    if (++q == kPeriod) q = 0;
  }
  return wrong;
}

// ---- what each op computes, described independently of the runtime ----------------------------------

// nccl-tests' factor from algorithm bandwidth to bus bandwidth (PERFORMANCE.md).
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::allreduce: return 2.0 * (n - 1) / n;
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all: return static_cast<double>(n - 1) / n;
    case Op::ppermute:
    case Op::dispatch:
    case Op::psum_call:
    case Op::membw: return 1.0;
  }
  return 1.0;
}

// Ops whose input is viewed as [n, count / n]: one chunk per group member.
bool chunked(Op op) { return op == Op::reduce_scatter || op == Op::all_to_all; }

// The benchmark's geometry for one requested size.
struct Geometry {
  int n = 0;                // replicas
  std::int64_t count = 0;   // elements of one replica's input
  weft::Shape input_shape;
  std::int64_t reported_bytes = 0;  // nccl-tests' "size" (see docs/benchmarks.md)
};

Geometry geometry(Op op, int n, std::int64_t bytes, DType dtype) {
  Geometry g;
  g.n = n;
  const auto element = static_cast<std::int64_t>(weft::dtype_size(dtype));
  g.count = bytes / element;
  if (chunked(op)) g.count -= g.count % n;  // as nccl-tests rounds counts to a multiple of nranks
  if (g.count <= 0)
    throw weft::InvalidArgument("size " + std::to_string(bytes) + " B holds no whole " +
                                (chunked(op) ? std::to_string(n) + " elements" : std::string("element")) + " of " +
                                std::string(weft::dtype_name(dtype)));
  g.input_shape = chunked(op) ? weft::Shape{n, g.count / n} : weft::Shape{g.count};
  // all_gather: nccl-tests reports the gathered (output) buffer, n times one rank's input; every other op
  // reports one rank's input buffer.
  g.reported_bytes = g.count * element * (op == Op::all_gather ? n : 1);
  return g;
}

// One contiguous run of a replica's output: `length` elements equal to row `source` of the value table
// (a replica, or the sum row) starting at input index `first`.
struct Segment {
  std::int64_t length;
  int source;
  std::int64_t first;
};

// Replica k's expected output, as segments, for the collectives run_op issues.
std::vector<Segment> expected_segments(Op op, const Geometry& g, int k, int sum_row) {
  const std::int64_t chunk = g.count / g.n;
  std::vector<Segment> segments;
  switch (op) {
    case Op::allreduce:  // everyone gets the elementwise sum
      segments.push_back({g.count, sum_row, 0});
      break;
    case Op::all_gather:  // [n, count]: row m is replica m's input
      for (int m = 0; m < g.n; ++m) segments.push_back({g.count, m, 0});
      break;
    case Op::reduce_scatter:  // chunk k of the sum
      segments.push_back({chunk, sum_row, k * chunk});
      break;
    case Op::all_to_all:  // [n, chunk]: row m is chunk k of replica m's input
      for (int m = 0; m < g.n; ++m) segments.push_back({chunk, m, k * chunk});
      break;
    case Op::ppermute:  // ring shift: replica k receives replica k-1's input
      segments.push_back({g.count, (k + g.n - 1) % g.n, 0});
      break;
    case Op::dispatch:
    case Op::psum_call:
    case Op::membw:
      break;
  }
  return segments;
}

// The collective under test, in the replica. Shapes match geometry(): see expected_segments.
Array run_op(Op op, Replica& r, const Array& x, const weft::Permutation& ring) {
  switch (op) {
    case Op::allreduce: return r.psum(x, kAxis);
    case Op::all_gather: return r.all_gather(x, kAxis);
    case Op::reduce_scatter: return r.psum_scatter(x, kAxis);
    case Op::all_to_all: return r.all_to_all(x, kAxis, /*split_axis=*/0, /*concat_axis=*/0);
    case Op::ppermute: return r.ppermute(x, kAxis, ring);
    case Op::dispatch:
    case Op::psum_call:
    case Op::membw: break;
  }
  throw weft::InvalidArgument(op_name(op) + " is not a collective");
}

// Every replica waits here until all have arrived: a psum of a scalar completes only once every replica
// posted its input.
void barrier(Replica& r) { r.psum(Array::scalar(0.0, DType::f32), kAxis); }

// ---- one measurement ---------------------------------------------------------------------------------

struct Result {
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  double time_us = 0;  // per iteration: the median over repetitions
  std::int64_t wrong = 0;
  int iters = 0;       // per repetition
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Iterations of one repetition for a call that takes `per_call` seconds: ~budget, within [5, 10^6].
int planned_iterations(double per_call, double budget_ms) {
  const double planned = per_call > 0 ? budget_ms * 1e-3 / per_call : 1e6;
  return static_cast<int>(std::clamp(planned, 5.0, 1e6));
}

// Replica inputs, placed on their devices one at a time so the host staging copy never exceeds one shard
// (peak RSS then reflects the runtime, not the benchmark).
template <class Codec>
weft::ShardedArray place_inputs(weft::Runtime& rt, const Geometry& g, DType dtype, const ValueTable<Codec>& table) {
  using S = typename Codec::Storage;
  std::vector<weft::Shard> shards;
  Array elsewhere;  // stands in for the shards of other processes' replicas, which this process never reads
  for (int r = 0; r < g.n; ++r) {
    const weft::Device& device = rt.devices()[r];
    if (device.process_index != rt.process_index()) {
      if (elsewhere.size() == 0) elsewhere = Array::zeros(g.input_shape, dtype);
      shards.push_back({device, elsewhere});
      continue;
    }
    Array host = Array::empty(g.input_shape, dtype);
    fill_periodic(reinterpret_cast<S*>(host.mutable_bytes()), g.count, table.rows[r], 0);
    shards.push_back({device, weft::device_put(host, device, rt)});
  }
  return weft::ShardedArray(std::move(shards), weft::Shape{g.n}, &rt);
}

template <class Codec>
std::int64_t count_wrong(Op op, const Geometry& g, DType dtype, const weft::ShardedArray& out,
                         const ValueTable<Codec>& table) {
  using S = typename Codec::Storage;
  std::int64_t wrong = 0;
  for (const weft::Shard& local : out.shards()) {  // this process's replicas (all of them in one process)
    const int k = local.device.id;
    const Array& shard = local.data;
    const std::vector<Segment> segments = expected_segments(op, g, k, table.sum_row());
    std::int64_t expected_size = 0;
    for (const Segment& s : segments) expected_size += s.length;
    if (shard.dtype() != dtype || shard.size() != expected_size) {
      // Not even the right dtype or size: every element counts as wrong (and we must not read past it).
      wrong += std::max(shard.size(), expected_size);
      continue;
    }
    const S* values = reinterpret_cast<const S*>(shard.bytes());
    for (const Segment& s : segments) {
      wrong += count_periodic_mismatches(values, s.length, table.rows[s.source], s.first);
      values += s.length;
    }
  }
  return wrong;
}

// Runs one pmap: warm-up and planning, then the timed repetitions (see the banner). The first local
// replica's clock gives a process's time: every collective is a rendezvous that completes only when all
// replicas arrived and (for large ones) all finished their share, so when it leaves the last one, every
// replica's work is done; across processes the slowest one counts.
template <class Codec>
Result measure_collective(weft::Runtime& rt, const Options& opt, std::int64_t bytes) {
  const Geometry g = geometry(opt.op, opt.devices, bytes, opt.dtype);
  const ValueTable<Codec> table(g.n);
  weft::ShardedArray inputs = place_inputs(rt, g, opt.dtype, table);

  weft::Permutation ring;
  for (int k = 0; k < g.n; ++k) ring.emplace_back(k, (k + 1) % g.n);

  std::vector<double> rep_seconds;  // per call, one per repetition (written by the first local replica)
  int iterations = 0;               // per repetition, planned by the first call
  bool planning = true;             // the first call plans, the second measures (see below)
  auto body = [&](Replica& r, const Array& x) {
    const bool timer = r.device() == rt.local_devices().front();
    // The timers' slowest value, the same in every replica: all of them then take the same branches and
    // run the same number of collectives.
    auto slowest = [&](double mine) {
      return r.pmax(Array::scalar(timer ? mine : 0.0, DType::f64), kAxis).value_at(0);
    };
    auto timed = [&](int calls, Array& y) {
      barrier(r);
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < calls; ++i) y = run_op(opt.op, r, x, ring);
      return slowest(seconds_since(start) / calls);
    };
    Array y;
    if (planning) {
      for (int i = 0; i < opt.warmup; ++i) y = run_op(opt.op, r, x, ring);
      int iters = opt.iters;
      if (iters == 0) {
        double per_call = 0;
        for (int batch = 1, done = 0; done < 2 || per_call * done < opt.budget_ms * 1e-4; batch *= 2) {
          per_call = timed(batch, y);
          done += batch;
          if (batch >= (1 << 20)) break;
        }
        iters = planned_iterations(per_call, opt.budget_ms);
      }
      if (timer) iterations = iters;  // the same in every replica (from the slowest timer)
      return y;
    }
    const int iters = iterations;  // (y: the last timed call's output, which the check reads)
    std::vector<double> times;
    for (int rep = 0; rep < opt.reps; ++rep) times.push_back(timed(iters, y));
    if (timer) rep_seconds = times;
    return y;
  };
  weft::PmapOptions options;  // (designated initializers would trip -Wmissing-field-initializers on g++ 12)
  options.axis = kAxis;
  options.runtime = &rt;
  options.name = "weft-bench " + op_name(opt.op);
  auto program = weft::pmap(body, options);
  // Two calls of the program: the first warms up and plans the iterations, the second runs the timed
  // repetitions. The second is a program's steady state: the runtime has seen a run like it (the fiber
  // scheduler places a run's replicas from what the previous run measured: docs/design.md "Schedulers").
  program(inputs);
  planning = false;
  const weft::ShardedArray outputs = program(inputs);

  Result result;
  result.bytes = g.reported_bytes;
  result.count = g.reported_bytes / static_cast<std::int64_t>(weft::dtype_size(opt.dtype));
  result.time_us = median(rep_seconds) * 1e6;
  result.iters = iterations;
  if (opt.check) result.wrong = count_wrong(opt.op, g, opt.dtype, outputs, table);
  return result;
}

// The cost of a pmap call: an empty pmapped function (it returns its argument, already on the devices), or
// one that psums it (psum_call), called back to back from the host, planned and repeated like the
// collectives. Issue 9 asks <= 10 us for dispatch; issue 22 asks the traced psum_call (pmap(jit(f)), its
// program run on every replica) within 1.2x of the hand-called one.
template <class F>
Result measure_calls(weft::Runtime& rt, const Options& opt, F fn);

Result measure_dispatch(weft::Runtime& rt, const Options& opt) {
  if (opt.op == Op::psum_call) {
    auto psum = [](Replica& r, const Array& x) { return r.psum(x, kAxis); };
    return opt.traced ? measure_calls(rt, opt, weft::jit(psum)) : measure_calls(rt, opt, psum);
  }
  auto identity = [](const Array& x) { return x; };
  return opt.traced ? measure_calls(rt, opt, weft::jit(identity)) : measure_calls(rt, opt, identity);
}

template <class F>
Result measure_calls(weft::Runtime& rt, const Options& opt, F fn) {
  std::vector<weft::Shard> shards;
  for (int r = 0; r < opt.devices; ++r) {
    const weft::Device& device = rt.devices()[r];
    shards.push_back({device, device.process_index == rt.process_index()
                                  ? weft::device_put(Array::scalar(1.0, DType::f32), device, rt)
                                  : Array::scalar(1.0, DType::f32)});
  }
  const weft::ShardedArray inputs(std::move(shards), weft::Shape{opt.devices}, &rt);
  weft::PmapOptions options;
  options.axis = kAxis;
  options.runtime = &rt;
  options.name = "weft-bench " + op_name(opt.op);
  auto program = weft::pmap(std::move(fn), options);
  auto timed = [&](int calls) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < calls; ++i) program(inputs);
    return seconds_since(start) / calls;
  };
  for (int i = 0; i < opt.warmup; ++i) program(inputs);
  int iters = opt.iters;
  if (iters == 0) {
    double per_call = 0;
    for (int batch = 1, done = 0; done < 2 || per_call * done < opt.budget_ms * 1e-4; batch *= 2) {
      per_call = timed(batch);
      done += batch;
      if (batch >= (1 << 20)) break;
    }
    iters = planned_iterations(per_call, opt.budget_ms);
  }
  std::vector<double> times;
  for (int rep = 0; rep < opt.reps; ++rep) times.push_back(timed(iters));
  Result result;
  result.time_us = median(times) * 1e6;
  result.iters = iters;
  if (opt.check) {
    // Every replica's value is 1: the identity gives 1, the psum the replica count.
    const double want = opt.op == Op::psum_call ? static_cast<double>(opt.devices) : 1.0;
    const weft::ShardedArray outputs = program(inputs);
    for (const weft::Shard& shard : outputs.shards()) result.wrong += shard.data.item<double>() != want;
  }
  return result;
}

// Keeps the compiler from treating all but the last of repeated identical copies as dead stores.
void clobber_memory() { __asm__ __volatile__("" : : : "memory"); }

// Host copy bandwidth: `threads` threads each copy their share of a `bytes` source into a `bytes`
// destination, `iters` times. Both buffers are written once first, so page faults are not timed.
Result measure_membw(int threads, std::int64_t bytes, int iters, int warmup, bool check) {
  const auto size = static_cast<std::size_t>(bytes);
  std::unique_ptr<std::byte[]> src(new std::byte[size]);
  std::unique_ptr<std::byte[]> dst(new std::byte[size]);
  for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>(i % 251);
  std::memset(dst.get(), 0, size);

  std::barrier sync(threads);
  Clock::duration elapsed{};
  auto worker = [&](int t) {
    const std::size_t begin = size * t / threads, end = size * (t + 1) / threads;
    auto copy = [&] {
      std::memcpy(dst.get() + begin, src.get() + begin, end - begin);
      clobber_memory();
    };
    for (int i = 0; i < warmup; ++i) copy();
    sync.arrive_and_wait();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < iters; ++i) copy();
    sync.arrive_and_wait();  // the time is that of the slowest thread
    if (t == 0) elapsed = Clock::now() - start;
  };
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  pool.clear();  // joins

  Result result;
  result.bytes = bytes;
  result.count = bytes;
  result.time_us = std::chrono::duration<double, std::micro>(elapsed).count() / iters;
  result.iters = iters;
  if (check && std::memcmp(src.get(), dst.get(), size) != 0)
    for (std::size_t i = 0; i < size; ++i) result.wrong += src[i] != dst[i];
  return result;
}

// ---- output ------------------------------------------------------------------------------------------

// Bytes moved per second, in GB/s (1e9, as nccl-tests). membw counts bytes read plus bytes written.
double algbw_GBps(Op op, const Result& r) {
  const double moved = static_cast<double>(r.bytes) * (op == Op::membw ? 2 : 1);
  return r.time_us > 0 ? moved / (r.time_us * 1e3) : 0.0;
}

// Rounds for printing: JSON numbers stay short and the table and JSON agree.
double round_to(double value, int decimals) {
  double scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  return static_cast<double>(static_cast<std::int64_t>(value * scale + 0.5)) / scale;
}

void print_json(const Options& opt, int devices, int instances, const Result& r) {
  const double algbw = algbw_GBps(opt.op, r);
  nlohmann::ordered_json line;
  line["op"] = op_name(opt.op);
  line["devices"] = devices;
  line["instances"] = instances;
  line["bytes"] = r.bytes;
  line["time_us"] = round_to(r.time_us, 3);
  line["algbw_GBps"] = round_to(algbw, 3);
  line["busbw_GBps"] = round_to(algbw * bus_factor(opt.op, devices), 3);
  line["wrong"] = r.wrong;
  line["iters"] = r.iters;
  line["reps"] = opt.reps;
  std::cout << line.dump() << std::endl;
}

void print_table_header(const Options& opt, int devices) {
  std::cout << "# weft-bench: op " << op_name(opt.op) << ", " << devices
            << (opt.op == Op::membw ? " threads" : " devices") << ", dtype "
            << (opt.op == Op::membw ? "byte" : weft::dtype_name(opt.dtype)) << ", "
            << (opt.op == Op::membw ? std::to_string(opt.iters > 0 ? opt.iters : kMembwDefaultIters) + " iterations"
                : "median of " + std::to_string(opt.reps) + " repetitions of " +
                      (opt.iters > 0 ? std::to_string(opt.iters) + " iterations"
                                     : "~" + std::to_string(static_cast<int>(opt.budget_ms)) + " ms"))
            << ", check " << (opt.check ? "on" : "off") << "\n#\n"
            << "#" << std::setw(11) << "size" << std::setw(14) << "count" << std::setw(10) << "type"
            << std::setw(12) << "time" << std::setw(10) << "algbw" << std::setw(10) << "busbw" << std::setw(9)
            << "#wrong" << std::setw(10) << "iters" << "\n"
            << "#" << std::setw(11) << "(B)" << std::setw(14) << "(elements)" << std::setw(10) << ""
            << std::setw(12) << "(us)" << std::setw(10) << "(GB/s)" << std::setw(10) << "(GB/s)" << "\n";
}

void print_table_row(const Options& opt, int devices, const Result& r) {
  const double algbw = algbw_GBps(opt.op, r);
  std::cout << std::fixed << std::setw(12) << r.bytes << std::setw(14) << r.count << std::setw(10)
            << (opt.op == Op::membw ? "byte" : weft::dtype_name(opt.dtype)) << std::setprecision(2)
            << std::setw(12) << r.time_us << std::setw(10) << algbw << std::setw(10)
            << algbw * bus_factor(opt.op, devices) << std::setw(9) << r.wrong << std::setw(10) << r.iters << std::endl;
}

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{8} << 30;
}

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

// Runs every size, prints as it goes; returns the total number of wrong elements.
std::int64_t run(const Options& opt) {
  const bool membw = opt.op == Op::membw;
  int devices = opt.devices;

  std::unique_ptr<weft::Runtime> runtime;
  int instances = 1;
  if (!membw) {
    // Under weftrun each instance has WEFT_DEVICE_COUNT devices and --devices counts the global ones.
    const char* launched = std::getenv("WEFT_NUM_INSTANCES");
    weft::RuntimeOptions options;
    options.device_count = launched && std::atoi(launched) > 1 ? 0 : devices;
    runtime = std::make_unique<weft::Runtime>(options);
    instances = runtime->process_count();
    if (runtime->device_count() != devices) {
      if (opt.devices_given)
        throw std::runtime_error("--devices " + std::to_string(devices) + " but the job has " +
                                 std::to_string(runtime->device_count()) + " devices (" + std::to_string(instances) +
                                 " instances x " + std::to_string(runtime->local_device_count()) + ")");
      devices = runtime->device_count();
    }
  }

  if (!opt.json) print_table_header(opt, devices);
  Options effective = opt;
  effective.devices = devices;
  std::int64_t wrong = 0;
  double busbw_sum = 0;
  // dispatch has no size: one row.
  const bool no_size = opt.op == Op::dispatch || opt.op == Op::psum_call;
  const std::vector<std::int64_t> sizes = no_size ? std::vector<std::int64_t>{0} : opt.sizes;
  for (std::int64_t bytes : sizes) {
    // Inputs, outputs and the host's expected values: about three buffers of devices x size at most.
    const double need = 3.0 * static_cast<double>(devices) * static_cast<double>(bytes);
    if (opt.max_memory > 0 && need > static_cast<double>(opt.max_memory)) {
      nlohmann::ordered_json line;
      line["op"] = op_name(opt.op);
      line["devices"] = devices;
      line["bytes"] = bytes;
      line["skipped"] = "needs ~" + std::to_string(static_cast<std::int64_t>(need) >> 20) + " MiB, more than --max-memory";
      std::cout << line.dump() << std::endl;
      continue;
    }
    const Result r = membw ? measure_membw(devices, bytes, opt.iters > 0 ? opt.iters : kMembwDefaultIters,
                                           std::max(opt.warmup, 1), opt.check)
                     : no_size ? measure_dispatch(*runtime, effective)
                                              : visit_codec(opt.dtype, [&](auto codec) {
                                                  return measure_collective<decltype(codec)>(*runtime, effective, bytes);
                                                });
    wrong += r.wrong;
    busbw_sum += algbw_GBps(opt.op, r) * bus_factor(opt.op, devices) / static_cast<double>(sizes.size());
    if (opt.json)
      print_json(opt, devices, instances, r);
    else
      print_table_row(opt, devices, r);
  }
  if (!opt.json) {
    std::cout << "# Out of bounds values : " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n"
              << "# Avg bus bandwidth    : " << std::setprecision(3)
              << busbw_sum << "\n#" << std::endl;
  }
  if (opt.verbose) std::cerr << "weft-bench: max RSS " << max_rss_kib() << " KiB" << std::endl;
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  weft::tune_process_malloc();  // a benchmark owns its process: weft's measured malloc tuning (weft/memory.hpp)
  CLI::App app{"weft-bench: nccl-tests style collective benchmarks on weft's in-process devices"};
  Options opt;
  std::string op = "allreduce";
  std::string sizes = "4K,1M,64M";
  std::string dtype = "float32";
  bool no_check = false;
  std::vector<std::string> op_names;
  for (const auto& entry : kOpNames) op_names.push_back(entry.first);
  app.add_option("--op", op, "collective to measure, or membw for host copy bandwidth")->check(CLI::IsMember(op_names));
  auto* devices = app.add_option("--devices", opt.devices, "replicas (membw: copy threads, default 2)")
                      ->check(CLI::Range(1, 4096));
  auto* sizes_option = app.add_option("--sizes", sizes, "bytes of one replica's buffer, comma separated, K/M/G suffixes"
                                                        " (membw: default 512M)");
  app.add_option("--iters", opt.iters, "timed iterations per repetition (default: planned from the budget; membw: 20)")
      ->check(CLI::Range(1, 1000000000));
  app.add_option("--warmup", opt.warmup, "extra untimed iterations before the planning warm-up")
      ->check(CLI::Range(0, 1000000000));
  app.add_option("--reps", opt.reps, "repetitions per size; the median is reported")->check(CLI::Range(1, 101));
  app.add_option("--budget-ms", opt.budget_ms, "planned wall time of one repetition, in ms")
      ->check(CLI::Range(1.0, 600000.0));
  app.add_option("--dtype", dtype, "element type: float32, float64, float16, bfloat16, int8, int32, int64, uint8");
  app.add_flag("--no-check", no_check, "skip the comparison of outputs with host-computed values");
  app.add_flag("--json", opt.json, "one JSON object per size instead of the table");
  app.add_flag("--traced", opt.traced, "dispatch, psum_call: call pmap(jit(f)), whose f is traced once into a program");
  app.add_flag("--verbose", opt.verbose, "print the peak resident set size to stderr at the end");
  bool sweep = false;
  std::string sweep_devices = "2,4,8,16,32,64";
  std::string max_memory;
  app.add_flag("--sweep", sweep, "every size (default 4K..256M by 4x) at every --sweep-devices count, as JSON lines");
  app.add_option("--sweep-devices", sweep_devices, "device counts of --sweep, comma separated");
  app.add_option("--max-memory", max_memory, "--sweep: skip points needing more (K/M/G; default a third of RAM)");

  try {
    app.parse(argc, argv);
    opt.op = kOpNames.at(op);
    opt.check = !no_check;
    opt.devices_given = devices->count() > 0;
    if (sweep) {
      if (opt.op == Op::membw) throw CLI::ValidationError("--sweep", "membw has no devices to sweep");
      if (std::getenv("WEFT_NUM_INSTANCES")) throw CLI::ValidationError("--sweep", "runs in one process, not under weftrun");
      if (!sizes_option->count()) sizes = "4K,16K,64K,256K,1M,4M,16M,64M,256M";
      opt.json = true;
      opt.max_memory = max_memory.empty() ? physical_memory_bytes() / 3 : parse_size(max_memory);
    }
    if (opt.op == Op::membw) {
      if (devices->count() == 0) opt.devices = kMembwDefaultThreads;
      opt.sizes = sizes_option->count() ? parse_sizes(sizes) : std::vector<std::int64_t>{kMembwDefaultBytes};
    } else {
      opt.sizes = parse_sizes(sizes);
      opt.dtype = weft::dtype_from_name(dtype);
      visit_codec(opt.dtype, [](auto) {});  // rejects dtypes the benchmark cannot check, before any output
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const weft::Error& e) {
    std::cerr << "weft-bench: " << e.what() << std::endl;
    return 2;
  }

  try {
    std::vector<int> device_counts{opt.devices};
    if (sweep) {
      device_counts.clear();
      for (std::int64_t d : parse_sizes(sweep_devices)) {
        if (d < 1 || d > 4096) throw std::runtime_error("--sweep-devices: " + std::to_string(d) + " is not in 1..4096");
        device_counts.push_back(static_cast<int>(d));
      }
      opt.devices_given = true;
    }
    std::int64_t wrong = 0;
    for (int d : device_counts) {
      opt.devices = d;
      wrong += run(opt);
    }
    if (wrong != 0) {
      std::cerr << "weft-bench: " << wrong << " wrong elements" << std::endl;
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "weft-bench: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}
