// Session checkpoints in one .safetensors file (weft/checkpoint.hpp).
//
// What is stored, and why:
//  - every variable as one tensor named after it (made unique with "#k" when names repeat), holding what
//    weights_to_host reads: one value per replica group (PopXL's model: the replicas of a group hold the
//    same value), so shape_on_host; a replica-sharded variable as its whole per-group tensor, not its shards,
//    so that other tools see the tensor and a load re-shards it;
//  - every remote buffer entry that no variable is bound to as one tensor "remote_buffer_<id>/entry_<e>" of
//    shape (replicas, *entry shape): remote memory is per replica and has no grouping, so every replica's
//    copy is kept (in a multi-instance session the other instances' copies are gathered first);
//  - the layout as a JSON string under the metadata key "weft": replica count, per variable its name,
//    tensor, shape, dtype, grouping, retrieval, placement (on the devices, or remote buffer id + entry) and
//    shard_over, per remote buffer its entry type, entry count and sharding, and the unbound entries'
//    tensors. A load compares it with the session's layout field by field and names the first difference.
// Replicas of a group that were made to diverge (an update that depends on the replica index) are saved as
// the group's first replica's value, exactly as weights_to_host and get_tensor_data(one_per_group) see them.
//
// This file is the session layout only: which variables and entries become which tensors, and the layout's
// JSON. The file format itself (header, dtypes, offsets) is array/safetensors.*, beside npy. The file is read
// as untrusted input: every size, offset and type is checked (there, and the layout here) before anything is
// allocated or any session state is touched, and a load either restores everything or changes nothing.
#include "weft/checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives/host_exchange.hpp"
#include "array/bounded_json.hpp"
#include "array/file_io.hpp"
#include "array/safetensors.hpp"
#include "runtime/session_state.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using detail::RemoteBufferState;
using detail::SessionState;
using detail::VariableState;

constexpr const char* kLayoutKey = "weft";
constexpr const char* kFormat = "weft.session";
constexpr std::int64_t kFormatVersion = 1;

