// Loading OpenBLAS at run time and deciding which library computes matmul's large products (why: blas.hpp).
#include "array/blas.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <semaphore>
#include <string>
#include <vector>

#include "array/isa.hpp"
#include "array/onednn.hpp"
#include "core/settings.hpp"
#include "weft/error.hpp"

namespace weft::blas {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "AVX-512";
    case Isa::avx2: return "AVX2";
    case Isa::baseline: break;
  }
  return "baseline x86-64";
}

// Where OpenBLAS is looked for: WEFT_OPENBLAS alone when set; else Debian's pthread flavour (the one whose
// single-threaded calls from many threads are safe and which starts no OpenMP runtime), else whichever
// flavour the system's alternatives point the soname at.
std::vector<std::string> candidates() {
  if (const char* path = settings::value(settings::Setting::openblas)) return {path};
  std::vector<std::string> out;
#if defined(WEFT_OPENBLAS_DIR)
  out.push_back(std::string(WEFT_OPENBLAS_DIR) + "/openblas-pthread/libopenblas.so.0");
#endif
  out.push_back("libopenblas.so.0");
  return out;
}

// OpenBLAS's thread count is the library's, shared with every other user of the same file in the process
// (numpy and PyTorch load Debian's libblas.so.3, which is this library): weft's calls run on one thread each
// (its workers own the cores), so the count is 1 while any weft call is in flight and back to what it was
// when the last one returns (issue 45, item 15: weft used to set 1 for good, and numpy's products after a
// weft matmul ran on one core).
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();
struct OpenBlasThreads {
  SetThreadsFn set = nullptr;
  GetThreadsFn get = nullptr;
  std::mutex mutex;
  int in_flight = 0;
  int found = 1;  // the count before the first call in flight
};
OpenBlasThreads& openblas_threads() {
  static OpenBlasThreads* threads = new OpenBlasThreads();  // never destroyed: calls may run at exit
  return *threads;
}

std::counting_semaphore<CallSlot::kMaxCallsInFlight>& call_slots() {
  static std::counting_semaphore<CallSlot::kMaxCallsInFlight> slots(CallSlot::kMaxCallsInFlight);
  return slots;
}

// OpenBLAS, loaded and judged: its GEMMs when matmul uses it, else why not.
struct OpenBlas {
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  std::string description, why;
};

OpenBlas load_openblas(Mode mode) {
  OpenBlas out;
  void* handle = nullptr;
  std::string tried;
  for (const std::string& path : candidates()) {
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    const char* why = ::dlerror();
    tried += (tried.empty() ? "" : "; ") + (why ? std::string(why) : path);
  }
  // A library the user named is one they meant: not loading it is an error, never a quiet fall back to Eigen.
  const char* named = settings::value(settings::Setting::openblas);
  const auto refuse_named = [&](const std::string& why) {
    throw InvalidArgument(std::string("WEFT_OPENBLAS=") + named + " is not " +
                          std::string(settings::spec(settings::Setting::openblas).accepted) + why);
  };
  if (!handle) {
    if (named) refuse_named(" that can be loaded: " + tried);
    if (mode == Mode::openblas) throw InvalidArgument("WEFT_GEMM=openblas: cannot load OpenBLAS: " + tried);
    out.why = "no OpenBLAS: " + tried;
    return out;
  }
  using CharFn = char* (*)();
  auto corename_fn = reinterpret_cast<CharFn>(::dlsym(handle, "openblas_get_corename"));
  auto config_fn = reinterpret_cast<CharFn>(::dlsym(handle, "openblas_get_config"));
  auto set_threads = reinterpret_cast<SetThreadsFn>(::dlsym(handle, "openblas_set_num_threads"));
  auto get_threads = reinterpret_cast<GetThreadsFn>(::dlsym(handle, "openblas_get_num_threads"));
  auto sgemm = reinterpret_cast<Sgemm>(::dlsym(handle, "sgemm_"));
  auto dgemm = reinterpret_cast<Dgemm>(::dlsym(handle, "dgemm_"));
  if (!corename_fn || !config_fn || !set_threads || !get_threads || !sgemm || !dgemm) {
    // Not OpenBLAS (a reference BLAS under that name would also skip zero terms, losing NaN * 0 = NaN).
    ::dlclose(handle);  // no OpenBLAS threads to outlive it
    if (named) refuse_named(": it lacks OpenBLAS's entry points");
    if (mode == Mode::openblas) throw InvalidArgument("WEFT_GEMM=openblas: the library loaded is not OpenBLAS");
    out.why = "the library loaded as OpenBLAS lacks its entry points";
    return out;
  }
  const char* corename_text = corename_fn();
  const char* config_text = config_fn();
  const std::string corename = corename_text ? corename_text : "unknown";
  std::string version = config_text ? config_text : "OpenBLAS";
  if (const auto second_space = version.find(' ', version.find(' ') + 1); second_space != std::string::npos) {
    version.resize(second_space);  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21"
  }
  const Isa core = core_isa(corename);
  const Isa cpu = cpu_isa([](std::string_view f) { return isa::cpu_supports(f); });
  if (!use_openblas(mode, core, cpu)) {
    // The library stays loaded (unloading a library with threads of its own is not safe); it computes nothing.
    out.why = version + " chose its " + corename + " kernels (" + isa_name(core) + ") on this " + isa_name(cpu) +
              " CPU; " +
              (core == cpu ? "below AVX2 Eigen's kernels are as good" : "OPENBLAS_CORETYPE names the ones for this CPU");
    return out;
  }
  openblas_threads().set = set_threads;  // one thread per call, while weft's calls run (CallSlot)
  openblas_threads().get = get_threads;
  out.sgemm = sgemm;
  out.dgemm = dgemm;
  out.description =
      version + " (" + corename + " kernels" + (mode == Mode::openblas ? ", WEFT_GEMM=openblas" : "") + ")";
  return out;
}

