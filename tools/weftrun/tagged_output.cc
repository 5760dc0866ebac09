#include "tagged_output.hpp"

namespace weftrun {
namespace {

// A line that never ends is handed out in pieces of this size rather than held forever.
constexpr std::size_t kMaxPending = std::size_t{1} << 20;

std::size_t digits(std::string_view s, std::size_t at, int* value) {
  std::size_t i = at;
  long v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - at < 9) v = v * 10 + (s[i++] - '0');
  if (value) *value = static_cast<int>(v);
  return i - at;
}

}  // namespace

std::size_t TaggedOutput::match_tag(std::string_view s, int& rank, Stream& stream, int ranks) {
  // [<digits>,<digits>]<stdout>:   (also <stderr>: and <stddiag>:)
  if (s.empty() || s[0] != '[') return 0;
  std::size_t i = 1;
  const std::size_t job = digits(s, i, nullptr);
  if (job == 0) return 0;
  i += job;
  if (i >= s.size() || s[i] != ',') return 0;
  ++i;
  int r = 0;
  const std::size_t rk = digits(s, i, &r);
  if (rk == 0) return 0;
  i += rk;
  if (r >= ranks) return 0;  // not an instance of this job: text an instance printed, not mpirun's tag
  if (i >= s.size() || s[i] != ']') return 0;
  ++i;
  static constexpr std::pair<std::string_view, Stream> kinds[] = {
      {"<stdout>:", Stream::out}, {"<stderr>:", Stream::err}, {"<stddiag>:", Stream::err}};
  for (const auto& [word, kind] : kinds)
    if (s.substr(i, word.size()) == word) {
      rank = r;
      stream = kind;
      return i + word.size();
    }
  return 0;
}

void TaggedOutput::feed(std::string_view bytes) {
  // Only the new bytes are searched for a newline (the pending ones hold none): searching all of pending_
  // on every feed made a long line fed in small chunks quadratic.
  const std::size_t nl = bytes.rfind('\n');
  std::size_t end = nl == std::string_view::npos ? 0 : pending_.size() + nl + 1;
  pending_.append(bytes);
  if (end == 0 && pending_.size() >= kMaxPending) end = pending_.size();
  if (end == 0) return;
  const std::string region = pending_.substr(0, end);
  pending_.erase(0, end);
  parse(region);
}

void TaggedOutput::finish() {
  if (!pending_.empty()) {
    const std::string region = std::move(pending_);
    pending_.clear();
    parse(region);
  }
  // Partial lines: the instances' first (in rank order), then mpirun's.
  auto partial = std::move(partial_);
  partial_.clear();
  for (auto& [key, text] : partial)
    if (key.first >= 0 && !text.empty()) sink_({key.first, static_cast<Stream>(key.second), std::move(text)});
  for (auto& [key, text] : partial)
    if (key.first < 0 && !text.empty()) sink_({-1, pipe_, std::move(text)});
}

void TaggedOutput::parse(std::string_view region) {
  // Text at the start of a line without a tag is mpirun's own. (A region ends with a newline unless a line
  // grew past kMaxPending; then its target carries over to the next region.)
  int rank = rank_;
  Stream stream = stream_;
  std::size_t pos = 0;
  while (pos < region.size()) {
    // The next tag, from pos on.
    std::size_t tag_at = region.size(), tag_len = 0;
    int tag_rank = -1;
    Stream tag_stream = pipe_;
    for (std::size_t i = region.find('[', pos); i != std::string_view::npos; i = region.find('[', i + 1)) {
      const std::size_t n = match_tag(region.substr(i), tag_rank, tag_stream, ranks_);
      if (n) {
        tag_at = i;
        tag_len = n;
        break;
      }
    }
    // Text before it belongs to the current target; every newline ends the target's line, and text after a
    // newline is untagged until the next tag.
    std::string_view text = region.substr(pos, tag_at - pos);
    for (std::size_t nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n')) {
      append(rank, stream, text.substr(0, nl));
      complete(rank, stream);
      rank = -1;
      stream = pipe_;
      text.remove_prefix(nl + 1);
    }
    append(rank, stream, text);
    if (tag_len == 0) break;
    rank = tag_rank;
    stream = tag_stream;
    pos = tag_at + tag_len;
  }
  rank_ = rank;
  stream_ = stream;
}

void TaggedOutput::append(int rank, Stream stream, std::string_view text) {
  if (text.empty()) return;
  const Stream s = rank < 0 ? pipe_ : stream;
  std::string& line = partial_[{rank, static_cast<int>(s)}];
  line.append(text);
  // A line that never ends goes out in pieces: memory stays bounded per (rank, stream).
  std::size_t from = 0;
  for (; line.size() - from >= kMaxPending; from += kMaxPending) sink_({rank, s, line.substr(from, kMaxPending)});
  line.erase(0, from);
}

void TaggedOutput::complete(int rank, Stream stream) {
  const Stream s = rank < 0 ? pipe_ : stream;
  auto it = partial_.find({rank, static_cast<int>(s)});
  TaggedLine line{rank, s, {}};
  if (it != partial_.end()) {
    line.text = std::move(it->second);
    partial_.erase(it);
  }
  sink_(line);
}

}  // namespace weftrun