std::string list_str(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// ---- the layout ---------------------------------------------------------------------------------------------

struct VariableLayout {
  std::string name, tensor;
  Shape shape;        // per replica, unsharded
  std::string dtype;  // weft's dtype name
  // (stride, group size) when strided, else the explicit groups.
  int stride = 0, group_size = 0;
  std::vector<std::vector<int>> groups;
  std::string retrieval;
  int buffer = 0;  // 0: on the devices
  int entry = 0;
  int shard_over = 0;
};

struct BufferLayout {
  int id = 0;
  Shape shape;
  std::string dtype;
  int entries = 1;
  Shape meta_shape;
  int shard_over = 0;
};

struct EntryLayout {
  int buffer = 0, entry = 0;
  std::string tensor;
};

struct Layout {
  int replicas = 0;
  std::vector<VariableLayout> variables;
  std::vector<BufferLayout> buffers;
  std::vector<EntryLayout> entries;  // remote buffer entries no variable is bound to
};

std::string grouping_str(const VariableLayout& v) {
  if (v.groups.empty()) return "(stride " + std::to_string(v.stride) + ", size " + std::to_string(v.group_size) + ")";
  std::string out = "groups [";
  for (std::size_t g = 0; g < v.groups.size(); ++g) out += (g ? ", " : "") + list_str(v.groups[g]);
  return out + "]";
}

std::string placement_str(const VariableLayout& v) {
  if (v.buffer == 0) return "on the devices";
  return "in remote buffer " + std::to_string(v.buffer) + " entry " + std::to_string(v.entry);
}

std::string sharding_str(int shard_over) { return shard_over == 0 ? "no sharding" : "shard_over " + std::to_string(shard_over); }

std::string buffer_str(const BufferLayout& b) {
  std::string out = std::to_string(b.entries) + (b.entries == 1 ? " entry" : " entries") + " of " + io::printable(b.dtype) + " " + shape_str(b.shape);
  if (b.shard_over > 0) out += ", replica-sharded over " + std::to_string(b.shard_over) + " for " + shape_str(b.meta_shape);
  return out;
}

// Remote buffer entries no variable is bound to, in (buffer, entry) order.
std::vector<std::pair<RemoteBufferState*, int>> unbound_entries(const SessionState& s) {
  std::set<std::pair<int, int>> bound;
  for (const auto& v : s.variables)
    if (v->buffer) bound.insert({v->buffer->id, v->entry});
  std::vector<std::pair<RemoteBufferState*, int>> out;
  for (const auto& b : s.buffers)
    for (int e = 0; e < b->entries; ++e)
      if (!bound.count({b->id, e})) out.push_back({b.get(), e});
  return out;
}

std::string unique_name(const std::string& wanted, std::set<std::string>& taken) {
  std::string name = wanted;
  for (int k = 1; name.empty() || taken.count(name); ++k) name = wanted + "#" + std::to_string(k);
  taken.insert(name);
  return name;
}

Layout layout_of(const SessionState& s) {
  Layout l;
  l.replicas = s.replicas;
  std::set<std::string> taken{"__metadata__"};
  for (const auto& v : s.variables) {
    VariableLayout vl;
    vl.name = v->name;
    vl.tensor = unique_name(v->name, taken);
    vl.shape = v->shape;
    vl.dtype = std::string(dtype_name(v->dtype));
    if (!v->grouping.is_strided(&vl.stride, &vl.group_size)) vl.groups = v->grouping.groups();
    vl.retrieval = retrieval_name(v->retrieval);
    if (v->buffer) {
      vl.buffer = v->buffer->id;
      vl.entry = v->entry;
    }
    vl.shard_over = v->shard_over;
    l.variables.push_back(std::move(vl));
  }
  for (const auto& b : s.buffers)
    l.buffers.push_back({b->id, b->shape, std::string(dtype_name(b->dtype)), b->entries, b->meta_shape, b->shard_over});
  for (const auto& [b, e] : unbound_entries(s))
    l.entries.push_back({b->id, e, unique_name("remote_buffer_" + std::to_string(b->id) + "/entry_" + std::to_string(e), taken)});
  return l;
}

ordered_json to_json(const Layout& l) {
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["replicas"] = l.replicas;
  j["variables"] = ordered_json::array();
  for (const VariableLayout& v : l.variables) {
    ordered_json x;
    x["name"] = v.name;
    x["tensor"] = v.tensor;
    x["shape"] = v.shape;
    x["dtype"] = v.dtype;
    if (v.groups.empty()) {
      x["grouping"] = {{"stride", v.stride}, {"group_size", v.group_size}};
    } else {
      x["grouping"] = {{"groups", v.groups}};
    }
    x["retrieval"] = v.retrieval;
    x["remote"] = v.buffer != 0;
    if (v.buffer != 0) {
      x["buffer"] = v.buffer;
      x["entry"] = v.entry;
    }
    x["shard_over"] = v.shard_over;
    j["variables"].push_back(std::move(x));
  }
  j["buffers"] = ordered_json::array();
  for (const BufferLayout& b : l.buffers)
    j["buffers"].push_back({{"id", b.id}, {"shape", b.shape}, {"dtype", b.dtype}, {"entries", b.entries},
                            {"meta_shape", b.meta_shape}, {"shard_over", b.shard_over}});
  j["buffer_entries"] = ordered_json::array();
  for (const EntryLayout& e : l.entries) j["buffer_entries"].push_back({{"buffer", e.buffer}, {"entry", e.entry}, {"tensor", e.tensor}});
  return j;
}

// Reads a layout from untrusted JSON; `corrupt` throws with what is wrong.
class LayoutReader {
 public:
  explicit LayoutReader(std::function<void(const std::string&)> corrupt) : corrupt_(std::move(corrupt)) {}

  Layout read(const json& j) {
    if (!j.is_object()) bad("the layout is not a JSON object");
    if (string(j, "format", "the layout") != kFormat) bad("the layout's format is not \"" + std::string(kFormat) + "\"");
    const std::int64_t version = integer(j, "version", "the layout", 0, std::numeric_limits<int>::max());
    if (version != kFormatVersion)
      bad("the layout has version " + std::to_string(version) + "; this weft reads version " + std::to_string(kFormatVersion));
    Layout l;
    l.replicas = static_cast<int>(integer(j, "replicas", "the layout", 1, std::numeric_limits<int>::max()));
    const json& variables = array(j, "variables", "the layout");
    for (std::size_t i = 0; i < variables.size(); ++i) l.variables.push_back(variable(variables[i], "variable " + std::to_string(i)));
    const json& buffers = array(j, "buffers", "the layout");
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const json& b = object(buffers[i], "remote buffer " + std::to_string(i));
      const std::string what = "remote buffer " + std::to_string(i);
      l.buffers.push_back({static_cast<int>(integer(b, "id", what, 1, std::numeric_limits<int>::max())), shape(b, "shape", what),
                           string(b, "dtype", what), static_cast<int>(integer(b, "entries", what, 1, std::numeric_limits<int>::max())),
                           shape(b, "meta_shape", what), static_cast<int>(integer(b, "shard_over", what, 0, std::numeric_limits<int>::max()))});
    }
    const json& entries = array(j, "buffer_entries", "the layout");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::string what = "buffer entry " + std::to_string(i);
      const json& e = object(entries[i], what);
      l.entries.push_back({static_cast<int>(integer(e, "buffer", what, 1, std::numeric_limits<int>::max())),
                           static_cast<int>(integer(e, "entry", what, 0, std::numeric_limits<int>::max())), string(e, "tensor", what)});
    }
    check_distinct(l);
    return l;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    corrupt_(what);
    throw InvalidArgument(what);  // corrupt_ throws; this keeps the compiler sure of it
  }
  const json& object(const json& j, const std::string& what) const {
    if (!j.is_object()) bad(what + " is not a JSON object");
    return j;
  }
  const json& field(const json& j, const char* key, const std::string& what) const {
    const auto it = j.find(key);
    if (it == j.end()) bad(what + " has no \"" + key + "\"");
    return *it;
  }
  std::string string(const json& j, const char* key, const std::string& what) const {
    const json& f = field(j, key, what);
    if (!f.is_string()) bad(what + ": \"" + key + "\" is not a string");
    return f.get<std::string>();
  }
  std::int64_t integer(const json& j, const char* key, const std::string& what, std::int64_t lo, std::int64_t hi) const {
    const auto v = safetensors::json_int(field(j, key, what));
    if (!v || *v < lo || *v > hi)
      bad(what + ": \"" + key + "\" is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *v;
  }
  bool boolean(const json& j, const char* key, const std::string& what) const {
    const json& f = field(j, key, what);
    if (!f.is_boolean()) bad(what + ": \"" + key + "\" is not true or false");
    return f.get<bool>();
  }
  const json& array(const json& j, const char* key, const std::string& what) const {
    const json& f = field(j, key, what);
    if (!f.is_array()) bad(what + ": \"" + key + "\" is not a list");
    return f;
  }
  Shape shape(const json& j, const char* key, const std::string& what) const {
    Shape out;
    for (const json& d : array(j, key, what)) {
      const auto v = safetensors::json_int(d);
      if (!v || *v < 0) bad(what + ": \"" + key + "\" is not a list of non-negative integers");
      out.push_back(*v);
    }
    if (!safetensors::checked_count(out)) bad(what + ": \"" + key + "\" " + shape_str(out) + " has more elements than fit in 64 bits");
    return out;
  }
  VariableLayout variable(const json& j, const std::string& what) const {
    object(j, what);
    VariableLayout v;
    v.name = string(j, "name", what);
    v.tensor = string(j, "tensor", what);
    v.shape = shape(j, "shape", what);
    v.dtype = string(j, "dtype", what);
    const json& g = object(field(j, "grouping", what), what + "'s grouping");
    if (g.contains("groups")) {
      for (const json& group : array(g, "groups", what + "'s grouping")) {
        std::vector<int> members;
        if (!group.is_array()) bad(what + "'s grouping: a group is not a list");
        for (const json& m : group) {
          const auto r = safetensors::json_int(m);
          if (!r || *r < 0 || *r > std::numeric_limits<int>::max()) bad(what + "'s grouping: a member is not a replica index");
          members.push_back(static_cast<int>(*r));
        }
        v.groups.push_back(std::move(members));
      }
    } else {
      v.stride = static_cast<int>(integer(g, "stride", what + "'s grouping", 1, std::numeric_limits<int>::max()));
      v.group_size = static_cast<int>(integer(g, "group_size", what + "'s grouping", 1, std::numeric_limits<int>::max()));
    }
    v.retrieval = string(j, "retrieval", what);
    if (boolean(j, "remote", what)) {
      v.buffer = static_cast<int>(integer(j, "buffer", what, 1, std::numeric_limits<int>::max()));
      v.entry = static_cast<int>(integer(j, "entry", what, 0, std::numeric_limits<int>::max()));
    }
    v.shard_over = static_cast<int>(integer(j, "shard_over", what, 0, std::numeric_limits<int>::max()));
    return v;
  }

  // One tensor per variable and per entry, one record per entry: a tensor named twice would load two things
  // from the same bytes, an entry given twice would keep one of its tensors silently.
  void check_distinct(const Layout& l) const {
    std::map<std::string, std::string> owner;  // tensor -> who names it
    auto claim = [&](const std::string& tensor, const std::string& who) {
      const auto [it, fresh] = owner.emplace(tensor, who);
      if (!fresh) bad(who + " names tensor '" + io::printable(tensor, 200) + "', which " + it->second + " already names");
    };
    for (std::size_t i = 0; i < l.variables.size(); ++i) claim(l.variables[i].tensor, "variable " + std::to_string(i));
    std::map<std::pair<int, int>, std::size_t> seen;
    for (std::size_t i = 0; i < l.entries.size(); ++i) {
      const EntryLayout& e = l.entries[i];
      const std::string who = "buffer entry " + std::to_string(i);
      const auto [it, fresh] = seen.emplace(std::pair{e.buffer, e.entry}, i);
      if (!fresh)
        bad(who + " is remote buffer " + std::to_string(e.buffer) + " entry " + std::to_string(e.entry) + " again (buffer entry " +
            std::to_string(it->second) + ")");
      claim(e.tensor, who);
    }
  }

  std::function<void(const std::string&)> corrupt_;
};

