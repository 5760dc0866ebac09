// The job's output (job.hpp): where it comes from (mpirun's two pipes, and the instance wrappers' direct
// streams on $WEFT_JOB_DIR/output.sock, which keep an instance's lines whole where mpirun would cut them),
// how it is split into lines, and what becomes of each line: tagged "[instance i]" and written to weftrun's
// stdout or stderr (unless --only-output-from-instance holds it back), and noted for the summary when it tells
// of an error.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/launcher_protocol.hpp"
#include "error_lines.hpp"
#include "job.hpp"
#include "output_channel.hpp"
#include "text.hpp"

namespace weftrun {

bool Job::listen_for_output() {
  const std::string path = weft::launcher::output_socket_path(job_dir_);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;  // a long $TMPDIR: output goes through mpirun
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4096) != 0) {
    close(fd);
    return false;
  }
  listen_fd_ = fd;
  return true;
}

// mpirun's stdout and stderr, which the channels own from now on; and whether our own stdout and stderr are
// pipes that can be polled for a closed reader.
OutputChannels Job::open_mpirun_channels() {
  OutputChannels channels;
  for (auto [fd, stream] : {std::pair{out_fd_, Stream::out}, std::pair{err_fd_, Stream::err}}) {
    auto ch = std::make_unique<OutputChannel>();
    ch->kind = OutputChannel::mpirun_pipe;
    ch->fd = fd;
    ch->tagged = std::make_unique<TaggedOutput>(stream, o_.num_instances, [this](const TaggedLine& l) { on_line(l); });
    channels.push_back(std::move(ch));
  }
  out_fd_ = err_fd_ = -1;  // owned by the channels now
  for (int fd : {1, 2}) {
    struct stat st {};
    watch_output_[fd - 1] = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  }
  return channels;
}

// Every instance stream waiting on the socket.
void Job::accept_instance_streams(OutputChannels& channels) {
  for (;;) {
    const int fd = listen_fd_ < 0 ? -1 : accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto ch = std::make_unique<OutputChannel>();
    ch->kind = OutputChannel::instance_stream;
    ch->fd = fd;
    channels.push_back(std::move(ch));
  }
}

// mpirun is gone, so is every wrapper: no new connections.
void Job::stop_listening(OutputChannels& channels) {
  if (listen_fd_ >= 0) {
    accept_instance_streams(channels);
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

void Job::feed(OutputChannel& ch, std::string_view data) {
  if (ch.kind == OutputChannel::mpirun_pipe) {
    ch.tagged->feed(data);
    return;
  }
  ch.buf.append(data);
  std::size_t from = 0;
  if (!ch.have_header) {
    // "weftrun-output <rank> <out|err>\n"
    const std::size_t nl = ch.buf.find('\n');
    if (nl == std::string::npos) {
      if (ch.buf.size() > 256) ch.buf.clear();  // not a wrapper: ignore it
      return;
    }
    int rank = -1;
    char stream[8] = {};
    if (std::sscanf(ch.buf.c_str(), "weftrun-output %9d %7s", &rank, stream) == 2 && rank >= 0 &&
        rank < o_.num_instances) {
      ch.have_header = true;
      ch.rank = rank;
      ch.stream = std::strcmp(stream, "err") == 0 ? Stream::err : Stream::out;
    }
    from = nl + 1;
  }
  if (!ch.have_header) {
    ch.buf.clear();
    return;
  }
  for (std::size_t nl = ch.buf.find('\n', std::max(from, ch.scanned)); nl != std::string::npos;
       nl = ch.buf.find('\n', from)) {
    on_line({ch.rank, ch.stream, ch.buf.substr(from, nl - from)});
    from = nl + 1;
  }
  // A line without its newline yet: past kMaxLine, out it goes in pieces (memory bounded, and the bytes
  // already searched are never searched again, so a long line costs linear time).
  while (ch.buf.size() - from >= kMaxLine) {
    on_line({ch.rank, ch.stream, ch.buf.substr(from, kMaxLine)});
    from += kMaxLine;
  }
  ch.buf.erase(0, from);
  ch.scanned = ch.buf.size();
}

void Job::close_channel(OutputChannel& ch, bool drain) {
  if (ch.fd < 0) return;
  if (drain) {
    // Whatever is still buffered first.
    fcntl(ch.fd, F_SETFL, fcntl(ch.fd, F_GETFL) | O_NONBLOCK);
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(ch.fd, buf, sizeof buf);
      if (n <= 0) break;
      feed(ch, std::string_view(buf, static_cast<std::size_t>(n)));
    }
  }
  if (ch.kind == OutputChannel::mpirun_pipe) ch.tagged->finish();
  if (ch.kind == OutputChannel::instance_stream && ch.have_header && !ch.buf.empty()) {
    on_line({ch.rank, ch.stream, ch.buf});
    ch.buf.clear();
  }
  close(ch.fd);
  ch.fd = -1;
}

void Job::on_line(const TaggedLine& l) {
  if (l.rank < 0) {
    mpirun_lines_.push_back(l.text);
    return;
  }
  Instance& inst = instance(l.rank);
  inst.lines++;
  const bool error_like = looks_like_error(l.text);
  if (l.text.find(weft::launcher::kErrorPrefix) != std::string::npos) {
    if (root_rank_ < 0) {
      root_rank_ = l.rank;
      root_line_ = l.text;
    }
    if (inst.first_weft_error.empty()) inst.first_weft_error = l.text;
  }
  if (error_like) {
    const int score = error_score(l.text);
    if (score > inst.error_line_score) {
      inst.error_line_score = score;
      inst.error_line = l.text.substr(std::min(l.text.size(), l.text.find_first_not_of(" \t")));
    }
  }
  if (o_.only_output_from >= 0 && l.rank != o_.only_output_from && !error_like) return;
  std::string s = "[instance ";
  s += std::to_string(l.rank);
  s += "] ";
  s += l.text;
  s += '\n';
  const int fd = l.stream == Stream::out ? 1 : 2;
  bool& ok = l.stream == Stream::out ? stdout_ok_ : stderr_ok_;
  if (ok && !write_all(fd, s)) {
    ok = false;
    if (errno == EPIPE) output_closed(fd);
  }
}

void Job::output_closed(int fd) {
  if (output_closed_) return;
  output_closed_ = true;
  if (o_.verbose && fd == 1) say("the reader of stdout went away (broken pipe): ending the job");
  begin_termination();
}

}  // namespace weftrun
