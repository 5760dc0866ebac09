// Elementwise fusion, where it pays: a run of consecutive elementwise equations over one shape is evaluated
// block by block (each block's intermediates stay in cache) instead of op by op over whole arrays (each op
// a round trip to memory, and an array allocated per result). Runs of plain float arithmetic (add, subtract,
// multiply, divide, maximum, minimum: an optimizer's update) take direct loops at any size, writing a result
// into a dying input's buffer when nothing else holds it; other runs, over at least 1 Mi elements, run each
// block through the same kernels as the unfused program, on views. Either way the results are bit for bit
// the unfused ones; only the values the rest of the program uses are written out whole. One pair beyond
// elementwise runs: a matmul of bfloat16 operands whose only use is an astype to float32 (mixed precision's
// cast back after every product) runs as one kernel, the float32 result rounded in place, with no bfloat16
// array between (array/widened_matmul.hpp). WEFT_FUSION=off turns it all off (docs/settings.md).
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "program.hpp"

namespace weft::program {

struct LoopPlan;  // fusion.cc: a run evaluated by direct loops

// Equations [first, first + count) of a program, run as one step; fused when count > 1.
struct Step {
  std::size_t first = 0;
  std::size_t count = 1;
  // For a fused step: the values it defines that later equations or the outputs use (written out whole).
  std::vector<ValueId> materialize;
  // A fused run of plain float arithmetic: its direct loops' plan (else null: the blocked kernels).
  std::shared_ptr<const LoopPlan> loop;
  // The two equations are a bfloat16 matmul and the astype to float32 of its result (its only use).
  bool widened_matmul = false;
};

// The program's equations as steps, in order (every equation in exactly one). `program` must be verified.
std::vector<Step> plan_steps(const Program& program);

// Runs a fused step over `values` (indexed by ValueId: its inputs are there; its materialized results are
// put there).
void run_fused(const Program& program, const std::vector<Kernel>& kernels, const Step& step,
               std::vector<std::optional<Array>>& values);

// A direct-loop step computed in parts by several replicas holding the same inputs (the executor's shared
// runs, runtime/shared_runs.hpp): the step's element count; part `part` of `parts`, elements [begin, end),
// block-aligned so that every element is computed as the whole loop computes it (the same bits); the step's
// materialized results allocated whole and uninitialised (Step::materialize's order); and one part computed
// from a replica's `values` (read only: nothing is taken over) into those results' data.
std::int64_t loop_elements(const Program& program, const Step& step);
std::pair<std::int64_t, std::int64_t> loop_part_range(std::int64_t elements, int part, int parts);
std::vector<Array> allocate_materialized(const Program& program, const Step& step);
void run_loop_part(const Program& program, const Step& step, const std::vector<std::optional<Array>>& values,
                   std::span<std::byte* const> outputs, std::int64_t begin, std::int64_t end);

}  // namespace weft::program
