// WEFT_TRACE: the Chrome-trace timeline (tracer.hpp): spans kept in a bounded ring, written as Trace Event
// Format JSON when the runtime ends.
#include <cerrno>
#include <cstdio>
#include <cstring>

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
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) {
    log(LogLevel::error, "WEFT_TRACE: cannot open " + path_ + ": " + std::strerror(errno));
    return;
  }
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  for (std::size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[(next_ + i) % events_.size()];  // oldest first
    std::fprintf(f, "%s{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": %s}",
                 i ? ",\n" : "", e.name.c_str(), process_, e.replica, e.begin_us, e.duration_us,
                 e.args_json.empty() ? "{}" : e.args_json.c_str());
  }
  if (dropped_ > 0)
    std::fprintf(f, "\n], \"otherData\": {\"dropped_events\": %llu, \"kept_events\": %zu}}\n",
                 static_cast<unsigned long long>(dropped_), events_.size());
  else
    std::fputs("\n]}\n", f);
  // Written through a buffer: a full disk (or /dev/full) shows only at the flush in fclose.
  const bool failed = std::ferror(f) != 0;
  const int write_errno = errno;
  const bool close_failed = std::fclose(f) != 0;
  if (failed || close_failed)
    log(LogLevel::error, "WEFT_TRACE: writing " + path_ + " failed: " + std::strerror(close_failed ? errno : write_errno) +
                             " (the timeline is incomplete)");
}

}  // namespace weft