// The first difference between the checkpoint's layout and the session's, as the error message.
// Without the "load_checkpoint: '<path>': " prefix, which the caller adds.
std::optional<std::string> first_difference(const Layout& file, const Layout& session) {
  const std::string op;
  if (file.replicas != session.replicas)
    return op + "the checkpoint was saved from a session of " + std::to_string(file.replicas) + " replicas, this session has " +
           std::to_string(session.replicas);
  const std::size_t common = std::min(file.variables.size(), session.variables.size());
  for (std::size_t i = 0; i < common; ++i) {
    const VariableLayout& f = file.variables[i];
    const VariableLayout& s = session.variables[i];
    const std::string who = op + "variable " + std::to_string(i) + " '" + s.name + "' ";
    auto differs = [&](const std::string& what, const std::string& in_file, const std::string& in_session) {
      return who + what + " " + in_file + " in the checkpoint but " + in_session + " in the session";
    };
    if (f.name != s.name)
      return op + "variable " + std::to_string(i) + " is named '" + io::printable(f.name, 200) + "' in the checkpoint but '" + s.name + "' in the session";
    if (f.shape != s.shape) return differs("has shape", shape_str(f.shape), shape_str(s.shape));
    if (f.dtype != s.dtype) return differs("has dtype", io::printable(f.dtype), s.dtype);
    if (f.stride != s.stride || f.group_size != s.group_size || f.groups != s.groups)
      return differs("has grouping", grouping_str(f), grouping_str(s));
    if (f.retrieval != s.retrieval) return differs("has retrieval", io::printable(f.retrieval), s.retrieval);
    if (f.buffer != s.buffer || f.entry != s.entry) return differs("lives", placement_str(f), placement_str(s));
    if (f.shard_over != s.shard_over) return differs("has", sharding_str(f.shard_over), sharding_str(s.shard_over));
  }
  if (file.variables.size() != session.variables.size()) {
    const bool more = file.variables.size() > session.variables.size();
    const VariableLayout& first = more ? file.variables[common] : session.variables[common];
    return op + "the checkpoint has " + std::to_string(file.variables.size()) + " variables but the session has " +
           std::to_string(session.variables.size()) + " (the first " + (more ? "one missing from the session" : "one missing from the checkpoint") +
           " is variable " + std::to_string(common) + " '" + io::printable(first.name, 200) + "')";
  }
  const std::size_t common_buffers = std::min(file.buffers.size(), session.buffers.size());
  for (std::size_t i = 0; i < common_buffers; ++i) {
    const BufferLayout& f = file.buffers[i];
    const BufferLayout& s = session.buffers[i];
    if (f.id != s.id || f.shape != s.shape || f.dtype != s.dtype || f.entries != s.entries || f.meta_shape != s.meta_shape ||
        f.shard_over != s.shard_over)
      return op + "remote buffer " + std::to_string(s.id) + " holds " + buffer_str(f) + " in the checkpoint but " + buffer_str(s) +
             " in the session";
  }
  if (file.buffers.size() != session.buffers.size())
    return op + "the checkpoint has " + std::to_string(file.buffers.size()) + " remote buffers but the session has " +
           std::to_string(session.buffers.size());
  return std::nullopt;
}

