#include "mpirun_report.hpp"

#include <regex>

namespace weftrun {
namespace {

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
  if (std::regex_search(text, m, noticed)) {
    MpirunEvent e;
    e.kind = MpirunEvent::signal;
    e.rank = std::stoi(m[1]);
    e.pid = std::stol(m[2]);
    e.node = m[3];
    e.value = std::stoi(m[4]);
    e.signal_name = m[5];
    events.push_back(e);
    recognised = true;
  }
  if (std::regex_search(text, m, exit_code)) {
    MpirunEvent e;
    e.kind = MpirunEvent::exit_code;
    e.rank = std::stoi(m[1]);
    e.value = std::stoi(m[2]);
    events.push_back(e);
    recognised = true;
  }
  if (std::regex_search(text, m, improper)) {
    MpirunEvent e;
    e.kind = MpirunEvent::improper_exit;
    e.rank = std::stoi(m[1]);
    e.pid = std::stol(m[2]);
    e.node = m[3];
    events.push_back(e);
    recognised = true;
  }
  if (std::regex_search(text, m, abort)) {
    MpirunEvent e;
    e.kind = MpirunEvent::mpi_abort;
    e.rank = std::stoi(m[1]);
    e.node = m[2];  // the communicator
    e.value = std::stoi(m[3]);
    events.push_back(e);
    recognised = true;
  }
  if (std::regex_search(text, m, primary)) {
    MpirunEvent e;
    e.kind = MpirunEvent::aborted_job;
    e.value = std::stoi(m[1]);
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
