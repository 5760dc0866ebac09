// The CPU feature check for the kernels' -march (see isa.hpp). This translation unit is compiled for the
// compiler's baseline ISA (never with -march=${WEFT_ARCH}): it must run on exactly the CPUs the kernels
// cannot. The build passes WEFT_KERNEL_ARCH and WEFT_KERNEL_FEATURES ("avx,avx2,fma,...") from configure time.
//
// The path that runs on a deficient CPU (format_missing, the load-time check, the SIGILL handler) uses only
// libc and fixed buffers, no standard-library templates: an inline template instantiated both here and in a
// kernel unit is one symbol after linking, and the linker may keep the copy compiled with -march, which
// would die of SIGILL inside the very check meant to prevent it.
//
// Why a load-time check and a SIGILL handler besides the throwing checks: code compiled with -march can run
// before any check does (Array creation lives in a kernel unit, a function's prologue may already use wide
// registers, and a shared inline function may resolve to its -march copy). So at load, before main, this
// file checks once; on a deficient CPU it installs a SIGILL handler that prints the same message before the
// process dies. The checks at Runtime construction and at kernel entry still throw weft::Error whenever they
// get to run first.
#include "array/isa.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "weft/error.hpp"

#ifndef WEFT_KERNEL_ARCH
#define WEFT_KERNEL_ARCH "none"
#endif
#ifndef WEFT_KERNEL_FEATURES
#define WEFT_KERNEL_FEATURES ""
#endif

