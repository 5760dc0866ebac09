// The one request funnel: every collective, whatever API spelled it (psum over named axes, PopXL's
// all_reduce over a grouping, ...), becomes a Request. Requests are validated locally (shapes against the
// group) and then compared across the replicas of a round before any data moves.
#pragma once
#include <memory>
#include <string>

#include "core/collective.hpp"
#include "weft/array.hpp"
#include "weft/call_site.hpp"
#include "weft/groups.hpp"
#include "weft/reduce_op.hpp"

namespace weft::collectives {

// The kinds are the collectives' table's (core/collective.hpp): a Request is one of its rows with its
// arguments and data.
using Kind = CollectiveKind;
inline const char* kind_name(Kind kind) { return collective_kind_name(kind); }

struct Request {
  Kind kind = Kind::all_reduce;
  const char* api_name = "";   // what the user called: "psum", "all_gather", "reduce_scatter", ...
  ReduceOp reduce = ReduceOp::sum;
  std::shared_ptr<const ReplicaGroups> groups;
  const std::vector<std::string>* axes = nullptr;  // the named axes, when the groups came from them
  const Array* input = nullptr;
  int axis = 0;                // all_gather: where the gathered dimension goes; reduce_scatter: scatter
                               // dimension; all_to_all: split axis
  int concat_axis = 0;         // all_to_all only
  bool tiled = false;
  const Permutation* perm = nullptr;  // ppermute only
  CallSite loc;
  int replica = 0;             // who sent it
};

// An axis counted from the end (negative) as counted from the start; validate() has checked the range.
inline int positive_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// "psum(float32[2,3], axes (i)) at file.cc:12"
std::string describe(const Request& request);
// How the groups were named, for messages: "axes (rows, cols)" or "groups [[0, 2], [1, 3]]". Built only
// when a message needs it: the hot path never formats text.
std::string over(const Request& request);

// The output dtype and shape of `request` for this replica, after checking the request against its group
// (JAX's rules: scatter dimension equals or divides the group size, ...). Throws InvalidArgument naming the
// op, the rule and the values; the caller prefixes the replica.
DType output_dtype(const Request& request);
Shape output_shape(const Request& request);
void validate(const Request& request);

// pmean (ReduceOp::mean, any API) is lowered here, once, as JAX composes it (lax.pmean is psum(x) / the group
// size): the algorithms, the hierarchical path and the transports see only the sum (reduction_of) and, for a
// mean, divide the group's sums by its size (kernels::divide_sums) into the mean's output dtype (output_dtype).
ReduceOp reduction_of(const Request& request);  // the op the layers below run: sum for a mean
bool divides_by_group(const Request& request);  // a mean: the sums are then divided by the group size
// The dtype a mean's sums are kept in before the division: psum's (the input's; int32 for booleans), but
// float32 for 16-bit floats, which psum would round before the division (the mean rounds once, after it).
DType sum_dtype(const Request& request);

// The fields in which two replicas' requests for the same round differ ("op kind differs, dtype differs"),
// or an empty string when they agree.
std::string differences(const Request& a, const Request& b);

}  // namespace weft::collectives
