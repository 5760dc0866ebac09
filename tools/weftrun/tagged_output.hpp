// weftrun: splits what `mpirun --tag-output` writes on one of its pipes back into per-instance lines.
//
// Open MPI 4.1 prefixes every chunk an instance writes with `[<job>,<rank>]<stdout>:` (or `<stderr>:`,
// `<stddiag>:`), and again after every newline inside the chunk. A chunk that does not end with a newline is
// followed directly by the next chunk's tag, possibly another rank's, in the middle of a line:
//
//   [1,0]<stdout>:abc[1,1]<stdout>:abc[1,1]<stdout>:def\n[1,0]<stdout>:def\n
//
// So this keeps one partial line per (pipe, rank, stream) and hands out a line only when its newline arrives
// (or at end of file). Text after a newline that carries no tag is mpirun's own (its help messages and
// reports); those lines are handed out with rank -1.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace weftrun {

enum class Stream { out, err };

struct TaggedLine {
  int rank = -1;               // the instance (MPI rank); -1 for a line mpirun printed itself
  Stream stream = Stream::out;  // the instance's stream (stddiag counts as err); for rank -1, the pipe's
  std::string text;            // without the tag and without the newline
};

class TaggedOutput {
 public:
  using Sink = std::function<void(const TaggedLine&)>;

  // `pipe` is the stream mpirun wrote the bytes on (its stdout or its stderr); `ranks` is the number of
  // instances: a tag naming another rank is not mpirun's (an instance printed it) and stays text.
  TaggedOutput(Stream pipe, int ranks, Sink sink) : pipe_(pipe), ranks_(ranks), sink_(std::move(sink)), stream_(pipe) {}
  TaggedOutput(Stream pipe, Sink sink) : TaggedOutput(pipe, std::numeric_limits<int>::max(), std::move(sink)) {}

  // Feeds bytes read from the pipe; complete lines go to the sink.
  void feed(std::string_view bytes);
  // End of file: everything still buffered goes out as (unterminated) lines.
  void finish();

  // Recognises a tag at the start of `s` naming a rank below `ranks`; returns its length (0 if none) and
  // sets rank / stream.
  static std::size_t match_tag(std::string_view s, int& rank, Stream& stream,
                               int ranks = std::numeric_limits<int>::max());

 private:
  void parse(std::string_view region);
  void append(int rank, Stream stream, std::string_view text);
  void complete(int rank, Stream stream);

  Stream pipe_;
  int ranks_;
  Sink sink_;
  int rank_ = -1;           // the target of text that continues a region cut without a newline
  Stream stream_ = Stream::out;
  std::string pending_;                                  // bytes after the last newline seen on the pipe
  std::map<std::pair<int, int>, std::string> partial_;  // (rank, stream) -> the line so far
};

}  // namespace weftrun
