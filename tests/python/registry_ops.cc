// Prints every op of the program registry (src/program/op_registry.hpp), one a line, sorted: the list the
// differential fuzzer (tests/python/fuzz_programs.py) checks its coverage against, so that an op added to the
// registry and neither generated nor excluded with a reason fails test_fuzz_programs.py. The Python module
// does not expose the registry, and the fuzzer must not depend on a product change to see it.
#include <iostream>

#include "program/op_registry.hpp"

int main() {
  for (const std::string& op : weft::program::registered_ops()) std::cout << op << '\n';
  return 0;
}
