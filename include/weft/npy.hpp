// Arrays on disk as numpy's .npy files, so that numpy reads what weft writes and weft reads what numpy
// writes.
//
//   save_npy("w.npy", w);
//   Array w = load_npy("w.npy");
//
// Read: format versions 1.0, 2.0 and 3.0; little- or big-endian; C or Fortran order; the dtypes float16/32/64,
// int8/32/64, uint8 and bool. Anything else (complex, strings, objects, uint16/32/64, structured) is refused
// with the descr named. Written: version 1.0 (2.0 when the header needs it), little-endian, C order. bfloat16
// has no numpy dtype: it is written as float32 (every bfloat16 value is exactly a float32). Files are written
// atomically (a temporary file in the same directory, of an unpredictable name created O_EXCL|O_NOFOLLOW,
// flushed, renamed over the target): a crash mid-write never leaves a truncated file under the target's name,
// and a name planted in a shared directory is never written through. A file that is replaced keeps its mode
// (and owner where allowed); a new one gets 0666 less the umask. A malformed or truncated file is an
// InvalidArgument naming the file and what is wrong, never a crash; so is a file with bytes after the array's
// data (a file holds one array), and anything that is not a regular file (a FIFO is refused, not waited on).
#pragma once
#include <string>

#include "weft/array.hpp"

namespace weft {

void save_npy(const std::string& path, const Array& array);
Array load_npy(const std::string& path);
// The same on bytes in memory (what the fuzzer drives); `name` is used in error messages.
std::string serialize_npy(const Array& array);
Array parse_npy(const std::string& bytes, const std::string& name = "<memory>");

}  // namespace weft
