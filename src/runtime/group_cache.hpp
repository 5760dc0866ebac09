// The replica groups of every (axes, axis_index_groups) a program used, resolved once per prepared program
// (a pmap signature, a session) rather than at every collective.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "weft/groups.hpp"
#include "weft/replica.hpp"

namespace weft::detail {

class GroupCache {
 public:
  GroupCache();
  std::shared_ptr<const ReplicaGroups> along_axes(const Mesh& mesh, const Axes& axes, const AxisIndexGroups& index_groups);

 private:
  const std::uint64_t id_;  // unique for the process's lifetime (an address may be reused, an id is not)
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const ReplicaGroups>> groups_;
};

}  // namespace weft::detail