// The layout (already equal to the session's) and the file's tensors name each other exactly: the entries
// it stores are the session's unbound ones, and every tensor of the file is one of the layout's (a tensor no
// one loads is a file of another layout, or a corrupt one).
void check_tensors_named(const Layout& stored, const SessionState& s, const safetensors::Reader& file) {
  std::set<std::pair<int, int>> unbound;
  for (const auto& [b, e] : unbound_entries(s)) unbound.insert({b->id, e});
  std::set<std::string> named;
  for (const VariableLayout& v : stored.variables) named.insert(v.tensor);
  for (std::size_t i = 0; i < stored.entries.size(); ++i) {
    const EntryLayout& e = stored.entries[i];
    if (!unbound.count({e.buffer, e.entry}))
      file.fail("corrupt session layout: buffer entry " + std::to_string(i) + " is remote buffer " + std::to_string(e.buffer) +
                " entry " + std::to_string(e.entry) + ", which the session does not hold as an unbound entry");
    named.insert(e.tensor);
  }
  for (const auto& [name, info] : file.tensors())
    if (!named.count(name)) file.fail("tensor '" + io::printable(name, 200) + "' is not part of the session layout");
}

// ---- collectives between instances ------------------------------------------------------------------------------
// They go through collectives::HostExchange (one fingerprint, deadlines, fate sharing), as the session's own
// read-back does.

