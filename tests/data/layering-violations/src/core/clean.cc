// clean
#include "weft/groups.hpp"
#include "core/log.hpp"
