#include "mpirun_report.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <regex>
#include <string_view>

namespace weftrun {
namespace {

// A number mpirun printed, saturated to the type's range: std::stoi would throw std::out_of_range (and end
// weftrun through std::terminate) on a rank or code that does not fit.
long long saturated(const std::ssub_match& digits, long long lo, long long hi) {
  const std::string text = digits.str();
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return text.starts_with("-") ? lo : hi;
  if (ec != std::errc() || end != text.data() + text.size()) return 0;
  return v < lo ? lo : v > hi ? hi : v;
}
int to_int(const std::ssub_match& digits) { return static_cast<int>(saturated(digits, INT_MIN, INT_MAX)); }
long to_long(const std::ssub_match& digits) { return static_cast<long>(saturated(digits, LONG_MIN, LONG_MAX)); }

// Finds `re` where it matches from an occurrence of its literal start `anchor`, looking at most kWindow
// characters on: libstdc++'s regex engine recurses once per character it consumes, so one regex_search over
// a whole block (hundreds of kilobytes when an instance's output ends up untagged) overflows the stack.
// mpirun's messages are a few hundred characters.
constexpr std::size_t kWindow = 1024;
bool search_at(const std::string& text, std::string_view anchor, const std::regex& re, std::smatch& m) {
  for (std::size_t at = text.find(anchor); at != std::string::npos; at = text.find(anchor, at + 1)) {
    const auto begin = text.begin() + static_cast<std::ptrdiff_t>(at);
    const auto end = text.begin() + static_cast<std::ptrdiff_t>(std::min(text.size(), at + kWindow));
    if (std::regex_search(begin, end, m, re, std::regex_constants::match_continuous)) return true;
  }
  return false;
}

bool is_rule(const std::string& line) {
  std::size_t dashes = 0;
  for (char c : line) {
    if (c == '-')
      ++dashes;
    else if (c != ' ' && c != '\t' && c != '\r')
      return false;
  }
  return dashes >= 10;
}

// One block's text on one line, runs of white space collapsed, so messages wrapped over lines still match.
std::string flatten(const std::vector<std::string>& block) {
  std::string out;
  for (const std::string& line : block)
    for (char c : line) {
      const bool space = c == ' ' || c == '\t' || c == '\r';
      if (space) {
        if (!out.empty() && out.back() != ' ') out += ' ';
      } else {
        out += c;
      }
    }
  return out;
}

// Lines inside one block are joined with a space first.
std::string flatten_block(const std::vector<std::string>& block) {
  std::vector<std::string> spaced;
  spaced.reserve(block.size());
  for (const std::string& line : block) {
    std::string l = line;
    l += ' ';
    spaced.push_back(std::move(l));
  }
  return flatten(spaced);
}

bool parse_block(const std::vector<std::string>& block, std::vector<MpirunEvent>& events) {
  static const std::regex noticed(
      R"(process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
  static const std::regex exit_code(R"(Process name: \[\[\d+,\d+\],(\d+)\] Exit code: (-?\d+))");
  static const std::regex improper(R"(process rank (\d+) with PID (\d+) on node (\S+) exiting improperly)");
  static const std::regex abort(R"(MPI_ABORT was invoked on rank (\d+) in communicator (.+?) with errorcode (-?\d+))");
  static const std::regex primary(R"(but (\d+) process(?:es)? returned a non-zero exit code)");
  const std::string text = flatten_block(block);
  bool recognised = false;
  std::smatch m;
  if (search_at(text, "process rank ", noticed, m)) {
    MpirunEvent e;
    e.kind = MpirunEvent::signal;
    e.rank = to_int(m[1]);
    e.pid = to_long(m[2]);
    e.node = m[3];
    e.value = to_int(m[4]);
    e.signal_name = m[5];
    events.push_back(e);
    recognised = true;
  }
  if (search_at(text, "Process name: [[", exit_code, m)) {
    MpirunEvent e;
    e.kind = MpirunEvent::exit_code;
    e.rank = to_int(m[1]);
    e.value = to_int(m[2]);
    events.push_back(e);
    recognised = true;
  }
  if (search_at(text, "process rank ", improper, m)) {
    MpirunEvent e;
    e.kind = MpirunEvent::improper_exit;
    e.rank = to_int(m[1]);
    e.pid = to_long(m[2]);
    e.node = m[3];
    events.push_back(e);
    recognised = true;
  }
  if (search_at(text, "MPI_ABORT was invoked on rank ", abort, m)) {
    MpirunEvent e;
    e.kind = MpirunEvent::mpi_abort;
    e.rank = to_int(m[1]);
    e.node = m[2];  // the communicator
    e.value = to_int(m[3]);
    events.push_back(e);
    recognised = true;
  }
  if (search_at(text, "but ", primary, m)) {
    MpirunEvent e;
    e.kind = MpirunEvent::aborted_job;
    e.value = to_int(m[1]);
    events.push_back(e);
    recognised = true;
  }
  return recognised;
}

}  // namespace

MpirunReport parse_mpirun_report(const std::vector<std::string>& lines) {
  MpirunReport report;
  std::vector<std::string> block;
  auto flush = [&] {
    bool blank = true;
    for (const std::string& l : block)
      if (l.find_first_not_of(" \t\r") != std::string::npos) blank = false;
    if (!blank && !parse_block(block, report.events))
      for (const std::string& l : block)
        if (l.find_first_not_of(" \t\r") != std::string::npos) report.other_lines.push_back(l);
    block.clear();
  };
  for (const std::string& line : lines) {
    if (is_rule(line))
      flush();
    else
      block.push_back(line);
  }
  flush();
  return report;
}

}  // namespace weftrun