// Every replica's copy of each unbound entry, stacked (replicas, *entry shape); the other instances' copies
// come over the transport (one all-gather for all entries).
std::vector<Array> gather_entries(SessionState& s, const std::vector<std::pair<RemoteBufferState*, int>>& entries) {
  auto& rt = s.runtime->impl();
  std::vector<Array> out;
  std::vector<std::size_t> offset;  // of each entry within one replica's bytes
  std::size_t per_replica = 0;
  for (const auto& [b, e] : entries) {
    offset.push_back(per_replica);
    per_replica += static_cast<std::size_t>(num_elements(b->shape)) * dtype_size(b->dtype);
  }
  const std::size_t local = s.local_replicas.size();
  std::vector<std::byte> gathered;
  if (rt.process_count > 1 && per_replica > 0) {
    std::vector<std::byte> send(per_replica * local);
    for (std::size_t j = 0; j < local; ++j)
      for (std::size_t k = 0; k < entries.size(); ++k) {
        const Array& a = entries[k].first->data[s.local_replicas[j]][entries[k].second];
        std::memcpy(send.data() + j * per_replica + offset[k], a.bytes(), a.nbytes());
      }
    collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
    gathered = exchange.all_gather(s.options.name + ": save_checkpoint gathering the remote buffer entries", send);
  }
  // Where replica r's bytes are in `gathered`: its process's block, then its rank among that process's replicas.
  std::vector<std::size_t> position(s.replicas);
  std::vector<std::size_t> seen(rt.process_count, 0);
  for (int r = 0; r < s.replicas; ++r) {
    const int p = s.devices[r].process_index;
    position[r] = (static_cast<std::size_t>(p) * local + seen[p]++) * per_replica;
  }
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const auto& [b, e] = entries[k];
    Shape shape = b->shape;
    shape.insert(shape.begin(), s.replicas);
    Array stacked = Array::empty(shape, b->dtype, rt.host_account);
    const std::size_t item = static_cast<std::size_t>(num_elements(b->shape)) * dtype_size(b->dtype);
    std::byte* dst = stacked.mutable_bytes();
    for (int r = 0; r < s.replicas; ++r) {
      const std::byte* src = s.is_local(r) ? b->data[r][e].bytes() : gathered.data() + position[r] + offset[k];
      if (item > 0) std::memcpy(dst + static_cast<std::size_t>(r) * item, src, item);
    }
    out.push_back(std::move(stacked));
  }
  return out;
}

}  // namespace

