// Tracing from C++ (weft/jit.hpp): a function traced into a Program with symbolic inputs, a Replica whose
// collectives record equations for pmap(jit(f)), and the per-signature cache jitted functions share. Lives in
// the runtime because the traced Replica is the runtime's (its state says it traces, not runs).
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "runtime/execution.hpp"
#include "weft/error.hpp"
#include "weft/jit.hpp"

namespace weft::detail {

Program trace_program(const TraceBody& body, const std::vector<ValueType>& types, const Mesh& mesh, bool replica,
                      const std::string& name) {
  ProgramTrace trace(mesh, name);
  std::vector<Array> inputs;
  inputs.reserve(types.size());
  for (const ValueType& type : types) inputs.push_back(trace.input(type));
  std::vector<Array> outputs;
  if (replica) {
    ReplicaState state{nullptr, -1, -1, nullptr, nullptr, &trace};
    Replica r(&state);
    outputs = body(&r, inputs);
  } else {
    outputs = body(nullptr, inputs);
  }
  return trace.finish(outputs);
}

namespace {

struct Entry {
  std::vector<MeshAxis> mesh;
  std::vector<std::pair<DType, Shape>> signature;
  Program program;
  std::map<std::string, std::unique_ptr<Program>> derived;  // by key (derived(): a VJP per argnums, ...)
};

bool same_mesh(const std::vector<MeshAxis>& a, const Mesh& b) {
  const auto& axes = b.axes();
  if (a.size() != axes.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size != axes[i].size || a[i].name != axes[i].name) return false;
  }
  return true;
}

bool matches(const Entry& e, std::span<const Array> inputs, const Mesh& mesh) {
  if (e.signature.size() != inputs.size() || !same_mesh(e.mesh, mesh)) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (e.signature[i].first != inputs[i].dtype() || e.signature[i].second != inputs[i].shape()) return false;
  }
  return true;
}

}  // namespace

struct ProgramCache::Impl {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<Entry>> entries;  // never removed: `last` may point at any
  std::atomic<const Entry*> last{nullptr};
};

ProgramCache::ProgramCache() : impl_(std::make_unique<Impl>()) {}
ProgramCache::~ProgramCache() = default;

const Program* ProgramCache::find(std::span<const Array> inputs, const Mesh& mesh) const {
  const Entry* last = impl_->last.load(std::memory_order_acquire);
  if (last != nullptr && matches(*last, inputs, mesh)) return &last->program;
  std::lock_guard lock(impl_->mutex);
  for (const auto& e : impl_->entries) {
    if (matches(*e, inputs, mesh)) {
      impl_->last.store(e.get(), std::memory_order_release);
      return &e->program;
    }
  }
  return nullptr;
}

const Program& ProgramCache::trace(std::span<const Array> inputs, const Mesh& mesh, bool replica,
                                   const std::vector<std::optional<int>>& in_axes, const TraceBody& body,
                                   const std::string& name) {
  // Under the lock: replicas arriving together wait for the one tracing (tracing never yields its fiber:
  // a traced Replica's collectives only record).
  std::lock_guard lock(impl_->mutex);
  for (const auto& e : impl_->entries) {
    if (matches(*e, inputs, mesh)) return e->program;
  }
  if (replica && !in_axes.empty() && in_axes.size() != inputs.size()) {
    throw InvalidArgument(name + ": in_axes has " + std::to_string(in_axes.size()) + " entries for " +
                          std::to_string(inputs.size()) + " arguments");
  }
  std::vector<std::string> varying;
  if (replica) {
    for (const MeshAxis& axis : mesh.axes()) varying.push_back(axis.name);
    std::sort(varying.begin(), varying.end());
  }
  std::vector<ValueType> types;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const bool mapped = replica && (in_axes.empty() || in_axes[i].has_value());
    types.push_back(ValueType{inputs[i].dtype(), inputs[i].shape(), mapped ? varying : std::vector<std::string>{}});
  }
  auto entry = std::make_unique<Entry>();
  entry->mesh = mesh.axes();
  for (const Array& a : inputs) entry->signature.emplace_back(a.dtype(), a.shape());
  entry->program = trace_program(body, types, mesh, replica, name);
  impl_->entries.push_back(std::move(entry));
  impl_->last.store(impl_->entries.back().get(), std::memory_order_release);
  return impl_->entries.back()->program;
}

const Program& ProgramCache::derived(const Program& traced, const std::string& key,
                                     const std::function<Program(const Program&)>& make) {
  std::lock_guard lock(impl_->mutex);
  for (const auto& e : impl_->entries) {
    if (&e->program != &traced) continue;
    auto it = e->derived.find(key);
    if (it == e->derived.end()) it = e->derived.emplace(key, std::make_unique<Program>(make(traced))).first;
    return *it->second;
  }
  throw InvalidArgument("ProgramCache::derived: the program is not one of this cache's");
}

std::size_t ProgramCache::traces() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->entries.size();
}

}  // namespace weft::detail
