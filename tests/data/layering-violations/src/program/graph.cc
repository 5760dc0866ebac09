// the program layer reaching sideways into the transport (program sits on the array library only)
#include "transport/rendezvous.hpp"
#include "program/program.hpp"
#include "weft/ops.hpp"
