// Symbolic arrays (trace_hook.hpp): their construction, the recording entry the array ops call, and the error
// for reading the data of one.
#include "array/trace_hook.hpp"

#include "weft/error.hpp"

namespace weft::detail {

Array TraceAccess::symbolic(std::shared_ptr<TraceHook> trace, int value_id, DType dtype, Shape shape) {
  Array a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.value_id_ = value_id;
  a.trace_ = std::move(trace);
  return a;
}

std::vector<Array> record(const std::string& op, const std::vector<Array>& ins, ProgramParams params,
                          std::string source) {
  for (const Array& a : ins) {
    if (TraceHook* trace = TraceAccess::trace(a)) return trace->record(op, ins, std::move(params), std::move(source));
  }
  throw InvalidArgument(op + ": weft internal error: recorded without a traced operand");
}

Array record1(const std::string& op, const std::vector<Array>& ins, ProgramParams params) {
  std::vector<Array> out = record(op, ins, std::move(params));
  return std::move(out.at(0));
}

std::int64_t traced_axis(std::int64_t axis, int rank) {
  if (axis < 0 && axis >= -rank) return axis + rank;
  return axis;
}

void throw_traced_read(const char* op) {
  throw InvalidArgument(std::string(op) +
                        ": the array is traced (a symbolic value of a function being traced by weft::jit, "
                        "weft::make_program or pmap(jit(f))): it has no data until the program runs. Compute on it "
                        "with weft::ops and the Array operators, or call the function without jit");
}

}  // namespace weft::detail
