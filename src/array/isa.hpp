// The instruction set the array kernels were compiled for, and the check that this CPU has it. The kernel
// translation units are built with -march=${WEFT_ARCH} (CMake option, default native); run on a CPU without
// one of those features they would die of SIGILL in the middle of a training step. This check, compiled for
// the baseline ISA, turns that into a weft::Error naming the missing features and the fix, at Runtime
// construction and before the first kernel call. Internal to the core.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::isa {

// The -march the kernels were compiled with ("native", "x86-64-v3", ...); "none" when WEFT_ARCH=none.
std::string_view kernel_arch();
// The CPU features that -march implies beyond the compiler's baseline, in __builtin_cpu_supports spelling
// ("avx2", "fma", "avx512f", ...), as computed at configure time from the compiler's predefined macros.
const std::vector<std::string>& kernel_features();
// The features whose predefined macros the kernel translation units actually saw (isa_probe.cc is compiled
// like them), less those the baseline compiler assumes anyway. Equal to kernel_features() unless the build
// plumbing is broken; a test compares them.
std::vector<std::string> compiled_kernel_features();
// Every feature of the table (isa_features.inc) whose macro a kernel translation unit sees (isa_probe.cc).
std::vector<std::string> kernel_unit_macro_features();

// Whether `feature` is a name this file knows how to ask the CPU about.
bool known_feature(std::string_view feature);
// __builtin_cpu_supports(feature) for the running CPU; false for unknown names and on non-x86 hosts.
bool cpu_supports(std::string_view feature);

// The decision, as a pure function of its inputs so tests can inject a CPU: the entries of `required` for
// which `supported` is false, in order.
std::vector<std::string> missing_features(const std::vector<std::string>& required,
                                          const std::function<bool(std::string_view)>& supported);
// Throws weft::Error ("weft: this binary's kernels were built for -march=ARCH (f1, f2, ...) but this CPU
// lacks fX, fY; rebuild with ...") when a required feature is not supported. `supported` is also asked about
// "x86-64-v3" and "x86-64-v2", to suggest the best portable WEFT_ARCH this CPU can run.
void check_features(std::string_view arch, const std::vector<std::string>& required,
                    const std::function<bool(std::string_view)>& supported);

// check_features for this binary on this CPU (every call asks again).
void check_cpu();
// check_cpu() once per process: every kernel entry point calls it first, so Array math without a Runtime is
// covered. Cheap after the first successful call; a failed check throws again on every call.
void ensure_kernels_supported();

}  // namespace weft::isa
