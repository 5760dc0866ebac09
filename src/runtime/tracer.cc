// WEFT_TRACE: the Chrome-trace timeline (tracer.hpp): spans kept in a bounded ring, written as Trace Event
// Format JSON when the runtime ends.
#include <cstdio>
#include <exception>
#include <string>

#include "array/file_io.hpp"
#include "core/log.hpp"
#include "runtime/tracer.hpp"

namespace weft {

void Tracer::span(std::string name, int replica, Clock::time_point begin, Clock::time_point end, std::string args_json) {
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - start_).count(); };
  Event e{std::move(name), replica, us(begin), us(end) - us(begin), std::move(args_json)};
  std::lock_guard lock(mutex_);
  if (events_.size() < capacity_) {
    events_.push_back(std::move(e));
  } else {
    events_[next_] = std::move(e);
    next_ = (next_ + 1) % capacity_;
    ++dropped_;
  }
}

void Tracer::write() const {
  std::lock_guard lock(mutex_);
  try {
    std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    char numbers[96];
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[(next_ + i) % events_.size()];  // oldest first
      text += i ? ",\n{\"name\": \"" : "{\"name\": \"";
      text += e.name;
      std::snprintf(numbers, sizeof numbers, "\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": ",
                    process_, e.replica, e.begin_us, e.duration_us);
      text += numbers;
      text += e.args_json.empty() ? "{}" : e.args_json;
      text += "}";
    }
    if (dropped_ > 0)
      text += "\n], \"otherData\": {\"dropped_events\": " + std::to_string(dropped_) + ", \"kept_events\": " +
              std::to_string(events_.size()) + "}}\n";
    else
      text += "\n]}\n";
    // Through a temporary of an unpredictable name, renamed into place (io::AtomicFile): a symlink planted
    // at the trace's name, or at a temporary's, is never written through (issue 21, item 8).
    io::write_file(path_, text, "WEFT_TRACE", /*durable=*/false);
  } catch (const std::exception& e) {
    log(LogLevel::error, std::string(e.what()) + " (the timeline is not written)");
  }
}

}  // namespace weft
