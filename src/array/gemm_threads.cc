// The per-thread GEMM width (gemm_threads.hpp).
#include "array/gemm_threads.hpp"

#include <algorithm>

namespace weft::kernels {
namespace {
thread_local int t_gemm_threads = 1;
}

WidenedGemm::WidenedGemm(int threads) : previous_(t_gemm_threads) {
#if defined(WEFT_GEMM_ONE_THREAD)
  // The ThreadSanitizer build: libgomp is not instrumented, and the TLS its pool threads allocate and free
  // reads as a data race there (src/array/CMakeLists.txt). Products stay on their caller's thread.
  threads = 1;
#endif
  t_gemm_threads = std::max(1, threads);
}
WidenedGemm::~WidenedGemm() { t_gemm_threads = previous_; }
int gemm_threads() { return t_gemm_threads; }

}  // namespace weft::kernels
