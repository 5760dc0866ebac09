// A weight gradient's reduce-scatter turned into gathers of its factors (the trainer's sharded update, done by
// the program layer instead of by hand). Data-parallel replicas each hold a batch slice x_r [b, n] and the
// loss's gradient at the layer's output d_r [b, m]; the weight's gradient is sum_r x_r^T d_r, and its row
// shards are psum_scatter(matmul(x, d, transpose_a), axis 0, tiled). The same rows come from
//   all_to_all(x, split_axis=1, concat_axis=0, tiled)^T  @  all_gather(d, axis 0, tiled)
// (member k receives every replica's rows of its own column block of x, and every replica's d): one product
// over all k*b rows instead of k products over b and a reduction of k full [n, m] gradients. Fewer elements
// cross replicas when b (n + k m) < n m (a batch slice of 32 against 784 x 512 weights: 137k against 351k).
// Only the order of the float sums changes.
#pragma once
#include "program.hpp"

namespace weft::program {

// `program` (verified) with every such psum_scatter of a matmul whose result nothing else reads rewritten, when
// it moves fewer elements; everything else unchanged. New values get new ids.
Program gather_scattered_products(const Program& program);

}  // namespace weft::program
