// weft's runtime, programs and arrays in one include. Included on their own where used (the docs' examples do):
// the array functions (weft/ops.hpp: matmul, softmax, sum, ...), weft/checkpoint.hpp, memory.hpp, npy.hpp,
// random.hpp and settings.hpp.
#pragma once
#include "weft/array.hpp"
#include "weft/autodiff.hpp"
#include "weft/control_flow.hpp"
#include "weft/custom_vjp.hpp"
#include "weft/dtype.hpp"
#include "weft/error.hpp"
#include "weft/groups.hpp"
#include "weft/jit.hpp"
#include "weft/pmap.hpp"
#include "weft/program.hpp"
#include "weft/program_params.hpp"
#include "weft/reduce_op.hpp"
#include "weft/replica.hpp"
#include "weft/runtime.hpp"
#include "weft/session.hpp"
#include "weft/sharded_array.hpp"
#include "weft/transforms.hpp"
