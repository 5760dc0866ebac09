// core reaching up to the runtime
#include "weft/replica.hpp"
#include "weft/array.hpp"
