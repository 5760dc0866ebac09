// Which lines of an instance's output tell of an error (error_lines.hpp).
#include "error_lines.hpp"

#include <cctype>
#include <string_view>

#include "core/launcher_protocol.hpp"

namespace weftrun {
namespace {

// Case-insensitive search, as a lower-cased copy and std::string::find: a per-character std::search with
// tolower made a 1 MiB line cost ~40 ms per word, most of weftrun's time on long lines.
std::string lowered(std::string_view text) {
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// looks_like_error of a line already lower-cased.
bool looks_like_error_lower(const std::string& lower) {
  static constexpr std::string_view words[] = {
      "error",  "terminate called", "what():", "abort",      "signal", "segmentation fault", "killed",
      "fatal",  "core dumped",      "panic",   "sanitizer",  "exception", "traceback"};
  for (std::string_view w : words)
    if (lower.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

bool looks_like_error(const std::string& line) { return looks_like_error_lower(lowered(line)); }

int error_score(const std::string& line) {
  if (line.find(weft::launcher::kErrorPrefix) != std::string::npos) return 5;
  if (line.find("***") != std::string::npos || line.find("] [") != std::string::npos) return 0;
  if (line.find("what():") != std::string::npos) return 4;
  const std::string lower = lowered(line);
  if (lower.find("error") != std::string::npos) return 3;
  for (std::string_view w : {"terminate called", "exception", "fatal", "panic", "sanitizer", "traceback"})
    if (lower.find(w) != std::string::npos) return 2;
  return looks_like_error_lower(lower) ? 1 : 0;
}

}  // namespace weftrun
