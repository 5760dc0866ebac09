// collectives reaching up to the runtime
#include "runtime/internal.hpp"
#include "transport/interprocess.hpp"
