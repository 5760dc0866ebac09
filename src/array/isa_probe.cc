// Compiled exactly like the kernel translation units (-march=${WEFT_ARCH}), this file reports which ISA
// feature macros they see, so a test can prove that the features the runtime check requires (computed by
// CMake at configure time) are the ones the kernels were really built with. Only the isa test calls it.
#include <string>
#include <string_view>
#include <vector>

#include "array/isa.hpp"

namespace weft::isa {

std::vector<std::string> kernel_unit_macro_features() {
  std::vector<std::string> out;
  // A defined macro expands (to 1); an undefined one stringifies to its own name.
#define WEFT_ISA_STR(x) #x
#define WEFT_ISA_XSTR(x) WEFT_ISA_STR(x)
#define WEFT_ISA_FEATURE(macro, name) \
  if (std::string_view(WEFT_ISA_XSTR(macro)) != #macro) out.push_back(name);
#include "array/isa_features.inc"
#undef WEFT_ISA_FEATURE
  return out;
}

}  // namespace weft::isa
