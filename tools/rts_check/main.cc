// rts_check: the reference PopXL test's `run_model_and_test` (test_multi_instance_vs_rts.py, described in
// shared/spec/popxl-replication.md section 9.1) on weft's Session API.
//
//   rts_check [--remote] [--with-replica-grouping] [--replica-grouping-stride S] [--replica-grouping-size G]
//             [--with-sharding] [--n-shard-over K] [--retrieval-mode one_per_group|all_replicas]
//             [--replicas R] [--dump-dir DIR] [--keep-group-dim]
//
// Per replica: load the weight w (remote_load, or the on-device value), all-gather it over its shard
// domain when it is replica-sharded, host_store the (gathered) value into a d2h stream, add [2] in place
// and remote_store it back when remote. Then run once and check, with numpy's array_equiv semantics:
//   A (upload)   every local replica's host-stored value equals its group's row of the host data;
//   B (download) get_tensor_data equals host data + 2, per the retrieval mode.
// Exit status: 0 both checks pass, 1 a check failed, 2 an invalid configuration or a library error (the
// library's message on stderr), 105/106/... CLI11 usage errors.
//
// Host data: grouped w_h[g][j] = 16g + j + 1 with shape (num_groups, 16) when there are several groups;
// with one group it is passed squeezed to (16,), as the reference test intends and as the expectations in
// tests/data/rts-cases.json assume. --keep-group-dim keeps the (1, 16) shape the reference test really
// passes (its np.squeeze result is discarded); its array_equiv checks accept both.
//
// --dump-dir DIR writes DIR/instance-<process index>.json (format: shared/conformance/README.md,
// rts-cases.json): instance, replication_factor, instance_replication_factor, global_replica_offset,
// assignment, host_stored and final ({dtype, shape, data}).
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <weft/weft.hpp>

namespace {

using weft::Array;
using weft::DType;
using weft::Shape;

constexpr std::int64_t kTensorElements = 16;  // tensor_nelms in the reference test

struct Options {
  bool remote = false;
  bool with_replica_grouping = false;
  int stride = 1;
  std::optional<int> group_size;
  bool with_sharding = false;
  std::optional<int> shard_over;
  std::string retrieval_mode = "one_per_group";
  int replicas = 0;  // 0 = every device of the runtime
  std::string dump_dir;
  bool keep_group_dim = false;