Backend load(Mode mode) {
  Backend out;
  if (mode == Mode::eigen) {
    out.eigen_float32 = out.eigen_float64 = "WEFT_GEMM=eigen";
    return out;
  }
  // float32: oneDNN first (its kernels come from cpuid, so it knows every CPU with a vector ISA it supports).
  std::string onednn_why;
  if (mode == Mode::automatic || mode == Mode::onednn) {
    std::string description;
    bool jit = false;
    const onednn::Library* library = onednn::load(description, onednn_why, jit);
    if (!library && mode == Mode::onednn) throw InvalidArgument("WEFT_GEMM=onednn: cannot use oneDNN: " + onednn_why);
    if (library && use_onednn(mode, jit)) {
      out.onednn = library;
      out.float32 = description + (mode == Mode::onednn ? " (WEFT_GEMM=onednn)" : "");
    } else if (library) {
      onednn_why = description + " has only its reference kernels for this CPU";
    }
  }
  if (mode == Mode::onednn) {
    out.eigen_float64 = "WEFT_GEMM=onednn";
    return out;
  }
  const OpenBlas openblas = load_openblas(mode);
  if (openblas.dgemm) {
    out.dgemm = openblas.dgemm;
    out.float64 = openblas.description;
    if (!out.onednn) {
      out.sgemm = openblas.sgemm;
      out.float32 = openblas.description;
    }
  } else {
    out.eigen_float64 = openblas.why;
    if (!out.onednn) out.eigen_float32 = (onednn_why.empty() ? "" : onednn_why + "; ") + openblas.why;
  }
  return out;
}

}  // namespace

Isa core_isa(std::string_view corename) {
  const std::string name = lower(corename);
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (name == avx512) return Isa::avx512;
  }
  for (const char* avx2 : {"haswell", "zen", "excavator"}) {
    if (name == avx2) return Isa::avx2;
  }
  return Isa::baseline;
}

Isa cpu_isa(const std::function<bool(std::string_view)>& supported) {
  if (supported("avx512f") && supported("avx512bw") && supported("avx512dq") && supported("avx512vl")) {
    return Isa::avx512;
  }
  if (supported("avx2") && supported("fma")) return Isa::avx2;
  return Isa::baseline;
}

Mode parse_mode(const char* value) {
  if (value == nullptr || *value == '\0') return Mode::automatic;  // empty means unset, as every WEFT_* variable
  // The settings table lists WEFT_GEMM's values in Mode's order.
  return static_cast<Mode>(settings::choice_of(settings::Setting::gemm, value));
}

bool use_openblas(Mode mode, Isa core, Isa cpu) {
  switch (mode) {
    case Mode::eigen:
    case Mode::onednn: return false;
    case Mode::openblas: return true;
    case Mode::automatic: break;
  }
  // Kernels for a better ISA than the CPU's would not be chosen by OpenBLAS; for a worse one they are what
  // makes a misdetected OpenBLAS slow. Below AVX2 Eigen's own kernels are as good.
  return core == cpu && cpu != Isa::baseline;
}

bool use_onednn(Mode mode, bool jit) {
  switch (mode) {
    case Mode::eigen:
    case Mode::openblas: return false;
    case Mode::onednn: return true;
    case Mode::automatic: break;
  }
  // Its reference loops are far slower than Eigen's vectorized kernels.
  return jit;
}

CallSlot::CallSlot() {
  // A slot frees as soon as a call returns, so this wait is short; the deadline is weft's rule for every
  // blocking wait (a hung BLAS call becomes an error instead of a silent hang of every other caller).
  constexpr auto kDeadline = std::chrono::seconds(300);
  if (!call_slots().try_acquire_for(kDeadline)) {
    throw Error("matmul: waited " + std::to_string(kDeadline.count()) + " s for one of the " +
                std::to_string(kMaxCallsInFlight) + " OpenBLAS call slots; the calls holding them do not return");
  }
  OpenBlasThreads& t = openblas_threads();
  if (!t.set) return;
  std::lock_guard lock(t.mutex);
  if (t.in_flight++ > 0) return;
  t.found = t.get();
  if (t.found != 1) t.set(1);
}
CallSlot::~CallSlot() {
  OpenBlasThreads& t = openblas_threads();
  if (t.set) {
    std::lock_guard lock(t.mutex);
    if (--t.in_flight == 0 && t.found != 1) t.set(t.found);
  }
  call_slots().release();
}

const Backend& backend() {
  static const Backend chosen = load(parse_mode(settings::value(settings::Setting::gemm)));
  return chosen;
}

bool worth_gemm(std::int64_t m, std::int64_t k, std::int64_t n) {
  // Below 32^3 multiply-adds both libraries are mostly call overhead; OpenBLAS wins on large products.
  constexpr double kMinWork = 32.0 * 32.0 * 32.0;
  if (m <= 0 || k <= 0 || n <= 0 || m > INT_MAX || k > INT_MAX || n > INT_MAX) return false;
  return static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) >= kMinWork;
}

}  // namespace weft::blas
