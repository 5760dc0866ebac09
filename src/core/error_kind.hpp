// Errors cross threads as (kind, message) values, never as shared exception objects: every thread that
// reports an error throws its own copy, so no exception object is ever touched by two threads.
#pragma once
#include <string>

namespace weft {

enum class ErrorKind { error, invalid_argument, mismatch, timeout, aborted, peer_lost, out_of_memory, foreign };

struct ErrorRecord {
  ErrorKind kind = ErrorKind::error;
  std::string message;  // for foreign exceptions: "<demangled type>: <what()>"
};

// Call inside a catch block: the current exception as a record.
ErrorRecord current_error();
// Throws the weft exception type for `kind` (foreign exceptions become weft::Error) with `message`.
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace weft
