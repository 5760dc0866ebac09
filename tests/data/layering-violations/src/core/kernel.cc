// core reaching up to the runtime
#include "weft/replica.hpp"
#include "weft/dtype.hpp"
