// How many threads a library GEMM (oneDNN) called from this thread may use. weft runs one replica per core,
// so every product runs on its caller's thread alone (1, the default). A caller that runs one product on
// behalf of replicas whose workers wait idle meanwhile (the executor's shared products, program/
// shared_products.hpp) widens it for that call, so the waiting cores compute too.
#pragma once

namespace weft::kernels {

// This thread's products use up to `threads` threads while the guard lives (at least 1; nesting restores).
class WidenedGemm {
 public:
  explicit WidenedGemm(int threads);
  ~WidenedGemm();
  WidenedGemm(const WidenedGemm&) = delete;
  WidenedGemm& operator=(const WidenedGemm&) = delete;

 private:
  int previous_;
};

// The threads this thread's products may use now (1 unless widened).
int gemm_threads();

// Whether products can be widened at all in this build: not in the sanitizer builds, where libgomp's
// uninstrumented pool threads break the sanitizers' bookkeeping (a guard there leaves products at 1 thread).
bool gemm_widening();

}  // namespace weft::kernels
