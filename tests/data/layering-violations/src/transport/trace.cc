// the transport reaching into the program layer, which is not below it
#include "program/program.hpp"