  // run_multi_instance_test's plumbing: a group size implies grouping, a shard_over implies sharding,
  // sharding implies a remote variable.
  bool grouped() const { return with_replica_grouping || group_size.has_value(); }
  bool sharded() const { return with_sharding || shard_over.has_value(); }
  bool is_remote() const { return remote || sharded(); }
  int size() const { return group_size.value_or(1); }  // argparse default of --replica-grouping-size
};

// ---- numpy's array_equiv: equal after broadcasting to a common shape --------------------------------

// Row-major strides of `shape`, with 0 for the broadcast (missing or size-1) dimensions of `out`.
std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::size_t d = shape.size() - 1 - i, o = out.size() - 1 - i;
    strides[o] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

bool array_equiv(const Array& a, const Array& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  Shape out(std::max(sa.size(), sb.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t da = i < sa.size() ? sa[sa.size() - 1 - i] : 1;
    const std::int64_t db = i < sb.size() ? sb[sb.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;  // not broadcastable: numpy returns False
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles();
  const std::vector<std::int64_t> ta = broadcast_strides(sa, out), tb = broadcast_strides(sb, out);
  const std::int64_t n = weft::num_elements(out);
  std::vector<std::int64_t> index(out.size(), 0);
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t ia = 0, ib = 0;
    for (std::size_t d = 0; d < out.size(); ++d) {
      ia += index[d] * ta[d];
      ib += index[d] * tb[d];
    }
    if (va[static_cast<std::size_t>(ia)] != vb[static_cast<std::size_t>(ib)]) return false;
    for (std::size_t d = out.size(); d-- > 0;) {
      if (++index[d] < out[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

// One failed check: the reference test's assertion message.
struct Checker {
  int failures = 0;
  void equiv(const std::string& what, const Array& actual, const Array& expected) {
    if (array_equiv(actual, expected)) return;
    ++failures;
    std::string message = "rts_check: FAIL: equivalence check failed for ";
    message += what;
    message += ":\n  actual ";
    message += weft::shape_str(actual.shape());
    message += " =\n";
    message += weft::to_string(actual);
    message += "\n  expected ";
    message += weft::shape_str(expected.shape());
    message += " =\n";
    message += weft::to_string(expected);
    std::cerr << message << "\n";
  }
};

nlohmann::ordered_json array_json(const Array& a) {
  nlohmann::ordered_json j;
  j["dtype"] = std::string(weft::dtype_name(a.dtype()));
  j["shape"] = a.shape();
  if (a.dtype() == DType::i32) {
    j["data"] = a.to_vector<std::int32_t>();
  } else {
    j["data"] = a.to_doubles();
  }
  return j;
}

// The host data w_h, int32: 1, 2, ... in shape (16,), or (num_groups, 16) when grouped over several groups
// (or --keep-group-dim).
Array host_data(const Options& opt, int num_groups) {
  Shape host_shape{kTensorElements};
  if (opt.grouped() && (num_groups > 1 || opt.keep_group_dim)) host_shape = {num_groups, kTensorElements};
  std::vector<std::int32_t> host_values(static_cast<std::size_t>(weft::num_elements(host_shape)));
  for (std::size_t i = 0; i < host_values.size(); ++i) host_values[i] = static_cast<std::int32_t>(i + 1);
  return Array::from_vector(host_values, host_shape);
}

// The variable under test and where it lives: a remote buffer and a (sharded) remote variable, or an
// on-device variable; with the grouping its shards are gathered over, and the shape host_store sees.
struct State {
  weft::Variable variable;
  weft::RemoteBuffer buffer;
  std::optional<weft::ReplicaGroups> gather_grouping;
  Shape stored_shape;
};

State declare_state(weft::Session& session, const Options& opt, const Array& w_h,
                    const std::optional<weft::ReplicaGroups>& grouping, weft::Retrieval retrieval) {
  const bool several_groups = grouping && grouping->num_groups() > 1;
  State s;
  if (opt.is_remote()) {
    if (opt.sharded()) {
      s.buffer = session.replica_sharded_buffer(w_h.shape(), DType::i32, grouping, opt.shard_over.value_or(0), 1);
      s.variable = session.remote_replica_sharded_variable(w_h, s.buffer, 0, grouping, retrieval, "remote_w");
      if (!opt.shard_over) {
        s.gather_grouping = grouping ? *grouping : session.replica_grouping();
      } else {
        int stride = 1, size = 0;
        if (grouping && !grouping->is_strided(&stride, &size)) stride = 1;
        s.gather_grouping = session.replica_grouping(stride, *opt.shard_over);
      }
      s.stored_shape = s.buffer.meta_shape();
    } else {
      Shape entry_shape = w_h.shape();
      if (several_groups) entry_shape.erase(entry_shape.begin());
      s.buffer = session.remote_buffer(entry_shape, DType::i32, 1);
      s.variable = session.remote_variable(w_h, s.buffer, 0, grouping, retrieval, "remote_w");
      s.stored_shape = s.buffer.shape();
    }
  } else {
    s.variable = session.variable(w_h, grouping, retrieval, "w");
    s.stored_shape = s.variable.shape();
  }
  return s;
}

// What the run produced, with where this process stands in the job: for the dump and the checks.
struct Outcome {
  int R = 0, L = 0, offset = 0;  // replication factor, this instance's replicas, its first global replica
  std::vector<int> assignment;   // each replica's group
  Array host_stored;             // what every local replica host_stored (one row per replica when L > 1)
  Array final_value;             // get_tensor_data after the run
};

// --dump-dir: DIR/instance-<i>.json. False (with the message on stderr) if it cannot be written.
bool write_dump(const Options& opt, int instance, const Outcome& out) {
  nlohmann::ordered_json dump;
  dump["instance"] = instance;
  dump["replication_factor"] = out.R;
  dump["instance_replication_factor"] = out.L;
  dump["global_replica_offset"] = out.offset;
  dump["assignment"] = out.assignment;
  dump["host_stored"] = array_json(out.host_stored);
  dump["final"] = array_json(out.final_value);
  std::filesystem::create_directories(opt.dump_dir);
  const std::filesystem::path path = std::filesystem::path(opt.dump_dir) / ("instance-" + std::to_string(instance) + ".json");
  std::ofstream file(path);
  file << dump.dump() << "\n";
  if (!file) {
    std::string message = "rts_check: error: cannot write ";
    message += path.string();
    std::cerr << message << "\n";
    return false;
  }
  return true;
}

// Check A: what weights_from_host put on every local replica.
void check_upload(Checker& check, const Options& opt, const Outcome& out, const Array& w_h,
                  const std::optional<weft::ReplicaGroups>& grouping) {
  const bool several_groups = grouping && grouping->num_groups() > 1;
  for (int l = 0; l < out.L; ++l) {
    const int global = out.offset + l;
    const Array expected =
        opt.grouped() && several_groups ? w_h[out.assignment[static_cast<std::size_t>(global)]] : w_h;
    const Array actual = out.L > 1 ? out.host_stored[l] : out.host_stored;
    std::string what = "comparison of host-stored";
    if (opt.sharded()) {
      const int shards = opt.shard_over ? *opt.shard_over : grouping ? grouping->group_size() : out.R;
      what += ", all-gathered (sharded over every " + std::to_string(shards) + " replicas of each group)";
    }
    what += " initial w for replica ";
    what += std::to_string(global);
    what += ", which should be equivalent to the expected initial w";
    if (grouping) {
      int stride = 1, size = 0;
      grouping->is_strided(&stride, &size);
      what += " for group " + std::to_string(out.assignment[static_cast<std::size_t>(global)]);
      what += " (num_groups=" + std::to_string(grouping->num_groups()) + "), (group_size=";
      what += std::to_string(grouping->group_size()) + ", group_stride=" + std::to_string(stride) + ")";
    }
    check.equiv(what, actual, expected);
  }
}

// Check B: what weights_to_host / get_tensor_data bring back.
void check_download(Checker& check, const Options& opt, const Outcome& out, const Array& expected,
                    weft::Retrieval retrieval, int num_groups) {
  const int R = out.R;
  const Array& final_value = out.final_value;
  if (retrieval == weft::Retrieval::one_per_group || R == 1) {
    check.equiv("updated w", final_value, expected);
  } else if (opt.grouped() && num_groups > 1) {
    std::vector<Array> rows;
    for (int r = 0; r < R; ++r) rows.push_back(expected[out.assignment[static_cast<std::size_t>(r)]]);
    check.equiv("updated w", final_value, Array::stack(rows, 0));
  } else {
    if (final_value.ndim() < 1 || final_value.shape()[0] < R) {
      ++check.failures;
      std::string message = "rts_check: FAIL: updated w: get_tensor_data returned shape ";
      message += weft::shape_str(final_value.shape());
      message += ", which has no row per replica (";
      message += std::to_string(R);
      message += " replicas)";
      std::cerr << message << "\n";
    } else {
      for (int r = 0; r < R; ++r) check.equiv("updated w of replica " + std::to_string(r), final_value[r], expected);
    }
  }
}

int run(const Options& opt) {
  weft::RuntimeOptions rt_options;
  rt_options.device_count = opt.replicas;  // 0: WEFT_DEVICE_COUNT or the default
  weft::Runtime runtime(rt_options);
  weft::SessionOptions session_options;
  session_options.runtime = &runtime;
  session_options.replicas = opt.replicas;
  session_options.name = "rts_check";
  weft::Session session(session_options);

  Outcome out;
  out.R = session.replication_factor();
  out.L = session.instance_replication_factor();
  out.offset = session.global_replica_offset();
  const weft::Retrieval retrieval = weft::retrieval_from_name(opt.retrieval_mode);

  // The grouping first: it validates stride and size (the test's R // group_size comes after).
  std::optional<weft::ReplicaGroups> grouping;
  int num_groups = 1;  // the test's num_groups (grouped only)
  if (opt.grouped()) {
    grouping = session.replica_grouping(opt.stride, opt.size());
    num_groups = out.R / opt.size();
  }

  const Array w_h = host_data(opt, num_groups);
  const Array v_h = Array::from_vector(std::vector<std::int32_t>{2}, Shape{1});
  State state = declare_state(session, opt, w_h, grouping, retrieval);
  const weft::HostStream w_d2h = session.d2h_stream(state.stored_shape, DType::i32, "w_d2h");

  const bool remote = opt.is_remote(), sharded = opt.sharded();
  auto outs = session.run([&](weft::Replica& r) {
    Array loaded;
    Array& w = remote ? (loaded = r.remote_load(state.buffer, 0)) : r.value(state.variable);
    const Array to_store = sharded ? r.gather_shards(w, *state.gather_grouping, state.buffer.meta_shape()) : w;
    r.host_store(w_d2h, to_store);
    w += v_h;  // ops.add_(w, v): in place, v = [2] broadcast
    if (remote) r.remote_store(state.buffer, 0, w);
  });
  out.host_stored = outs.at(w_d2h);
  out.final_value = session.get_tensor_data(state.variable);
  out.assignment = grouping ? grouping->assignment() : std::vector<int>(static_cast<std::size_t>(out.R), 0);

  if (!opt.dump_dir.empty() && !write_dump(opt, runtime.process_index(), out)) return 2;

  Checker check;
  check_upload(check, opt, out, w_h, grouping);
  check_download(check, opt, out, w_h + v_h, retrieval, num_groups);
  if (check.failures > 0) {
    std::cerr << "rts_check: " << check.failures << " check(s) failed\n";
    return 1;
  }
  std::cout << "rts_check: OK (replicas " << out.R << ", mode " << weft::retrieval_name(retrieval) << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  weft::tune_process_malloc();  // the tool owns its process (weft/memory.hpp)
  CLI::App app{"rts_check: the reference PopXL test_multi_instance_vs_rts program (run_model_and_test) on weft"};
  Options opt;
  app.add_flag("--remote", opt.remote, "remote variable (else on-chip)");
  app.add_flag("--with-replica-grouping", opt.with_replica_grouping, "give the variable a replica grouping");
  app.add_option("--replica-grouping-stride", opt.stride, "grouping stride (default 1)");
  app.add_option("--replica-grouping-size", opt.group_size, "grouping group size (implies grouping; default 1)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--with-sharding", opt.with_sharding, "replica-sharded remote variable (implies --remote)");
  app.add_option("--n-shard-over", opt.shard_over, "shard domain size (implies sharding; default: group size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--retrieval-mode", opt.retrieval_mode, "one_per_group (default) or all_replicas");
  // A readable bound (CLI11's NonNegativeNumber prints the range up to DBL_MAX); the runtime allows 4096
  // devices per process.
  app.add_option("--replicas", opt.replicas, "replicas of this process, 1 to 4096 (default 0: every device of the runtime)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--dump-dir", opt.dump_dir, "write DIR/instance-<i>.json");
  app.add_flag("--keep-group-dim", opt.keep_group_dim,
               "one group: pass host data of shape (1, 16), as the reference test really does (its squeeze is a "
               "no-op), instead of (16,)");
  // argparse semantics: a repeated option takes its last value.
  for (CLI::Option* option : app.get_options()) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI11_PARSE(app, argc, argv);

  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::string message = "rts_check: error: ";
    message += e.what();
    std::cerr << message << "\n";
    return 2;
  }
}
