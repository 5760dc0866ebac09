// The runtime registry: the process's live runtimes, most recent last. Runtime::current() is the one pmap and
// device_put use when none is named (the last one made, or a default one made on first use).
#include <algorithm>
#include <mutex>
#include <vector>

#include "runtime/default_options.hpp"
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
  {
    std::lock_guard lock(g_runtimes_mutex);
    if (!g_runtimes.empty()) return *g_runtimes.back();
  }
  // A default runtime (options from the environment, or an embedder's: set_default_options) for programs
  // that never make one; it lives until exit.
  static Runtime* fallback = new Runtime(detail::default_runtime_options());
  return *fallback;
}

}  // namespace weft
