// weftrun's own words and small text helpers (text.hpp).
#include "text.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace weftrun {

std::string signal_text(int sig) {
  std::string s = "signal ";
  s += std::to_string(sig);
  const char* name = strsignal(sig);
  if (name) {
    s += " (";
    s += name;
    s += ")";
  }
  return s;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  q += "'";
  return q;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // errno says why; EPIPE: the reader went away (see Job::output_closed)
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void say(const std::string& line) {
  std::string s = "weftrun: ";
  s += line;
  s += '\n';
  write_all(2, s);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace weftrun
