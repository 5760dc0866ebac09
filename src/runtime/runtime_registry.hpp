// The live runtimes of the process, most recent last: Runtime::current() is the last one (or a default made
// on first use).
#pragma once
#include "weft/runtime.hpp"

namespace weft::detail {

void register_runtime(Runtime* runtime);    // the last step of a Runtime's construction
void unregister_runtime(Runtime* runtime);  // the first step of its destruction

}  // namespace weft::detail
