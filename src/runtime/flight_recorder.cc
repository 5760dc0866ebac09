// Flight recorder rings and their JSON dumps (reliability R21; see flight_recorder.hpp for the design).
#include "runtime/flight_recorder.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include "array/file_io.hpp"
#include "core/log.hpp"
#include "weft/error.hpp"

namespace weft::detail {
namespace {

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A JSON string literal (quotes included) of arbitrary text: messages and paths may hold anything.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

const char* state_name(FlightRing::State s) {
  switch (s) {
    case FlightRing::State::started: return "started";
    case FlightRing::State::completed: return "completed";
    case FlightRing::State::failed: return "failed";
  }
  return "?";
}

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "InvalidArgument";
    case ErrorKind::mismatch: return "MismatchError";
    case ErrorKind::timeout: return "TimeoutError";
    case ErrorKind::aborted: return "AbortedError";
    case ErrorKind::peer_lost: return "PeerLostError";
    case ErrorKind::out_of_memory: return "OutOfMemoryError";
    case ErrorKind::error: return "Error";
    case ErrorKind::foreign: return "exception";
  }
  return "Error";
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

void FlightRing::start(std::uint64_t execution, const std::string& execution_name, std::uint64_t seq, const char* api,
                       const char* file, unsigned line, DType dtype, std::int64_t count,
                       const std::shared_ptr<const ReplicaGroups>& groups, int replica, int replicas,
                       bool after_abort) {
  if (records_.size() < capacity_) {
    try {
      records_.emplace_back();
    } catch (const std::bad_alloc&) {
      throw OutOfMemoryError("out of memory growing a flight recorder ring to " + std::to_string(records_.size() + 1) +
                             " records of " + std::to_string(sizeof(Record)) + " bytes (WEFT_FLIGHT_RECORDER = " +
                             std::to_string(capacity_) +
                             " records per device); lower WEFT_FLIGHT_RECORDER (RuntimeOptions::flight_recorder)");
    }
  }
  Record& r = records_[entered_ % capacity_];
  ++entered_;
  open_ = true;
  r.execution = execution;
  r.seq = seq;
  r.api = api;
  r.file = file;
  r.line = line;
  r.dtype = dtype;
  r.count = count;
  r.groups = groups;
  r.replica = replica;
  r.replicas = replicas;
  r.state = State::started;
  r.entered_after_abort = after_abort;
  r.start_us = now_us();
  r.end_us = 0;
  const std::size_t n = std::min(execution_name.size(), sizeof r.execution_name - 1);
  std::memcpy(r.execution_name, execution_name.data(), n);
  r.execution_name[n] = '\0';
  r.error.clear();
}

void FlightRing::complete() {
  if (!open_) return;
  Record& r = records_[(entered_ - 1) % records_.size()];
  r.state = State::completed;
  r.end_us = now_us();
  open_ = false;
}

void FlightRing::fail(const ErrorRecord& error) {
  if (!open_) return;
  Record& r = records_[(entered_ - 1) % records_.size()];
  r.state = State::failed;
  r.end_us = now_us();
  r.error_kind = error.kind;
  r.error = first_line(error.message);
  open_ = false;
}

std::string FlightRing::to_json(const Context& c) const {
  std::string out;
  out.reserve(512 + 400 * std::min<std::uint64_t>(entered_, records_.size()));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  out += "{\n  \"weft_flight_recorder\": 1,\n  \"instance\": " + std::to_string(c.instance) +
         ",\n  \"instances\": " + std::to_string(c.instances) + ",\n  \"host\": ";
  append_json_string(out, host);
  out += ",\n  \"pid\": " + std::to_string(::getpid()) + ",\n  \"replica\": " + std::to_string(c.replica) +
         ",\n  \"device\": " + std::to_string(c.device) + ",\n  \"execution\": " + std::to_string(c.execution) +
         ",\n  \"execution_name\": ";
  append_json_string(out, c.execution_name);
  out += ",\n  \"replicas\": " + std::to_string(c.replicas) + ",\n  \"error\": ";
  append_json_string(out, first_line(c.error));
  out += ",\n  \"dumped_us\": " + std::to_string(now_us()) + ",\n  \"capacity\": " + std::to_string(capacity_) +
         ",\n  \"recorded\": " + std::to_string(entered_) + ",\n  \"records\": [";
  const std::uint64_t n = records_.size();
  const std::uint64_t first = entered_ > n ? entered_ - n : 0;
  for (std::uint64_t i = first; i < entered_; ++i) {
    const Record& r = records_[i % n];
    out += i == first ? "\n" : ",\n";
    out += "    {\"execution\": " + std::to_string(r.execution) + ", \"execution_name\": ";
    append_json_string(out, r.execution_name);
    out += ", \"seq\": " + std::to_string(r.seq) + ", \"op\": \"" + r.api + "\", \"group\": [";
    if (r.groups) {
      const std::vector<int>& members = r.groups->members(r.groups->group_of(r.replica));
      for (std::size_t m = 0; m < members.size(); ++m) out += (m ? ", " : "") + std::to_string(members[m]);
    }
    out += "], \"groups\": ";
    append_json_string(out, r.groups ? r.groups->brief() : "");
    out += ", \"replica\": " + std::to_string(r.replica) + ", \"replicas\": " + std::to_string(r.replicas) +
           ", \"dtype\": \"" + std::string(dtype_name(r.dtype)) + "\", \"count\": " + std::to_string(r.count) +
           ", \"state\": \"" + state_name(r.state) + "\", \"entered_after_abort\": " +
           (r.entered_after_abort ? "true" : "false") + ", \"start_us\": " + std::to_string(r.start_us) +
           ", \"end_us\": " + std::to_string(r.end_us) + ", \"site\": ";
    append_json_string(out, std::string(r.file) + ":" + std::to_string(r.line));
    if (r.state == State::failed) {
      out += ", \"error_type\": \"" + std::string(kind_name(r.error_kind)) + "\", \"error\": ";
      append_json_string(out, r.error);
    }
    out += "}";
  }
  out += entered_ > first ? "\n  ]\n}\n" : "]\n}\n";
  return out;
}

bool FlightRing::dump(const std::string& dir, const Context& c) const {
  const std::string path =
      dir + "/weft-flight." + std::to_string(c.instance) + "." + std::to_string(c.replica) + ".json";
  try {
    // A local write of a few tens of KiB; no fsync (it could wait on a slow disk for long).
    io::write_file(path, to_json(c), "WEFT_DUMP", /*durable=*/false);
    return true;
  } catch (const std::exception& e) {  // out of memory too: the dump must not fail the replica
    log(LogLevel::error, std::string(e.what()) + " (this replica's flight recorder is not dumped)");
    return false;
  }
}

}  // namespace weft::detail
