// The deterministic fuzz driver that ./test runs (tests/fuzz/CMakeLists.txt; docs/testing.md, "Fuzzing").
//
// Every fuzz target (tests/fuzz/*_fuzz.cc) is written against libFuzzer's interface,
// LLVMFuzzerTestOneInput(data, size), so that the same target runs two ways:
//  - under clang's libFuzzer (coverage-guided, open-ended: scripts/fuzz.sh), for long campaigns;
//  - under this driver, built with g++ and AddressSanitizer + UndefinedBehaviorSanitizer, as a short,
//    seeded and therefore reproducible run inside the test suite.
// This driver replays every input of the corpus directories and files it is given (the seeds and every
// crash found so far, tests/data/fuzz/<target>/), then runs --runs mutated inputs derived from them by a
// xorshift generator seeded with --seed: bit flips, byte changes, inserts, deletes, duplicated chunks,
// splices of two corpus inputs, numbers replaced by boundary values (text and little-endian binary), and
// tokens of the target's dictionary (libFuzzer's .dict format, --dict). Same seed, same corpus, same
// inputs. Not coverage-guided: it finds what lies a few mutations away from the seeds, libFuzzer the rest.
//
// When an input kills the process (a sanitizer report, an uncaught exception, a signal), the driver writes
// it to ./fuzz-crash-<target>-<n>.bin first and says so: copy it into tests/data/fuzz/<target>/ once the bug
// is fixed, and every later run replays it.
//
//   weft_fuzz_npy [--runs N] [--seed S] [--max-len BYTES] [--timeout S] [--rss-limit-mb MB] [--dict FILE] CORPUS_DIR_OR_FILE...
// (defaults: 1000 runs, seed 1, 65536 bytes, 10 s per input)
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define WEFT_FUZZ_HAVE_SANITIZER 1
#endif
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

// ---- the input being run, for the crash report ----------------------------------------------------------

std::string g_target = "target";
long g_rss_limit_mb = 0;  // 0: no limit
const std::string* g_current = nullptr;
std::string g_current_name;

