// Dead-code elimination: drops equations none of whose results reach a program output. Effects (host and
// remote transfers, variable reads and updates) are never dropped: their point is what they do.
#pragma once
#include "program.hpp"

namespace weft::program {

// The program without its dead equations; values keep their ids (the type table is unchanged).
// `program` must be verified (its value ids in range).
Program eliminate_dead_code(const Program& program);

}  // namespace weft::program
