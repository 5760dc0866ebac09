// weftrun's own words and small text helpers: how weftrun writes to its stderr ("weftrun: ..."), how it
// names a signal, how it quotes a command line for -v, and how it reads the one-line records instances leave
// in $WEFT_JOB_DIR. Every file of the launcher says things the same way through these.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weftrun {

// Writes all of `data` to `fd`, retrying on EINTR. False on an error; errno says why (EPIPE: the reader went
// away, see Job::output_closed).
bool write_all(int fd, std::string_view data);

// "weftrun: <line>\n" on stderr.
void say(const std::string& line);

// "signal 9 (Killed)", or "signal 9" where the C library has no name for it.
std::string signal_text(int sig);

// `s` as one word for a POSIX shell: as is when it needs no quoting, else in single quotes.
std::string shell_quote(const std::string& s);

// The whole file, or nothing if it cannot be opened.
std::optional<std::string> read_file(const std::string& path);

// The first line of `text`, without trailing '\r' or spaces.
std::string first_line(const std::string& text);

}  // namespace weftrun
