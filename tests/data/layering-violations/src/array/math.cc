// the array library reaching up to the transport
#include "transport/rendezvous.hpp"
#include "weft/array.hpp"
#include "core/log.hpp"
