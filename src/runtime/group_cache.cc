// The group cache (group_cache.hpp): a collective's (axes, axis_index_groups) resolved into ReplicaGroups
// once per prepared program; a replica repeating its last lookup skips even the key and the lock.
#include <atomic>
#include <string>
#include <vector>

#include "runtime/group_cache.hpp"
#include "weft/error.hpp"

namespace weft::detail {

GroupCache::GroupCache() : id_([] {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}()) {}

std::shared_ptr<const ReplicaGroups> GroupCache::along_axes(const Mesh& mesh, const Axes& axes,
                                                            const AxisIndexGroups& index_groups) {
  // A replica usually repeats the collective it just issued: remember its last lookup, no key, no lock.
  struct LastLookup {
    std::uint64_t cache = 0;
    std::vector<std::string> names;
    AxisIndexGroups index_groups;
    std::shared_ptr<const ReplicaGroups> groups;
  };
  thread_local LastLookup last;
  if (last.cache == id_ && last.names == axes.names && last.index_groups == index_groups) return last.groups;
  auto remember = [&](std::shared_ptr<const ReplicaGroups> groups) {
    last = {id_, axes.names, index_groups, groups};
    return groups;
  };
  std::string key;
  for (const std::string& a : axes.names) key += a + '\x1f';
  key += '\x1e';
  for (const auto& g : index_groups) {
    for (int i : g) key += std::to_string(i) + ',';
    key += ';';
  }
  std::lock_guard lock(mutex_);
  auto it = groups_.find(key);
  if (it != groups_.end()) return remember(it->second);
  ReplicaGroups groups = ReplicaGroups::along_axes(mesh, axes.names);
  if (!index_groups.empty()) {
    if (axes.names.size() != 1)
      throw InvalidArgument("axis_index_groups only apply to a single named axis, got " + std::to_string(axes.names.size()) + " axes");
    groups = groups.subdivide(index_groups);
  }
  auto shared = std::make_shared<const ReplicaGroups>(std::move(groups));
  groups_.emplace(key, shared);
  return remember(shared);
}

}  // namespace weft::detail
