// Runtime::set_default_options and what the default runtime reads back (why: default_options.hpp).
#include "runtime/default_options.hpp"

#include <mutex>
#include <utility>

namespace weft {
namespace {

// Function-local: Runtime::current() may run during another file's static initialization.
struct DefaultOptions {
  std::mutex mutex;
  RuntimeOptions options;
};
DefaultOptions& default_options() {
  static DefaultOptions defaults;
  return defaults;
}

}  // namespace

void Runtime::set_default_options(RuntimeOptions options) {
  DefaultOptions& defaults = default_options();
  std::lock_guard lock(defaults.mutex);
  defaults.options = std::move(options);
}

namespace detail {

RuntimeOptions default_runtime_options() {
  DefaultOptions& defaults = default_options();
  std::lock_guard lock(defaults.mutex);
  return defaults.options;
}

}  // namespace detail
}  // namespace weft
