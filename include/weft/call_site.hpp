// Where a collective was called: the file and line its errors, stall reports and flight records name
// ("psum(float32[4], axes (i)) at train.cc:42"). C++ callers never spell one: each collective's last
// parameter defaults to the caller's std::source_location, which converts. A binding for another language
// passes its own caller's site (the Python module passes the user's Python line: python/src/call_site.cc).
#pragma once
#include <source_location>

namespace weft {

class CallSite {
 public:
  constexpr CallSite() = default;
  // The text is not copied: it must live as long as the process may name the site (the runtime keeps sites
  // in its histories), as string literals and std::source_location's names do.
  constexpr CallSite(const char* file, unsigned line, const char* function = "")
      : file_(file), function_(function), line_(line) {}
  // Implicit, so that `CallSite site = std::source_location::current()` and any source_location convert.
  constexpr CallSite(const std::source_location& location)  // NOLINT(google-explicit-constructor)
      : file_(location.file_name()), function_(location.function_name()), line_(location.line()) {}

  // std::source_location's names, so that code reading a site reads either.
  constexpr const char* file_name() const { return file_; }
  constexpr const char* function_name() const { return function_; }
  constexpr unsigned line() const { return line_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};

}  // namespace weft
