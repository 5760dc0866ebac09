// core reaching up to the array library
#include "array/element_types.hpp"
#include "core/log.hpp"
