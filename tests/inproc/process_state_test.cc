// weft is a library: the process-wide state its host owns is the same after a Runtime ran a pmap as before
// (issue 45, item 15; docs/settings.md, "The process's malloc"). Snapshots of every such setting are taken
// before a Runtime is made, after a pmap has run on it (the Runtime still alive, as in a Python session) and
// after it is destroyed, and compared entry by entry: glibc malloc's tuning (observed: whether a freed large
// block raises the mmap threshold, as glibc's dynamic default does), the FPU's control modes (MXCSR and x87
// control words, rounding), every signal's disposition, the calling thread's signal stack and mask, the
// environment, the locale, the umask, the resource limits, the calling thread's OpenMP thread count and
// OpenBLAS's thread count. The pmaps run matmuls large enough for oneDNN and OpenBLAS (this test runs again
// under WEFT_GEMM=openblas, tests/CMakeLists.txt), on the replicas and on the calling thread.
#include <dlfcn.h>
#include <fenv.h>
#include <locale.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "weft/ops.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

extern char** environ;

namespace weft {
namespace {
namespace process_state_test {

using State = std::map<std::string, std::string>;

// Whether glibc's mmap threshold is still dynamic (its default: freeing an mmap'ed block raises the threshold
// to the block's size, up to 32 MiB, so the next block of that size comes from the heap) or fixed, as a
// process-wide mallopt (weft's tuning) makes it. The probe doubles a size from 256 KiB until malloc mmaps it
// (the threshold only rises, so earlier probes and allocations cannot fool it), frees it and allocates it again.
std::string malloc_threshold() {
  const auto mapped = [] { return mallinfo2().hblks; };
  // Through volatile pointers: the compiler may otherwise drop a malloc whose block is only freed.
  void* (*volatile allocate)(std::size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  for (std::size_t bytes = std::size_t{256} << 10; bytes <= (std::size_t{32} << 20); bytes *= 2) {
    const std::size_t before = mapped();
    void* first = allocate(bytes);
    const bool first_mapped = mapped() > before;
    release(first);
    if (!first_mapped) continue;
    void* second = allocate(bytes);
    const bool second_mapped = mapped() > before;
    release(second);
    return second_mapped ? "fixed" : "dynamic";
  }
  return "dynamic (at its maximum)";
}

// The OpenMP runtime weft's oneDNN uses (libgomp), and OpenBLAS as weft loads it: handles of the same files.
void* gomp() {
  static void* handle = ::dlopen("libgomp.so.1", RTLD_NOW);
  return handle;
}
void* openblas() {
  static void* handle = ::dlopen("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", RTLD_NOW);
  return handle;
}

std::string number(long long v) { return std::to_string(v); }

State snapshot() {
  State s;
  s["malloc's mmap threshold"] = malloc_threshold();
#if defined(__x86_64__) || defined(__i386__)
  s["MXCSR control bits (FTZ, DAZ, rounding, masks)"] = number(_mm_getcsr() & ~0x3fu);
  unsigned short x87 = 0;
  asm volatile("fnstcw %0" : "=m"(x87));
  s["x87 control word"] = number(x87);
#endif
  s["fegetround"] = number(fegetround());
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    struct sigaction action {};
    if (sigaction(sig, nullptr, &action) != 0) continue;
    const void* handler = (action.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(action.sa_sigaction)
                                                          : reinterpret_cast<void*>(action.sa_handler);
    std::ostringstream os;
    // (Without SA_RESTORER (0x04000000), which glibc adds to every handler it installs, the default's too.)
    os << handler << " flags " << (action.sa_flags & ~0x04000000);
    s["signal " + number(sig) + " (" + (sigabbrev_np(sig) ? sigabbrev_np(sig) : "RT") + ") disposition"] = os.str();
  }
  stack_t alt{};
  sigaltstack(nullptr, &alt);
  s["calling thread's signal stack"] =
      (alt.ss_flags & SS_DISABLE) ? "none" : number(reinterpret_cast<std::uintptr_t>(alt.ss_sp));
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  std::string blocked;
  for (int sig = 1; sig <= SIGRTMAX; ++sig)
    if (sigismember(&mask, sig) == 1) blocked += number(sig) + " ";
  s["calling thread's blocked signals"] = blocked;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::sort(env.begin(), env.end());
  std::string joined;
  for (const std::string& e : env) joined += e + "\n";
  s["environment"] = joined;
  s["locale"] = setlocale(LC_ALL, nullptr);
  const mode_t mask_now = ::umask(022);
  ::umask(mask_now);
  s["umask"] = number(mask_now);
  for (int r = 0; r < RLIMIT_NLIMITS; ++r) {
    rlimit limit{};
    if (getrlimit(static_cast<__rlimit_resource>(r), &limit) == 0)
      s["rlimit " + number(r)] = number(static_cast<long long>(limit.rlim_cur)) + "/" +
                                 number(static_cast<long long>(limit.rlim_max));
  }
  if (gomp())
    if (auto get = reinterpret_cast<int (*)()>(::dlsym(gomp(), "omp_get_max_threads")))
      s["calling thread's omp_get_max_threads"] = number(get());
  if (openblas())
    if (auto get = reinterpret_cast<int (*)()>(::dlsym(openblas(), "openblas_get_num_threads")))
      s["openblas_get_num_threads"] = number(get());
  return s;
}

void expect_same(const State& before, const State& after, const std::string& when) {
  for (const auto& [key, value] : before) {
    const auto it = after.find(key);
    ASSERT_NE(it, after.end()) << key;
    EXPECT_EQ(it->second, value) << key << " changed " << when;
  }
  EXPECT_EQ(after.size(), before.size()) << when;
}

// What the host had chosen before weft ran: thread counts other than weft's 1, so that a change shows.
void host_choices() {
  if (gomp())
    if (auto set = reinterpret_cast<void (*)(int)>(::dlsym(gomp(), "omp_set_num_threads"))) set(3);
  if (openblas())
    if (auto set = reinterpret_cast<void (*)(int)>(::dlsym(openblas(), "openblas_set_num_threads"))) set(3);
}

TEST(ProcessState, ARuntimeAndItsPmapsLeaveTheHostProcessAsTheyFoundIt) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    GTEST_SKIP() << "the environment tunes malloc";
  host_choices();
  const State before = snapshot();
  // glibc's default, which the comparisons below hold weft to.
  ASSERT_EQ(before.at("malloc's mmap threshold").substr(0, 7), "dynamic");
  for (const std::string scheduler : {"fibers", "threads"}) {
    SCOPED_TRACE(scheduler);
    {
      Runtime rt({.device_count = 4, .scheduler = scheduler});
      const Array x32 = Array::ones({4, 64, 64}, DType::f32), x64 = Array::ones({4, 64, 64}, DType::f64);
      // Products large enough for the libraries (float32: oneDNN by default; float64: OpenBLAS under
      // WEFT_GEMM=openblas), on every replica and on the calling thread.
      auto step =
          pmap([](Replica&, const Array& a, const Array& b) { return std::tuple{matmul(a, a), matmul(b, b)}; });
      for (int i = 0; i < 3; ++i) (void)step(x32, x64);
      (void)matmul(Array::ones({64, 64}, DType::f32), Array::ones({64, 64}, DType::f32));
      (void)matmul(Array::ones({64, 64}, DType::f64), Array::ones({64, 64}, DType::f64));
      expect_same(before, snapshot(), "by a pmap (the runtime alive)");
    }
    expect_same(before, snapshot(), "once the runtime is gone");
  }
}

}  // namespace process_state_test
}  // namespace
}  // namespace weft