namespace weft::isa {
namespace {

constexpr bool same(const char* a, const char* b) {
  for (; *a != '\0' && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

// __builtin_cpu_supports takes only string literals, so the table is expanded from isa_features.inc, the
// list CMake reads too. `baseline` records whether this (baseline-compiled) unit sees the feature's macro.
// constexpr: the load-time check runs before dynamic initialisers.
#define WEFT_ISA_STR(x) #x
#define WEFT_ISA_XSTR(x) WEFT_ISA_STR(x)
#if defined(__x86_64__) || defined(__i386__)
#define WEFT_ISA_FEATURE(macro, name) \
  {name, [] { return __builtin_cpu_supports(name) != 0; }, !same(WEFT_ISA_XSTR(macro), #macro)},
#else
#define WEFT_ISA_FEATURE(macro, name) {name, [] { return false; }, !same(WEFT_ISA_XSTR(macro), #macro)},
#endif
struct CpuFeature {
  const char* name;
  bool (*query)();
  bool baseline;
};
constexpr CpuFeature kFeatures[] = {
#include "array/isa_features.inc"
// The x86-64 micro-architecture levels (GCC's names), asked to suggest a portable WEFT_ARCH.
#if defined(__x86_64__) || defined(__i386__)
    {"x86-64-v2", [] { return __builtin_cpu_supports("x86-64-v2") != 0; }, false},
    {"x86-64-v3", [] { return __builtin_cpu_supports("x86-64-v3") != 0; }, false},
#endif
};
#undef WEFT_ISA_FEATURE

const CpuFeature* find_feature(const char* name) {
  for (const CpuFeature& f : kFeatures) {
    if (std::strcmp(name, f.name) == 0) return &f;
  }
  return nullptr;
}

bool query_cpu(const char* name, void*) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // idempotent; needed when called before libgcc's own constructor ran
#endif
  const CpuFeature* f = find_feature(name);
  return f != nullptr && f->query();
}

// Appends to a fixed buffer, truncating; always NUL-terminated.
struct Text {
  char* out;
  std::size_t cap;
  std::size_t len = 0;
  void add(const char* s) {
    for (; *s != '\0' && len + 1 < cap; ++s) out[len++] = *s;
    out[len] = '\0';
  }
};

// Calls f(name) for each entry of a comma-separated list.
template <class F>
void for_each_name(const char* csv, F&& f) {
  char name[64];
  while (*csv != '\0') {
    std::size_t n = 0;
    while (csv[n] != '\0' && csv[n] != ',') ++n;
    if (n > 0 && n < sizeof(name)) {
      std::memcpy(name, csv, n);
      name[n] = '\0';
      f(static_cast<const char*>(name));
    }
    csv += n;
    if (*csv == ',') ++csv;
  }
}

// The decision and the message: writes the error text into out and returns true when `supported` rejects a
// feature of `required` (comma separated); false (and an empty text) when the CPU has them all.
bool format_missing(const char* arch, const char* required, bool (*supported)(const char*, void*), void* context,
                    char* out, std::size_t cap) {
  Text text{out, cap};
  text.add("");
  char lacks[1024];
  Text lacks_text{lacks, sizeof(lacks)};
  lacks_text.add("");
  bool missing = false;
  for_each_name(required, [&](const char* name) {
    if (supported(name, context)) return;
    if (missing) lacks_text.add(", ");
    lacks_text.add(name);
    missing = true;
  });
  if (!missing) return false;
  text.add("weft: this binary's kernels were built for -march=");
  text.add(arch);
  text.add(" (");
  bool first = true;
  for_each_name(required, [&](const char* name) {
    if (!first) text.add(", ");
    text.add(name);
    first = false;
  });
  text.add(") but this CPU lacks ");
  text.add(lacks);
  text.add("; rebuild with ");
  // The best portable level this CPU has, unless that is what failed.
  for (const char* level : {"x86-64-v3", "x86-64-v2"}) {
    if (std::strcmp(arch, level) != 0 && supported(level, context)) {
      text.add("-DWEFT_ARCH=");
      text.add(level);
      text.add(" (this CPU has it), ");
      break;
    }
  }
  text.add("-DWEFT_ARCH=none (no -march flag), or another -march that this CPU supports");
  return true;
}

std::atomic<bool> g_checked{false};
char g_sigill_message[4096];
std::size_t g_sigill_length = 0;

// Async-signal-safe: write the explanation, then let the signal kill the process as it would have.
void on_sigill(int) {
  if (::write(STDERR_FILENO, g_sigill_message, g_sigill_length) < 0) {
    // Nothing left to report to.
  }
  ::signal(SIGILL, SIG_DFL);  // the faulting instruction runs again and ends the process with SIGILL
}

// Runs before main (priority 101: before every ordinary static initialiser of the program).
__attribute__((constructor(101))) void check_at_load() {
  if (!format_missing(WEFT_KERNEL_ARCH, WEFT_KERNEL_FEATURES, query_cpu, nullptr, g_sigill_message,
                      sizeof(g_sigill_message) - 2)) {
    g_checked.store(true, std::memory_order_release);
    return;
  }
  g_sigill_length = std::strlen(g_sigill_message);
  g_sigill_message[g_sigill_length++] = '\n';
  g_sigill_message[g_sigill_length] = '\0';
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_sigill;
  ::sigaction(SIGILL, &action, nullptr);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

std::string_view kernel_arch() { return WEFT_KERNEL_ARCH; }

const std::vector<std::string>& kernel_features() {
  static const std::vector<std::string> features = [] {
    std::vector<std::string> out;
    for_each_name(WEFT_KERNEL_FEATURES, [&](const char* name) { out.emplace_back(name); });
    return out;
  }();
  return features;
}

std::vector<std::string> compiled_kernel_features() {
  std::vector<std::string> out;
  for (const std::string& name : kernel_unit_macro_features()) {
    const CpuFeature* f = find_feature(name.c_str());
    if (f != nullptr && !f->baseline) out.push_back(name);
  }
  return out;
}

bool known_feature(std::string_view feature) { return find_feature(std::string(feature).c_str()) != nullptr; }

bool cpu_supports(std::string_view feature) { return query_cpu(std::string(feature).c_str(), nullptr); }

std::vector<std::string> missing_features(const std::vector<std::string>& required,
                                          const std::function<bool(std::string_view)>& supported) {
  std::vector<std::string> missing;
  for (const std::string& feature : required) {
    if (!supported(feature)) missing.push_back(feature);
  }
  return missing;
}

void check_features(std::string_view arch, const std::vector<std::string>& required,
                    const std::function<bool(std::string_view)>& supported) {
  // The same formatter as the real check, with the injected predicate behind its C callback.
  auto trampoline = [](const char* name, void* context) {
    return (*static_cast<const std::function<bool(std::string_view)>*>(context))(name);
  };
  char message[4096];
  const std::string arch_text(arch);
  if (format_missing(arch_text.c_str(), join(required).c_str(), trampoline,
                     const_cast<std::function<bool(std::string_view)>*>(&supported), message, sizeof(message))) {
    throw Error(message);
  }
}

void check_cpu() {
  char message[4096];
  if (format_missing(WEFT_KERNEL_ARCH, WEFT_KERNEL_FEATURES, query_cpu, nullptr, message, sizeof(message))) {
    throw Error(message);
  }
}

void ensure_kernels_supported() {
  if (g_checked.load(std::memory_order_acquire)) return;
  check_cpu();
  g_checked.store(true, std::memory_order_release);
}

}  // namespace weft::isa
