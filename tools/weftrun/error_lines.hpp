// Which lines of an instance's output tell of an error, and how tellingly. weftrun uses this twice: to let
// error lines through --only-output-from-instance, and to pick each instance's most telling line for the
// failure summary (summary.cc) when the runtime left no "weft: error:" of its own.
#pragma once

#include <string>

namespace weftrun {

// Lines that get through --only-output-from-instance: errors, crashes, signals.
bool looks_like_error(const std::string& line);

// How telling an error line is, for the summary: 5 the runtime's root cause, 4 an exception's message, 3 any
// "error", 2 a crash word, 1 any other error-like line; 0 for Open MPI's signal-handler boilerplate
// ("*** Process received signal ***", backtrace frames), which says nothing about the cause.
int error_score(const std::string& line);

}  // namespace weftrun
