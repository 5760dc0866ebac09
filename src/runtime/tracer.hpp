// WEFT_TRACE: the Chrome-trace (Trace Event Format) timeline of collectives, written when the runtime ends.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace weft {

// pid = process, tid = replica; one span per collective plus a "wait" sub-span for the rendezvous. The last
// `capacity` spans are kept (a ring: a long run keeps its end, in bounded memory); the file says how many
// were dropped.
class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  Tracer(std::string path, int process, std::int64_t capacity)
      : path_(std::move(path)), process_(process), capacity_(static_cast<std::size_t>(capacity)), start_(Clock::now()) {}
  bool enabled() const { return !path_.empty(); }
  void span(std::string name, int replica, Clock::time_point begin, Clock::time_point end, std::string args_json);
  void write() const;  // errors are logged, never thrown: tracing must not fail a program

 private:
  struct Event {
    std::string name;
    int replica;
    double begin_us, duration_us;
    std::string args_json;
  };
  std::string path_;
  int process_;  // the trace's pid
  std::size_t capacity_;
  Clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;  // a ring once full: the oldest is at next_
  std::size_t next_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace weft
