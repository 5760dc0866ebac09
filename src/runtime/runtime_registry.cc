// The runtime registry: the process's live runtimes, most recent last. Runtime::current() is the one pmap and
// device_put use when none is named (the last one made, or a default one made on first use).
#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/default_options.hpp"
#include "runtime/internal.hpp"
#include "runtime/runtime_registry.hpp"

namespace weft {

namespace {
std::mutex g_runtimes_mutex;
std::vector<Runtime*> g_runtimes;  // live runtimes, most recent last
}  // namespace

namespace detail {

void register_runtime(Runtime* runtime) {
  std::lock_guard lock(g_runtimes_mutex);
  g_runtimes.push_back(runtime);
}

void unregister_runtime(Runtime* runtime) {
  std::lock_guard lock(g_runtimes_mutex);
  g_runtimes.erase(std::remove(g_runtimes.begin(), g_runtimes.end(), runtime), g_runtimes.end());
}

}  // namespace detail

Runtime& Runtime::current() {
  std::optional<RuntimeOptions> like;  // a forked child: the options of the runtime it inherited
  {
    std::lock_guard lock(g_runtimes_mutex);
    if (!g_runtimes.empty()) {
      Runtime* newest = g_runtimes.back();
      if (!detail::forked_since(newest->impl().made_in)) return *newest;
      like = newest->options();
    }
  }
  // A default runtime (options from the environment, or an embedder's: set_default_options) for programs
  // that never make one; it lives until exit. In a child forked since it was made, a fresh one (with the
  // options of the runtime the parent used last), as the inherited one has no workers (fork_guard.hpp).
  static std::mutex fallback_mutex;
  static Runtime* fallback = nullptr;
  std::lock_guard lock(fallback_mutex);
  if (!fallback || detail::forked_since(fallback->impl().made_in))
    fallback = new Runtime(like ? *like : detail::default_runtime_options());  // a forked-over one is left as is
  return *fallback;
}

}  // namespace weft
