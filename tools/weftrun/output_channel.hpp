// One source of the job's output, as weftrun reads it: one of mpirun's two pipes (tagged lines, split by
// TaggedOutput), or one instance stream connected by the instance wrapper to $WEFT_JOB_DIR/output.sock (a
// header line "weftrun-output <rank> <out|err>", then the stream's bytes as the program wrote them). Read in
// output.cc and polled in supervise.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tagged_output.hpp"

namespace weftrun {

struct OutputChannel {
  enum Kind { mpirun_pipe, instance_stream };
  Kind kind = mpirun_pipe;
  int fd = -1;
  std::unique_ptr<TaggedOutput> tagged;  // mpirun_pipe
  bool have_header = false;             // instance_stream
  std::size_t scanned = 0;              // buf[0, scanned) holds no newline: search only the new bytes
  int rank = -1;
  Stream stream = Stream::out;
  std::string buf;
};

}  // namespace weftrun