void save_checkpoint(Session& session, const std::string& path, const std::map<std::string, std::string>& metadata) {
  SessionState& s = *session.state;
  auto& rt = s.runtime->impl();
  if (metadata.count(kLayoutKey))
    throw InvalidArgument("save_checkpoint: the metadata key \"" + std::string(kLayoutKey) + "\" is reserved for the session layout");
  try {
    (void)json(metadata).dump();
  } catch (const json::exception&) {
    throw InvalidArgument("save_checkpoint: the metadata must be UTF-8 text (JSON strings)");
  }
  const Layout layout = layout_of(s);
  std::string layout_text;
  try {
    layout_text = to_json(layout).dump();
  } catch (const json::exception&) {
    throw InvalidArgument("save_checkpoint: variable names must be UTF-8 text to be stored in a checkpoint");
  }
  const bool multi = rt.process_count > 1;
  if (multi) {
    // Collective from here on: first make sure every instance is saving a session of the same layout.
    collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
    if (!exchange.agree(s.options.name + ": save_checkpoint",
                        collectives::Fingerprint().add("checkpoint layout").add(layout_text)))
      throw MismatchError("save_checkpoint: the instances are not all saving a session of the same layout at this point "
                          "(save_checkpoint is collective: every instance calls it, in the same order as the other collectives)");
  }
  // Each group's value from its first replica, from whichever instance holds it (collective).
  if (s.host_stale) session.weights_to_host();
  const auto unbound = unbound_entries(s);
  std::vector<Array> entries = gather_entries(s, unbound);

  std::exception_ptr error;
  if (rt.process_index == 0) {
    try {
      std::vector<safetensors::NamedTensor> tensors;
      for (std::size_t i = 0; i < s.variables.size(); ++i) tensors.push_back({layout.variables[i].tensor, s.variables[i]->host});
      for (std::size_t k = 0; k < entries.size(); ++k) tensors.push_back({layout.entries[k].tensor, entries[k]});
      // The layout first, then the caller's metadata.
      std::vector<std::pair<std::string, std::string>> file_metadata{{kLayoutKey, layout_text}};
      file_metadata.insert(file_metadata.end(), metadata.begin(), metadata.end());
      safetensors::write(path, file_metadata, tensors, "save_checkpoint");
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (multi) {
    // The others return only once the file is there (or learn that instance 0 could not write it).
    collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
    const bool written = exchange.agree(s.options.name + ": save_checkpoint waiting for instance 0 to write " + path,
                                        collectives::Fingerprint().add(error ? "not written" : "written"));
    if (!written && !error)
      throw Error("save_checkpoint: instance 0 could not write '" + path + "' (its error says why)");
  }
  if (error) std::rethrow_exception(error);
}

std::map<std::string, std::string> load_checkpoint(Session& session, const std::string& path) {
  SessionState& s = *session.state;
  auto& rt = s.runtime->impl();
  const safetensors::Reader file(path, "load_checkpoint");
  const auto& tensors = file.tensors();
  std::map<std::string, std::string> user = file.metadata();
  const auto layout_it = user.find(kLayoutKey);
  if (layout_it == user.end())
    file.fail("it holds no weft session layout (metadata key \"" + std::string(kLayoutKey) +
              "\"): it was not written by save_checkpoint");
  const std::string layout_text = layout_it->second;
  user.erase(layout_it);
  const json layout_json = io::parse_bounded_json(layout_text, "the session layout", [&](const std::string& what) { file.fail(what); });
  const Layout stored = LayoutReader([&](const std::string& what) { file.fail("corrupt session layout: " + what); }).read(layout_json);
  if (auto difference = first_difference(stored, layout_of(s))) file.fail(*difference);

  // Every tensor the layout names, with the type the session needs, read into host memory before anything
  // in the session changes.
  auto read_tensor = [&](const std::string& name, DType dtype, const Shape& shape, const std::string& what) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) file.fail("the tensor '" + name + "' of " + what + " is missing");
    const safetensors::TensorInfo& t = it->second;
    if (t.dtype != dtype || t.shape != shape)
      file.fail("the tensor '" + name + "' of " + what + " is " + safetensors::type_str(t.dtype, t.shape) + ", the session needs " +
                safetensors::type_str(dtype, shape));
    Array a = Array::empty(shape, dtype, rt.host_account);
    file.read(name, t, a);
    return a;
  };
  std::vector<Array> values;
  for (std::size_t i = 0; i < s.variables.size(); ++i) {
    const VariableState& v = *s.variables[i];
    values.push_back(read_tensor(stored.variables[i].tensor, v.dtype, v.host.shape(),
                                 "variable " + std::to_string(i) + " '" + v.name + "'"));
  }
  std::map<std::pair<int, int>, std::string> entry_tensor;
  for (const EntryLayout& e : stored.entries) entry_tensor[{e.buffer, e.entry}] = e.tensor;
  const auto unbound = unbound_entries(s);
  std::vector<Array> entries;
  for (const auto& [b, e] : unbound) {
    const std::string what = "remote buffer " + std::to_string(b->id) + " entry " + std::to_string(e);
    const auto it = entry_tensor.find({b->id, e});
    if (it == entry_tensor.end()) file.fail("corrupt session layout: no tensor for " + what);
    Shape shape = b->shape;
    shape.insert(shape.begin(), s.replicas);
    entries.push_back(read_tensor(it->second, b->dtype, shape, what));
  }

  check_tensors_named(stored, s, file);

  // Commit: host values, this instance's remote entries, then the devices if they hold the weights.
  for (std::size_t i = 0; i < s.variables.size(); ++i) s.variables[i]->host = values[i];
  for (std::size_t k = 0; k < unbound.size(); ++k) {
    RemoteBufferState& b = *unbound[k].first;
    for (int r : s.local_replicas) b.data[r][unbound[k].second] = entries[k][r].copy();
  }
  if (s.weights_on_device) session.weights_from_host();
  s.host_stale = false;
  return user;
}

}  // namespace weft
