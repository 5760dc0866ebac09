// A program that hard-codes its device count, as a new user's first program does, for the test of the
// start-up message under weftrun (issue 10, item 1): `hardcoded_devs N` makes Runtime({.device_count = N})
// and runs one psum over every device. When N is not weftrun's --num-replicas / --num-instances, each
// instance must be told that its RuntimeOptions::device_count (not WEFT_DEVICE_COUNT, which weftrun set
// right) is what disagrees, and how to fix it. When N matches, the job runs and prints "ok".
#include <cstdlib>
#include <iostream>

#include <weft/weft.hpp>

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 4;
  weft::Runtime rt({.device_count = count});
  auto sum = weft::pmap([](weft::Replica& r, const weft::Array& x) { return r.psum(x, "i"); },
                        {.axis = "i", .runtime = &rt});
  const double got = sum(weft::Array::ones({rt.local_device_count()})).to_host().sum().item<double>();
  const double want = static_cast<double>(rt.local_device_count()) * rt.device_count();
  std::cout << "instance " << rt.process_index() << ": " << (got == want ? "ok" : "WRONG") << std::endl;
  return got == want ? 0 : 1;
}
