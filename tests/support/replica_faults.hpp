// Helpers for tests that make replicas fail, stall or race: timing a call and catching what it throws,
// sleeps that can be cut short, per-replica error logs, scoped environment variables, text checks, and the
// generic program and expected texts of injected faults (WEFT_FAULT).
// Shared by the in-process reliability tests (reliability_test.cc, concurrency_test.cc, ...) and the fault
// soak test (tests/soak).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "weft/weft.hpp"

// Sanitizers replace the allocator (an impossible allocation aborts instead of throwing std::bad_alloc) and
// reserve terabytes of address space (an RLIMIT_AS-based test cannot work): tests that rely on either skip.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WEFT_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define WEFT_TEST_UNDER_SANITIZER 1
#endif
#endif
#ifndef WEFT_TEST_UNDER_SANITIZER
#define WEFT_TEST_UNDER_SANITIZER 0
#endif

namespace weft::testing {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A sleep that can be cut short: wait() returns when open() was called or `max` elapsed. A replica that is
// stuck in user code cannot be interrupted from outside, so "stuck" replicas sleep on a Gate that the test
// (or another replica, after it has seen its error) opens: no test takes as long as its nominal delay.
class Gate {
 public:
  bool wait(std::chrono::duration<double> max) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, max, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Counts replicas that saw an error; the test thread waits for a number of them (with a deadline).
class ErrorLog {
 public:
  explicit ErrorLog(int replicas) : at_(replicas, -1), what_(replicas) {}
  void record(int replica, double seconds, const std::string& what) {
    {
      std::lock_guard lock(mutex_);
      at_[replica] = seconds;
      what_[replica] = what;
      ++count_;
    }
    cv_.notify_all();
  }
  bool wait_for_count(int n, std::chrono::seconds max) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, max, [&] { return count_ >= n; });
  }
  double at(int replica) {
    std::lock_guard lock(mutex_);
    return at_[replica];
  }
  std::string what(int replica) {
    std::lock_guard lock(mutex_);
    return what_[replica];
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_ = 0;
  std::vector<double> at_;
  std::vector<std::string> what_;
};

// The weft error type of `e`, for messages and type assertions.
inline std::string ErrorType(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const AbortedError*>(&e)) return "AbortedError";
  if (dynamic_cast<const PeerLostError*>(&e)) return "PeerLostError";
  if (dynamic_cast<const OutOfMemoryError*>(&e)) return "OutOfMemoryError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

struct Outcome {
  bool threw = false;
  std::string type;
  std::string message;
  double seconds = 0;
};

// Runs `f`, timing it and catching what it throws.
inline Outcome Timed(const std::function<void()>& f) {
  Outcome o;
  const auto start = Clock::now();
  try {
    f();
  } catch (const std::exception& e) {
    o.threw = true;
    o.type = ErrorType(e);
    o.message = e.what();
  }
  o.seconds = SecondsSince(start);
  return o;
}

inline bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline void ExpectContains(const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_TRUE(Contains(text, p)) << "missing: " << p << "\nin message:\n" << text;
}

inline std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

inline int CountOccurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// Sets an environment variable for the lifetime of the scope (and restores the previous value); a null
// value unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// ---- fault injection (WEFT_FAULT, docs/reliability.md "Fault injection") ----------------------------------

// The generic program of the fault tests, in one process: `steps` psums over axis "i" of a 1-d pmap, each
// divided by the replica count, so every element stays 1 when nothing fails. tests/mpi/fault_program.cc is
// the same program for weftrun (20 steps).
inline auto PsumSteps(Runtime& rt, int steps) {
  PmapOptions options;
  options.axis = std::string("i");  // (move-assigned: g++ 12 sees a false -Wrestrict in assign(const char*))
  options.runtime = &rt;
  return pmap(
      [steps](Replica& r, const Array& x) {
        Array acc = x;
        for (int s = 0; s < steps; ++s) acc = r.psum(acc, "i") / static_cast<double>(r.num_replicas());
        return acc;
      },
      options);
}

// How the runtime names the replica a fault of `plan` acts on, written out here independently of
// src/runtime/fault.cc: "WEFT_FAULT "replica=3:at=5:throw": replica 3 (CpuDevice(id=3, process=0))". The
// replica's device has its id (a pmap over all devices).
inline std::string FaultActor(const std::string& plan, int replica, int process) {
  return "WEFT_FAULT \"" + plan + "\": replica " + std::to_string(replica) + " (CpuDevice(id=" + std::to_string(replica) +
         ", process=" + std::to_string(process) + "))";
}

// " before its collective #5, psum(": where the fault acted (its op, then shape and call site follow).
inline std::string FaultPlace(int collective, const std::string& api = "psum") {
  return " before its collective #" + std::to_string(collective) + ", " + api + "(";
}

}  // namespace weft::testing
