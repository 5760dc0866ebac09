// The per-thread GEMM width (gemm_threads.hpp).
#include "array/gemm_threads.hpp"

#include <algorithm>

namespace weft::kernels {
namespace {
thread_local int t_gemm_threads = 1;
}

WidenedGemm::WidenedGemm(int threads) : previous_(t_gemm_threads) { t_gemm_threads = std::max(1, threads); }
WidenedGemm::~WidenedGemm() { t_gemm_threads = previous_; }
int gemm_threads() { return t_gemm_threads; }

}  // namespace weft::kernels