void write_crash_input() {
  static bool written = false;  // a death callback and a signal may both come
  if (written || !g_current) return;
  written = true;
  for (int n = 0; n < 1000; ++n) {
    const std::string path = "fuzz-crash-" + g_target + "-" + std::to_string(n) + ".bin";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) continue;
    const char* p = g_current->data();
    std::size_t left = g_current->size();
    while (left > 0) {
      const ssize_t w = ::write(fd, p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    ::close(fd);
    std::fprintf(stderr, "\nweft fuzz: input %s killed %s; written to %s/%s (replay: the binary with that file)\n",
                 g_current_name.c_str(), g_target.c_str(), std::filesystem::current_path().c_str(), path.c_str());
    return;
  }
}

void on_fatal_signal(int sig) {
  if (sig == SIGABRT && g_current) std::fprintf(stderr, "\nweft fuzz: abort(): the target found a broken invariant\n");
  write_crash_input();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// --timeout: an input that runs longer is a hang (quadratic parsing, a loop that never ends) and fails the
// run like a crash, as libFuzzer's -timeout does.
void on_timeout(int) {
  std::fprintf(stderr, "\nweft fuzz: an input ran past --timeout\n");
  write_crash_input();
  std::_Exit(70);
}

void on_terminate() {
  write_crash_input();
  std::fprintf(stderr, "weft fuzz: uncaught exception");
  try {
    if (auto e = std::current_exception()) std::rethrow_exception(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, ": %s", e.what());
  } catch (...) {
  }
  std::fprintf(stderr, "\n");
  std::abort();
}

// ---- a small deterministic generator ------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {  // xorshift64*
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  bool chance(int one_in) { return below(static_cast<std::size_t>(one_in)) == 0; }

 private:
  std::uint64_t s_;
};

// Numbers at the edges of what parsers convert: int8/16/32/64 and uint limits, their neighbours, and
// floating values that do not convert to any integer.
const char* const kTextNumbers[] = {
    "0", "1", "-1", "2", "7", "8", "127", "128", "255", "256", "-128", "-129", "32767", "65535", "65536",
    "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296", "4294967298",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551615",
    "18446744073709551616", "99999999999999999999999", "1e10", "1e308", "1e309", "-1e308", "1.5", "-0",
    "0.0", "nan", "inf", "-inf", "4096", "4097", "1048576", "1099511627776", "4611686018427387904"};
const std::uint64_t kBinaryNumbers[] = {0,          1,           2,          0x7f,       0x80,       0xff,
                                        0x100,      0x7fff,      0x8000,     0xffff,     0x10000,    0x7fffffff,
                                        0x80000000, 0xffffffff,  0x100000000, 100ull << 20, 0x7fffffffffffffffull,
                                        0x8000000000000000ull,  ~0ull};

struct Mutator {
  Rng rng;
  std::size_t max_len;
  const std::vector<std::string>* corpus;
  const std::vector<std::string>* dict;

  void mutate(std::string& s) {
    const int steps = 1 + static_cast<int>(rng.below(4));
    for (int k = 0; k < steps; ++k) mutate_once(s);
    if (s.size() > max_len) s.resize(max_len);
  }

  void mutate_once(std::string& s) {
    switch (rng.below(11)) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng.below(s.size())] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:  // set a byte
        if (!s.empty()) s[rng.below(s.size())] = static_cast<char>(rng.next());
        break;
      case 2:  // insert bytes
        s.insert(rng.below(s.size() + 1), std::string(1 + rng.below(4), static_cast<char>(rng.next())));
        break;
      case 3:  // delete a range
        if (!s.empty()) {
          const std::size_t at = rng.below(s.size());
          s.erase(at, 1 + rng.below(std::min<std::size_t>(16, s.size() - at)));
        }
        break;
      case 4:  // duplicate a chunk somewhere
        if (!s.empty() && s.size() < max_len) {
          const std::size_t at = rng.below(s.size());
          const std::string chunk = s.substr(at, 1 + rng.below(64));
          s.insert(rng.below(s.size() + 1), chunk);
        }
        break;
      case 5:  // splice: a prefix of this input with a suffix of another
        if (!corpus->empty()) {
          const std::string& other = (*corpus)[rng.below(corpus->size())];
          s = s.substr(0, rng.below(s.size() + 1)) + other.substr(rng.below(other.size() + 1));
        }
        break;
      case 6:
      case 7:  // a number in the text replaced by a boundary value
        replace_number(s);
        break;
      case 8:  // a little-endian binary integer overwritten by a boundary value
        if (!s.empty()) {
          const std::size_t width = std::size_t{1} << rng.below(4);
          const std::size_t at = rng.below(s.size());
          const std::uint64_t v = kBinaryNumbers[rng.below(std::size(kBinaryNumbers))] + (rng.chance(4) ? rng.below(3) - 1 : 0);
          for (std::size_t b = 0; b < width && at + b < s.size(); ++b) s[at + b] = static_cast<char>((v >> (8 * b)) & 0xff);
        }
        break;
      case 9:  // a dictionary token (or a boundary number) inserted or written over
        {
          const bool from_dict = !dict->empty() && !rng.chance(3);
          const std::string token = from_dict ? (*dict)[rng.below(dict->size())] : kTextNumbers[rng.below(std::size(kTextNumbers))];
          const std::size_t at = rng.below(s.size() + 1);
          if (rng.chance(2)) s.insert(at, token);
          else s.replace(at, std::min(token.size(), s.size() - at), token);
        }
        break;
      default:  // repeat a chunk many times (long inputs: deep nesting, long lines)
        if (!s.empty()) {
          const std::size_t at = rng.below(s.size());
          const std::string chunk = s.substr(at, 1 + rng.below(8));
          std::string many;
          const std::size_t times = 2 + rng.below(rng.chance(8) ? 4096 : 64);
          for (std::size_t t = 0; t < times && many.size() < max_len; ++t) many += chunk;
          s.insert(at, many);
        }
        break;
    }
  }

  void replace_number(std::string& s) {
    std::vector<std::pair<std::size_t, std::size_t>> numbers;  // (start, length) of digit runs
    for (std::size_t i = 0; i < s.size();) {
      if (s[i] >= '0' && s[i] <= '9') {
        std::size_t j = i;
        while (j < s.size() && ((s[j] >= '0' && s[j] <= '9') || s[j] == '.' || s[j] == 'e')) ++j;
        if (i > 0 && s[i - 1] == '-') --i;
        numbers.emplace_back(i, j - i);
        i = j;
      } else {
        ++i;
      }
    }
    if (numbers.empty()) return;
    const auto [at, len] = numbers[rng.below(numbers.size())];
    s.replace(at, len, kTextNumbers[rng.below(std::size(kTextNumbers))]);
  }
};

