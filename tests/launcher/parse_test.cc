// weftrun's parsers against text Open MPI 4.1.4 really printed: `mpirun --tag-output` with chunks that do
// not end in a newline, and mpirun's own failure reports. No mpirun needed.
#include <cstdio>
#include <string>
#include <vector>

#include "mpirun_report.hpp"
#include "tagged_output.hpp"

namespace {

int failures = 0;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

struct Collected {
  std::vector<weftrun::TaggedLine> lines;
  weftrun::TaggedOutput::Sink sink() {
    return [this](const weftrun::TaggedLine& l) { lines.push_back(l); };
  }
};

bool has(const std::vector<weftrun::TaggedLine>& lines, int rank, const std::string& text) {
  for (const auto& l : lines)
    if (l.rank == rank && l.text == text) return true;
  return false;
}

void interleaved_chunks() {
  // sh -c 'printf abc; sleep 0.5; printf "def\nghi"; sleep 0.3; echo jkl; printf "tail-no-nl"' on 2 ranks.
  const std::string text =
      "[1,0]<stdout>:abc[1,1]<stdout>:abc[1,1]<stdout>:def\n"
      "[1,1]<stdout>:ghi[1,0]<stdout>:def\n"
      "[1,0]<stdout>:ghi[1,1]<stdout>:jkl\n"
      "[1,1]<stdout>:tail-no-nl[1,0]<stdout>:jkl\n"
      "[1,0]<stdout>:tail-no-nl";
  // Fed in every possible two-piece split, tags cut in half included.
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    Collected c;
    weftrun::TaggedOutput out(weftrun::Stream::out, c.sink());
    out.feed(std::string_view(text).substr(0, cut));
    out.feed(std::string_view(text).substr(cut));
    out.finish();
    CHECK(c.lines.size() == 6);
    for (int r = 0; r < 2; ++r) {
      CHECK(has(c.lines, r, "abcdef"));
      CHECK(has(c.lines, r, "ghijkl"));
      CHECK(has(c.lines, r, "tail-no-nl"));
    }
  }
}

void endless_line_comes_out_in_pieces() {
  // Rank 0 writes 3.5 MiB without a newline, cut by mpirun into 64 KiB chunks (each tagged), interleaved
  // with rank 1's complete lines; then its newline. Rank 0's text comes out in pieces of exactly 1 MiB, then
  // the rest; nothing is lost and rank 1's lines are untouched.
  const std::size_t mib = std::size_t{1} << 20, total = 3 * mib + mib / 2, chunk = 64 * 1024;
  Collected c;
  weftrun::TaggedOutput out(weftrun::Stream::out, c.sink());
  for (std::size_t sent = 0; sent < total; sent += chunk) {
    out.feed("[1,0]<stdout>:" + std::string(std::min(chunk, total - sent), 'x'));
    out.feed("[1,1]<stdout>:short\n");
  }
  out.feed("[1,0]<stdout>:\n");
  out.finish();
  std::vector<std::size_t> pieces;
  std::size_t shorts = 0;
  for (const auto& l : c.lines) {
    if (l.rank == 0) pieces.push_back(l.text.size());
    if (l.rank == 1 && l.text == "short") ++shorts;
  }
  CHECK((pieces == std::vector<std::size_t>{mib, mib, mib, mib / 2}));
  CHECK(shorts == (total + chunk - 1) / chunk);
}

void streams_and_untagged() {
  Collected c;
  weftrun::TaggedOutput err(weftrun::Stream::err, c.sink());
  err.feed(
      "[1,0]<stderr>:err line\n"
      "--------------------------------------------------------------------------\n"
      "Primary job  terminated normally, but 1 process returned\n"
      "[12,3]<stddiag>:diag\n"
      "[1,2]<stdout>:looks [1,x]<stdout>: like a tag\n"
      "\n");
  err.finish();
  CHECK(c.lines.size() == 6);
  CHECK(c.lines[0].rank == 0 && c.lines[0].stream == weftrun::Stream::err && c.lines[0].text == "err line");
  CHECK(c.lines[1].rank == -1 && c.lines[1].text.rfind("-----", 0) == 0);
  CHECK(c.lines[2].rank == -1 && c.lines[2].text == "Primary job  terminated normally, but 1 process returned");
  CHECK(c.lines[3].rank == 3 && c.lines[3].stream == weftrun::Stream::err && c.lines[3].text == "diag");
  CHECK(c.lines[4].rank == 2 && c.lines[4].stream == weftrun::Stream::out &&
        c.lines[4].text == "looks [1,x]<stdout>: like a tag");
  CHECK(c.lines[5].rank == -1 && c.lines[5].text.empty());
}

void mpirun_reports() {
  const std::vector<std::string> lines = {
      "--------------------------------------------------------------------------",
      "Primary job  terminated normally, but 1 process returned",
      "a non-zero exit code. Per user-direction, the job has been aborted.",
      "--------------------------------------------------------------------------",
      "--------------------------------------------------------------------------",
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
      "--------------------------------------------------------------------------",
      "--------------------------------------------------------------------------",
      "mpirun detected that one or more processes exited with non-zero status, thus causing",
      "the job to be terminated. The first process to do so was:",
      "",
      "  Process name: [[28782,1],2]",
      "  Exit code:    3",
      "--------------------------------------------------------------------------",
      "--------------------------------------------------------------------------",
      "mpirun has exited due to process rank 0 with PID 4242 on",
      "node vm exiting improperly. There are three reasons this could occur:",
      "--------------------------------------------------------------------------",
      "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",
      "with errorcode 5.",
      "--------------------------------------------------------------------------",
      "something else entirely",
      "--------------------------------------------------------------------------",
  };
  const weftrun::MpirunReport r = weftrun::parse_mpirun_report(lines);
  CHECK(r.events.size() == 5);
  if (r.events.size() == 5) {
    CHECK(r.events[0].kind == weftrun::MpirunEvent::aborted_job && r.events[0].value == 1);
    CHECK(r.events[1].kind == weftrun::MpirunEvent::signal && r.events[1].rank == 1 && r.events[1].pid == 0 &&
          r.events[1].node == "vm" && r.events[1].value == 9 && r.events[1].signal_name == "Killed");
    CHECK(r.events[2].kind == weftrun::MpirunEvent::exit_code && r.events[2].rank == 2 && r.events[2].value == 3);
    CHECK(r.events[3].kind == weftrun::MpirunEvent::improper_exit && r.events[3].rank == 0 &&
          r.events[3].pid == 4242);
    CHECK(r.events[4].kind == weftrun::MpirunEvent::mpi_abort && r.events[4].rank == 3 && r.events[4].value == 5 &&
          r.events[4].node == "MPI_COMM_WORLD");
  }
  CHECK(r.other_lines.size() == 1 && r.other_lines[0] == "something else entirely");
}

}  // namespace

int main() {
  interleaved_chunks();
  endless_line_comes_out_in_pieces();
  streams_and_untagged();
  mpirun_reports();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::puts("parse_test: all checks passed");
  return 0;
}
