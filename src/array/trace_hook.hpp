// The array library's side of tracing: the interface a trace implements (the program layer's, src/program/
// trace.cc) and the entry check every array op makes. While a function is traced its Arrays are symbolic (a
// dtype, a shape, a value id and the trace, no buffer); an op given one records `outs = op[params](ins)` in
// that trace instead of computing, with the op names and parameters of the program layer's registry (those
// weft/_jnp.py records from Python, so C++ and Python traces print alike). Concrete operands become the
// program's constants. The array library cannot call up into the program layer: it calls this interface.
//
// Cost for concrete arrays: one predictable branch per op (`x.traced()`, a null test).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "weft/array.hpp"
#include "weft/program_params.hpp"

namespace weft::detail {

class TraceHook {
 public:
  virtual ~TraceHook() = default;
  // Records `outs = op[params](ins)`: symbolic inputs must be of this trace, concrete ones become constants.
  // `source` ("file.cc:42", may be empty) is named by the equation's errors. Returns the symbolic results.
  virtual std::vector<Array> record(const std::string& op, const std::vector<Array>& ins, ProgramParams params,
                                    std::string source) = 0;
};

// Makes and reads symbolic arrays (Array's private state).
struct TraceAccess {
  static Array symbolic(std::shared_ptr<TraceHook> trace, int value_id, DType dtype, Shape shape);
  static TraceHook* trace(const Array& a) { return a.trace_.get(); }
  static int value_id(const Array& a) { return a.value_id_; }
};

// Records `op` in the trace of the first symbolic array of `ins` (there must be one).
std::vector<Array> record(const std::string& op, const std::vector<Array>& ins, ProgramParams params = {},
                          std::string source = {});
// record() for ops with one result.
Array record1(const std::string& op, const std::vector<Array>& ins, ProgramParams params = {});

// A possibly negative axis of a rank-`rank` array made non-negative when in range (left as given otherwise:
// the program's rule then names it), as weft/_jnp.py normalises axes before recording them.
std::int64_t traced_axis(std::int64_t axis, int rank);

}  // namespace weft::detail
