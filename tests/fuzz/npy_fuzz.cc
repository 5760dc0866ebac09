// Fuzz target: the .npy reader (weft/npy.hpp, src/array/npy.cc) on arbitrary bytes. A malformed file must be
// an InvalidArgument, never a crash, an overflow or an allocation beyond the bytes that are there; a file
// that parses must survive a write and a read back unchanged (serialize_npy is the writer save_npy uses).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "weft/error.hpp"
#include "weft/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  weft::Array array;
  try {
    array = weft::parse_npy(bytes, "fuzz.npy");
  } catch (const weft::InvalidArgument&) {
    return 0;  // refused with a message: what a malformed file must get
  }
  // Round trip: what weft writes it reads back, bit for bit.
  const weft::Array again = weft::parse_npy(weft::serialize_npy(array), "round-trip.npy");
  if (again.dtype() != array.dtype() || again.shape() != array.shape() || again.nbytes() != array.nbytes() ||
      (array.nbytes() > 0 && std::memcmp(again.bytes(), array.bytes(), array.nbytes()) != 0))
    std::abort();
  return 0;
}
