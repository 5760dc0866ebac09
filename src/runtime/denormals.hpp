// Flushing denormal floats to zero while a replica runs (RuntimeOptions::flush_denormals,
// WEFT_FLUSH_DENORMALS). XLA:CPU, and so JAX on a CPU, runs every computation with the FPU's flush-to-zero
// and denormals-are-zero modes on (TensorFlow's convention): a result below the smallest normal float is 0,
// and a denormal input reads as 0. numpy and PyTorch keep IEEE's gradual underflow, and so does weft unless
// asked. Besides matching JAX, the modes matter for speed on Intel cores, where an SSE/AVX operation with a
// denormal operand or result takes a microcode assist (~100x slower); AMD's Zen cores handle them at full
// speed (measured: docs/settings.md).
//
// The modes are per thread (x86's MXCSR, AArch64's FPCR), and Boost.Context saves and restores MXCSR with
// every fiber switch, so a scope set inside one replica's fiber leaves its worker's other fibers, and the
// caller's thread, as they were. Threads a kernel library starts itself (OpenMP's, for a widened product)
// keep the mode of the thread that started them.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <cstdint>

namespace weft::detail {

// Whether this build can set the modes (x86 with SSE, AArch64); elsewhere the option is refused.
constexpr bool kCanFlushDenormals =
#if defined(__x86_64__) || defined(__SSE__) || defined(__aarch64__)
    true;
#else
    false;
#endif

// Sets flush-to-zero and denormals-are-zero on this thread (or fiber) for its lifetime, then restores the
// mode it found. A no-op when `on` is false.
class ScopedFlushDenormals {
 public:
  explicit ScopedFlushDenormals(bool on) : on_(on && kCanFlushDenormals) {
    if (!on_) return;
#if defined(__x86_64__) || defined(__SSE__)
    saved_ = _mm_getcsr();
    _mm_setcsr(static_cast<unsigned>(saved_) | kFlushToZero | kDenormalsAreZero);
#elif defined(__aarch64__)
    std::uint64_t fpcr;
    asm volatile("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    fpcr |= kFlushToZeroA64;
    asm volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
  }
  ~ScopedFlushDenormals() {
    if (!on_) return;
#if defined(__x86_64__) || defined(__SSE__)
    _mm_setcsr(static_cast<unsigned>(saved_));
#elif defined(__aarch64__)
    asm volatile("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000;      // MXCSR.FTZ: denormal results become 0
  static constexpr unsigned kDenormalsAreZero = 0x0040; // MXCSR.DAZ: denormal inputs read as 0
  static constexpr std::uint64_t kFlushToZeroA64 = std::uint64_t{1} << 24;  // FPCR.FZ: both, on AArch64
  bool on_;
  std::uint64_t saved_ = 0;
};

}  // namespace weft::detail
