// What train_fashion_mnist shows and records while it trains: a progress bar with ETA on a terminal (plain
// per-epoch lines otherwise, e.g. under weftrun or in CI logs) and the metrics CSV that
// scripts/plot_training.py draws.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "trainer.hpp"

namespace mnist {

class ProgressDisplay {
 public:
  // `terminal`: draw a bar that redraws in place; else print one line per epoch.
  ProgressDisplay(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  void step(const StepRecord& record, std::int64_t steps_per_epoch, std::int64_t total_steps);
  void epoch(const EpochRecord& record);

 private:
  std::FILE* out_;
  bool terminal_;
  double last_draw_s_ = -1;
  std::int64_t first_step_ = -1;
  double first_elapsed_s_ = 0;
};

// Metrics CSV, header `kind,epoch,step,elapsed_s,loss,samples_per_s,test_accuracy`: one `step` row per
// step, one `epoch` row per epoch (mean loss, test accuracy, mean samples/s).
class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path);  // throws std::runtime_error when it cannot be written
  void step(const StepRecord& record);
  void epoch(const EpochRecord& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace mnist
