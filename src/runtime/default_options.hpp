// The options the default runtime (Runtime::current()'s, made when no runtime is live) is made with: what an
// embedder gave Runtime::set_default_options before that runtime was made, else none (every field from the
// environment or its default). Its own file so that the runtime's setup reads one call.
#pragma once
#include "weft/runtime.hpp"

namespace weft::detail {

RuntimeOptions default_runtime_options();

}  // namespace weft::detail