// ---- inputs -------------------------------------------------------------------------------------------

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "weft fuzz: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// libFuzzer's dictionary format: one "token" per line (C escapes \\, \", \xNN), optional name= before it,
// # comments.
std::vector<std::string> read_dict(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "weft fuzz: cannot read the dictionary %s\n", path.c_str());
    std::exit(2);
  }
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t open = line.find('"');
    const std::size_t close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    std::string token;
    for (std::size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 1 < close) {
        const char c = line[++i];
        if (c == 'x' && i + 2 < close) {
          token += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          token += c;
        }
      } else {
        token += line[i];
      }
    }
    out.push_back(token);
  }
  return out;
}

int usage(const char* message) {
  std::fprintf(stderr,
               "weft fuzz: %s\nusage: %s [--runs N] [--seed S] [--max-len BYTES] [--timeout S] [--rss-limit-mb MB] [--dict FILE] CORPUS_DIR_OR_FILE...\n",
               message, g_target.c_str());
  return 2;
}

unsigned g_timeout_s = 0;

void run_one(const std::string& input, const std::string& name) {
  g_current = &input;
  g_current_name = name;
  if (g_timeout_s > 0) ::alarm(g_timeout_s);
  // A copy of exactly `size` bytes: a read past the end is a heap overflow ASan sees.
  std::vector<std::uint8_t> bytes(input.begin(), input.end());
  LLVMFuzzerTestOneInput(bytes.empty() ? nullptr : bytes.data(), bytes.size());
  if (g_timeout_s > 0) ::alarm(0);
  // --rss-limit-mb, as libFuzzer's -rss_limit_mb: the input that takes the process's peak resident memory
  // past the limit fails the run (a small file must not take gigabytes: issue 21, item 2).
  if (g_rss_limit_mb > 0) {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    const long peak_mb = usage.ru_maxrss / 1024;
    if (peak_mb > g_rss_limit_mb) {
      std::fprintf(stderr, "\nweft fuzz: an input took the peak resident memory to %ld MB, over --rss-limit-mb %ld\n", peak_mb,
                   g_rss_limit_mb);
      write_crash_input();
      std::_Exit(71);
    }
  }
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  g_target = std::filesystem::path(argv[0]).filename().string();
  long long runs = 1000;
  unsigned timeout_s = 10;
  std::uint64_t seed = 1;
  std::size_t max_len = 1 << 16;
  std::vector<std::string> dict;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(usage((arg + " needs a value").c_str()));
      return argv[++i];
    };
    try {
      if (arg == "--runs") runs = std::stoll(value());
      else if (arg == "--seed") seed = std::stoull(value());
      else if (arg == "--max-len") max_len = std::stoull(value());
      else if (arg == "--timeout") timeout_s = static_cast<unsigned>(std::stoul(value()));
      else if (arg == "--rss-limit-mb") g_rss_limit_mb = std::stol(value());
      else if (arg == "--dict") dict = read_dict(value());
      else if (arg.starts_with("-")) return usage(("unknown option " + arg).c_str());
      else paths.emplace_back(arg);
    } catch (const std::exception&) {
      return usage(("bad value for " + arg).c_str());
    }
  }
  if (paths.empty()) return usage("no corpus given");

  std::set_terminate(on_terminate);
  g_timeout_s = timeout_s;
  ::signal(SIGALRM, on_timeout);
#if defined(__SANITIZE_ADDRESS__) && defined(WEFT_FUZZ_HAVE_SANITIZER)
  // AddressSanitizer handles the fatal signals itself (its report names the fault) and calls this first;
  // abort() (a target's own check failing) it leaves alone.
  __sanitizer_set_death_callback(write_crash_input);
  ::signal(SIGABRT, on_fatal_signal);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, on_fatal_signal);
#endif
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);

  // The corpus, in a fixed order (sorted names) so that the mutations are the same on every machine.
  std::vector<std::filesystem::path> files;
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::exists(p)) {
      files.push_back(p);
    } else {
      return usage(("no such file or directory: " + p.string()).c_str());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> corpus;
  for (const auto& f : files) corpus.push_back(read_all(f));

  const auto start = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < corpus.size(); ++k) run_one(corpus[k], files[k].string());
  if (corpus.empty()) corpus.emplace_back();

  Mutator mutator{Rng(seed), max_len, &corpus, &dict};
  for (long long n = 0; n < runs; ++n) {
    std::string input = corpus[mutator.rng.below(corpus.size())];
    mutator.mutate(input);
    run_one(input, "#" + std::to_string(n) + " of --seed " + std::to_string(seed));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("weft fuzz: %s: %zu corpus inputs replayed, %lld mutated inputs (seed %llu) in %.1f s: no crash\n",
              g_target.c_str(), files.size(), runs, static_cast<unsigned long long>(seed), seconds);
  return 0;
}
