// The builder: appends equations to a program, inferring each result's type as it goes, so a trace (next
// step) never writes a type by hand. A rule broken while building is reported at once, naming the equation.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "program.hpp"

namespace weft::program {

class Builder {
 public:
  explicit Builder(Mesh mesh, CollectiveRules rules = CollectiveRules::pmap);

  // A new program input of type `type`.
  ValueId input(ValueType type);
  // A value known at trace time, held by the program (a jaxpr constvar).
  ValueId constant(Array value);
  // Appends `outs = op[params](ins)` and returns the outs (none for host_store and the other stores).
  // Throws weft::InvalidArgument "equation 2 `psum[axes=('j',)] c`: unbound axis name: j (the mesh's axes are ('i'))".
  // `source` ("train.py:42") is the user's line that recorded it, named by its errors.
  std::vector<ValueId> emit(const OpInfo& op, const std::vector<ValueId>& ins, Params params = {},
                            std::string source = {});
  std::vector<ValueId> emit(Prim op, const std::vector<ValueId>& ins, Params params = {}, std::string source = {});
  // By name (the trace, Python): an unknown name is refused here, InvalidArgument "program builder: unknown op
  // 'frobnicate'"; the equation holds the resolved primitive from then on.
  std::vector<ValueId> emit(std::string_view op, const std::vector<ValueId>& ins, Params params = {},
                            std::string source = {});
  // emit() for ops with exactly one result.
  ValueId emit1(const OpInfo& op, const std::vector<ValueId>& ins, Params params = {}, std::string source = {});
  ValueId emit1(std::string_view op, const std::vector<ValueId>& ins, Params params = {}, std::string source = {});
  void set_outputs(std::vector<ValueId> outputs);

  const ValueType& type(ValueId id) const;
  const Mesh& mesh() const { return program_.mesh; }
  CollectiveRules rules() const { return program_.rules; }
  std::size_t num_equations() const { return program_.equations.size(); }
  // The program so far, verified.
  Program build() const;

 private:
  // Under shard_map: `ins` with each operand that varies over fewer axes than the op needs pvary-ed to them
  // (JAX's check_vma inserts the same pvary).
  std::vector<ValueId> with_pvary(const OpInfo& op, const std::vector<ValueId>& ins, const Params& params,
                                  const std::string& source);

  Program program_;
};

}  // namespace weft::program
