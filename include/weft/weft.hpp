// The whole public API of weft.
#pragma once
#include "weft/array.hpp"
#include "weft/dtype.hpp"
#include "weft/error.hpp"
#include "weft/groups.hpp"
#include "weft/pmap.hpp"
#include "weft/program.hpp"
#include "weft/reduce_op.hpp"
#include "weft/replica.hpp"
#include "weft/runtime.hpp"
#include "weft/session.hpp"
#include "weft/sharded_array.hpp"
