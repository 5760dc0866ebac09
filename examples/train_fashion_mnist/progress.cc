// Progress bar and metrics CSV of train_fashion_mnist.
#include "progress.hpp"

#include <cmath>
#include <stdexcept>

namespace mnist {
namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%02ld:%02ld", s / 60, s % 60);
  }
  return text;
}

}  // namespace

void ProgressDisplay::step(const StepRecord& r, std::int64_t steps_per_epoch, std::int64_t total_steps) {
  if (!terminal_) return;
  if (first_step_ < 0) {
    first_step_ = r.step;
    first_elapsed_s_ = r.elapsed_s;
  }
  const bool last = r.step + 1 == total_steps;
  if (!last && r.elapsed_s - last_draw_s_ < 0.1) return;  // redraw at most 10 times a second
  last_draw_s_ = r.elapsed_s;
  const double done = static_cast<double>(r.step + 1) / static_cast<double>(total_steps);
  const std::int64_t steps_done = r.step + 1 - first_step_;
  const double per_step = steps_done > 0 ? (r.elapsed_s - first_elapsed_s_) / static_cast<double>(steps_done) : 0;
  const double eta = per_step * static_cast<double>(total_steps - r.step - 1);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
  std::fprintf(out_, "\r\033[Kepoch %d step %lld/%lld [%s] %3.0f%% loss %.4f %.0f samples/s ETA %s", r.epoch + 1,
               static_cast<long long>(r.step % steps_per_epoch + 1), static_cast<long long>(steps_per_epoch), bar.c_str(),
               done * 100, r.loss, r.samples_per_s, clock_text(eta).c_str());
  std::fflush(out_);
}

void ProgressDisplay::epoch(const EpochRecord& r) {
  if (terminal_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "epoch %d: loss %.4f, test accuracy %.4f, %.0f samples/s, %s elapsed\n", r.epoch + 1, r.loss,
               r.test_accuracy, r.samples_per_s, clock_text(r.elapsed_s).c_str());
  std::fflush(out_);
}

MetricsFile::MetricsFile(const std::string& path) : path_(path), out_(path) {
  if (!out_) throw std::runtime_error("--metrics: cannot write " + path);
  out_ << "kind,epoch,step,elapsed_s,loss,samples_per_s,test_accuracy\n";
}

void MetricsFile::step(const StepRecord& r) {
  char line[256];
  std::snprintf(line, sizeof line, "step,%d,%lld,%.6f,%.17g,%.3f,\n", r.epoch, static_cast<long long>(r.step), r.elapsed_s,
                r.loss, r.samples_per_s);
  out_ << line;
  if (!out_) throw std::runtime_error("--metrics: write to " + path_ + " failed");
}

void MetricsFile::epoch(const EpochRecord& r) {
  char line[256];
  std::snprintf(line, sizeof line, "epoch,%d,,%.6f,%.9g,%.3f,%.6f\n", r.epoch, r.elapsed_s, r.loss, r.samples_per_s,
                r.test_accuracy);
  out_ << line << std::flush;
  if (!out_) throw std::runtime_error("--metrics: write to " + path_ + " failed");
}

}  // namespace mnist
