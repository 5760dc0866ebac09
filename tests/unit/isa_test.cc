// The kernels' ISA check (src/array/isa.hpp): the decision with an injected CPU (which features it has), the
// exact error text, and the build plumbing: the features CMake computed for -march=${WEFT_ARCH} are the
// feature macros the kernel translation units really saw, every one of them is a name the check can ask the
// CPU about, and this machine (which built the binary) passes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../support/errors.hpp"
#include "array/isa.hpp"
#include "weft/error.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {
namespace isa_test {

using testing::ErrorOf;

// A CPU that has exactly `features`.
auto cpu_with(std::set<std::string> features) {
  return [features = std::move(features)](std::string_view f) { return features.count(std::string(f)) > 0; };
}

TEST(Isa, MissingFeaturesInOrder) {
  const std::vector<std::string> required = {"avx", "avx2", "fma", "avx512f", "avx512bw"};
  struct Case {
    std::set<std::string> cpu;
    std::vector<std::string> missing;
  };
  const std::vector<Case> cases = {
      {{"avx", "avx2", "fma", "avx512f", "avx512bw", "sse3"}, {}},
      {{"avx", "avx2", "fma"}, {"avx512f", "avx512bw"}},  // an AVX2 machine under a native AVX-512 build
      {{"avx", "avx2", "fma", "avx512f"}, {"avx512bw"}},  // Knights Landing: F without BW
      {{}, {"avx", "avx2", "fma", "avx512f", "avx512bw"}},
  };
  for (const Case& c : cases) EXPECT_EQ(isa::missing_features(required, cpu_with(c.cpu)), c.missing);
  EXPECT_TRUE(isa::missing_features({}, cpu_with({})).empty());
}

TEST(Isa, ErrorNamesTheArchTheFeaturesAndTheFix) {
  const std::vector<std::string> required = {"avx", "avx2", "fma", "avx512f", "avx512bw"};
  // An AVX2 machine: the message suggests the portable level it has.
  const auto avx2_machine = cpu_with({"avx", "avx2", "fma", "x86-64-v2", "x86-64-v3"});
  EXPECT_EQ(ErrorOf<Error>([&] { isa::check_features("native", required, avx2_machine); }),
            "weft: this binary's kernels were built for -march=native (avx, avx2, fma, avx512f, avx512bw) but this "
            "CPU lacks avx512f, avx512bw; rebuild with -DWEFT_ARCH=x86-64-v3 (this CPU has it), -DWEFT_ARCH=none "
            "(no -march flag), or another -march that this CPU supports");
  struct Case {
    std::string arch;
    std::set<std::string> cpu;
    std::string suggestion;  // what follows "rebuild with "
  };
  const std::vector<Case> cases = {
      // An x86-64-v3 build on a v2 machine: v3 is not suggested again, v2 is.
      {"x86-64-v3", {"x86-64-v2"}, "-DWEFT_ARCH=x86-64-v2 (this CPU has it), -DWEFT_ARCH=none"},
      // A machine below v2: only no -march at all.
      {"native", {}, "-DWEFT_ARCH=none (no -march flag), or another -march"},
      {"x86-64-v2", {}, "-DWEFT_ARCH=none (no -march flag), or another -march"},
  };
  for (const Case& c : cases) {
    testing::ExpectContains(ErrorOf<Error>([&] { isa::check_features(c.arch, {"avx2", "fma"}, cpu_with(c.cpu)); }),
                            {"-march=" + c.arch + " (avx2, fma) but this CPU lacks avx2, fma; rebuild with " +
                             c.suggestion});
  }
  EXPECT_NO_THROW(isa::check_features("native", required, cpu_with({"avx", "avx2", "fma", "avx512f", "avx512bw"})));
  EXPECT_NO_THROW(isa::check_features("none", {}, cpu_with({})));
}

TEST(Isa, ConfiguredFeaturesAreWhatTheKernelsWereCompiledWith) {
  EXPECT_EQ(isa::kernel_features(), isa::compiled_kernel_features()) << "-march=" << isa::kernel_arch();
  for (const std::string& f : isa::kernel_features()) EXPECT_TRUE(isa::known_feature(f)) << f;
  if (isa::kernel_arch() == "none") {
    EXPECT_TRUE(isa::kernel_features().empty());
  }
}

TEST(Isa, ThisMachinePasses) {
  // The binary runs where it was built (tests never run on another machine), so the real CPU has every
  // feature; under an emulated older CPU this is the test that fails, with the message above.
  EXPECT_NO_THROW(isa::check_cpu());
  EXPECT_NO_THROW(isa::ensure_kernels_supported());
  EXPECT_FALSE(isa::cpu_supports("not-a-feature"));
  EXPECT_FALSE(isa::known_feature("not-a-feature"));
#if defined(__x86_64__)
  EXPECT_TRUE(isa::cpu_supports("sse3"));  // every x86-64 CPU since 2005, and qemu's default model
#endif
}

TEST(Isa, RuntimeConstructionChecks) {
  // Runtime's constructor runs the check first; here it passes, so construction succeeds.
  EXPECT_NO_THROW(Runtime runtime(RuntimeOptions{}));
}

}  // namespace isa_test
}  // namespace
}  // namespace weft
