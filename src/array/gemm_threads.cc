// The per-thread GEMM width (gemm_threads.hpp).
#include "array/gemm_threads.hpp"

#include <algorithm>

namespace weft::kernels {
namespace {
thread_local int t_gemm_threads = 1;
}

bool gemm_widening() {
#if defined(WEFT_GEMM_ONE_THREAD)
  // The sanitizer builds (src/array/CMakeLists.txt says why): products stay on their caller's thread.
  return false;
#else
  return true;
#endif
}

WidenedGemm::WidenedGemm(int threads) : previous_(t_gemm_threads) {
  t_gemm_threads = gemm_widening() ? std::max(1, threads) : 1;
}
WidenedGemm::~WidenedGemm() { t_gemm_threads = previous_; }
int gemm_threads() { return t_gemm_threads; }

}  // namespace weft::kernels
