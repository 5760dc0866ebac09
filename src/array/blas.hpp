// Which library computes matmul's large products: oneDNN for float32 (onednn.hpp) when it is installed and
// runs JIT kernels here; OpenBLAS for float64 (and for float32 without oneDNN) when it runs kernels made for
// this CPU; Eigen for the rest. This file loads OpenBLAS and holds the decision.
//
// Why: Eigen 3.4's GEMM (48x4 AVX-512 micro-kernel) tops out near 137 GFLOP/s on one core of the AMD EPYC
// (Zen 5) we measure on, at every shape; Debian's OpenBLAS 0.3.21 with its AVX-512 (SkylakeX) kernels reaches
// 200 at 256x784x512 and 176 at 98x256x512 (the weight gradients of a training step), and the same as Eigen
// at 32 rows. But OpenBLAS picks its kernels from the CPU's model number, and 0.3.21 does not know newer
// CPUs: on this one it runs its AVX2 kernels (92 GFLOP/s, slower than Eigen), on a Sapphire Rapids its SSE3
// ones (about 10x slower). So matmul uses OpenBLAS only when the kernels OpenBLAS chose use this CPU's best
// vector ISA (OPENBLAS_CORETYPE=SKYLAKEX tells 0.3.21 what this CPU is); otherwise it stays with Eigen.
//
// OpenBLAS is loaded at run time (dlopen, on the first product large enough to use it), never linked: no
// build or package of weft depends on it, and a process that does no large matmul never loads it. Debian's
// pthread flavour is looked for (libopenblas0-pthread); every call runs single-threaded on the calling thread
// (openblas_set_num_threads(1)): weft runs one replica per worker and owns the cores. OpenBLAS's own pool
// threads, started when it loads, stay asleep.
//
// WEFT_GEMM chooses: "auto" (default) as above, "eigen" loads neither library, "openblas" uses OpenBLAS for
// both float types whatever kernels it picked (tests of the OpenBLAS path on any CPU), "onednn" uses oneDNN
// for float32 whatever kernels it runs and Eigen for float64. WEFT_OPENBLAS names the OpenBLAS file to load.
// Internal to the core: linalg.cc is its only user; weft::matmul_backend() (ops.hpp) reports the choice.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace weft::onednn {
class Library;
}

namespace weft::blas {

// The Fortran-ABI GEMMs every BLAS exports (column-major; all arguments by pointer).
using Sgemm = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);
using Dgemm = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);

// The vector ISA a CPU offers, or an OpenBLAS kernel set is written for, ordered.
enum class Isa { baseline, avx2, avx512 };

// The ISA of the kernels OpenBLAS names with openblas_get_corename() ("SkylakeX", "Haswell", "Zen", ...;
// any case); baseline for the names of older or unknown cores.
Isa core_isa(std::string_view corename);
// The best of those ISAs `supported` (a __builtin_cpu_supports-style predicate) says this CPU has.
Isa cpu_isa(const std::function<bool(std::string_view)>& supported);

// What WEFT_GEMM asks for.
enum class Mode { automatic, eigen, openblas, onednn };
// Parses a WEFT_GEMM value (unset or empty = automatic, as every WEFT_* variable); anything else is an InvalidArgument naming it.
Mode parse_mode(const char* value);

// The decision, as a pure function of its inputs so tests can inject them: whether matmul uses a loaded
// OpenBLAS whose kernels are for `core` on a CPU with `cpu`.
bool use_openblas(Mode mode, Isa core, Isa cpu);
// Whether float32 products use a loaded oneDNN whose matmul runs JIT kernels here (`jit`) or only its
// reference C++ loops (a CPU it has no kernels for). OpenBLAS mode leaves it out.
bool use_onednn(Mode mode, bool jit);

// The backend of this process, decided once (on first use; WEFT_GEMM read then).
struct Backend {
  const onednn::Library* onednn = nullptr;  // float32 products; else sgemm, else Eigen
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;  // float64 products; else Eigen
  // The library computing large float32 / float64 products ("oneDNN 2.6.3 (brg:avx512_core kernels)",
  // "OpenBLAS 0.3.21 (SkylakeX kernels)"); empty when Eigen does, and then eigen_float32/64 say why
  // ("WEFT_GEMM=eigen", "no oneDNN: ...; OpenBLAS 0.3.21 chose its Haswell kernels ...").
  std::string float32, float64, eigen_float32, eigen_float64;
};
const Backend& backend();

// Held around every call into the backend's GEMM. OpenBLAS gives each thread inside a call a work buffer from
// a table sized when it was built (Debian's: 128 slots, then 512 more after a warning on stderr; past those
// it ends the process). With WEFT_SCHEDULER=threads every device is a thread, so more calls than that could
// be in flight: at most kMaxCallsInFlight run at once and the others wait for a slot. A call waits on
// nothing, so the wait is short and cannot deadlock; the product never falls back to Eigen instead, which
// would make a run's rounding depend on timing.
class CallSlot {
 public:
  static constexpr int kMaxCallsInFlight = 64;
  CallSlot();
  ~CallSlot();
  CallSlot(const CallSlot&) = delete;
  CallSlot& operator=(const CallSlot&) = delete;
};

// Whether a product of these sizes goes to the backend's GEMM: large enough that both libraries run their
// blocked kernels (measured alike below), and sizes that fit BLAS's int arguments.
bool worth_gemm(std::int64_t m, std::int64_t k, std::int64_t n);

}  // namespace weft::blas
