// transport reaching up to the collectives
#include "collectives/request.hpp"
#include "core/log.hpp"
