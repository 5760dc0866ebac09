#include "collectives/request.hpp"

#include <sstream>

#include "weft/error.hpp"

namespace weft::collectives {
namespace {

std::string dims(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string perm_str(const Permutation& perm) {
  std::string s = "[";
  for (std::size_t i = 0; i < perm.size(); ++i) {
    s += i ? ", (" : "(";
    s += std::to_string(perm[i].first);
    s += ", ";
    s += std::to_string(perm[i].second);
    s += ')';
  }
  return s + "]";
}

[[noreturn]] void fail(const Request& r, const std::string& rule) {
  throw InvalidArgument(std::string(r.api_name) + " over " + over(r) + ": " + rule);
}

// Normalises a possibly negative axis against `rank` dimensions (valid range [0, rank)).
int normalize_axis(const Request& r, int axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    fail(r, std::string(what) + " " + std::to_string(axis) + " is out of range for an operand of rank " +
                std::to_string(rank) + " (shape " + shape_str(r.input->shape()) + ")");
  return positive_axis(axis, rank);
}

int group_size_of(const Request& r) {
  return static_cast<int>(r.groups->members(r.groups->group_of(r.replica)).size());
}

}  // namespace

std::string over(const Request& r) {
  if (!r.axes) return "groups " + r.groups->to_string();
  std::string s = "axes (";
  for (std::size_t i = 0; i < r.axes->size(); ++i) {
    if (i) s += ", ";
    s += (*r.axes)[i];
  }
  return s + ")";
}

std::string describe(const Request& r) {
  std::ostringstream os;
  os << r.api_name << "(" << dtype_name(r.input->dtype()) << dims(r.input->shape()) << ", " << over(r);
  if (r.kind == Kind::all_reduce || r.kind == Kind::reduce_scatter) os << ", op=" << reduce_op_name(r.reduce);
  if (r.kind == Kind::all_gather) os << ", axis=" << r.axis << ", tiled=" << (r.tiled ? "true" : "false");
  if (r.kind == Kind::reduce_scatter)
    os << ", scatter_dimension=" << r.axis << ", tiled=" << (r.tiled ? "true" : "false");
  if (r.kind == Kind::all_to_all)
    os << ", split_axis=" << r.axis << ", concat_axis=" << r.concat_axis << ", tiled=" << (r.tiled ? "true" : "false");
  if (r.kind == Kind::ppermute) os << ", perm=" << perm_str(*r.perm);
  os << ") at " << r.loc.file_name() << ":" << r.loc.line();
  return os.str();
}

DType output_dtype(const Request& r) {
  const DType in = r.input->dtype();
  const bool reduces = r.kind == Kind::all_reduce || r.kind == Kind::reduce_scatter;
  return reduces ? reduction_dtype(r.reduce, in) : in;
}

ReduceOp reduction_of(const Request& r) { return r.reduce == ReduceOp::mean ? ReduceOp::sum : r.reduce; }

bool divides_by_group(const Request& r) {
  return r.reduce == ReduceOp::mean && (r.kind == Kind::all_reduce || r.kind == Kind::reduce_scatter);
}

DType sum_dtype(const Request& r) {
  const DType in = r.input->dtype();
  if (in == DType::f16 || in == DType::bf16) return DType::f32;
  return in == DType::boolean ? DType::i32 : in;
}

void validate(const Request& r) {
  const ReplicaGroups& g = *r.groups;
  if (r.replica < 0 || r.replica >= g.num_replicas())
    fail(r, "replica " + std::to_string(r.replica) + " is not among the " + std::to_string(g.num_replicas()) +
                " replicas of the groups " + g.to_string());
  const int size = group_size_of(r);
  const Shape& shape = r.input->shape();
  const int rank = static_cast<int>(shape.size());
  switch (r.kind) {
    case Kind::all_reduce:
      break;
    case Kind::all_gather: {
      if (!g.uniform()) fail(r, "all_gather needs groups of equal size, got " + g.to_string());
      if (r.tiled) {
        if (rank == 0) fail(r, "a tiled all_gather needs an operand of rank >= 1, got a scalar");
        normalize_axis(r, r.axis, rank, "axis");
      } else if (r.axis < -rank - 1 || r.axis > rank) {
        // The result has a new axis: the operand's rank is not the bound, the result's is.
        fail(r, "axis " + std::to_string(r.axis) + " is out of range for an operand of rank " + std::to_string(rank) +
                    " (shape " + shape_str(shape) + "): an untiled all_gather inserts a new axis, so axis must be in [" +
                    std::to_string(-rank - 1) + ", " + std::to_string(rank) + "]");
      }
      break;
    }
    case Kind::reduce_scatter: {
      if (!g.uniform()) fail(r, "reduce_scatter needs groups of equal size, got " + g.to_string());
      if (rank == 0) fail(r, "reduce_scatter needs an operand of rank >= 1, got a scalar");
      const int d = normalize_axis(r, r.axis, rank, "scatter_dimension");
      if (!r.tiled && shape[d] != size)
        fail(r, "reduce_scatter operand scatter dimension size " + std::to_string(shape[d]) +
                    " must match shard count " + std::to_string(size) + " (the group size; shape " +
                    shape_str(shape) + ")");
      if (r.tiled && shape[d] % size != 0)
        fail(r, "tiled reduce_scatter operand scatter dimension size " + std::to_string(shape[d]) +
                    " must be divisible by shard_count " + std::to_string(size) + " (shape " + shape_str(shape) + ")");
      break;
    }
    case Kind::all_to_all: {
      if (!g.uniform()) fail(r, "all_to_all needs groups of equal size (Replica groups must be equally sized), got " + g.to_string());
      if (rank == 0) fail(r, "all_to_all needs an operand of rank >= 1, got a scalar");
      const int s = normalize_axis(r, r.axis, rank, "split_axis");
      normalize_axis(r, r.concat_axis, rank, "concat_axis");
      if (!r.tiled && shape[s] != size)
        fail(r, "all_to_all requires the size of the mapped axis (the group size, " + std::to_string(size) +
                    ") to equal x.shape[split_axis] (" + std::to_string(shape[s]) + "); shape " + shape_str(shape));
      if (r.tiled && shape[s] % size != 0)
        fail(r, "the size of all_to_all split_axis (" + std::to_string(shape[s]) +
                    ") has to be divisible by the group size (" + std::to_string(size) + ")");
      break;
    }
    case Kind::ppermute: {
      std::vector<char> src(size, 0), dst(size, 0);
      for (auto [s, d] : *r.perm) {
        const int ms = ((s % size) + size) % size, md = ((d % size) + size) % size;
        if (src[ms] || dst[md])
          fail(r, "ppermute sources and destinations must be unique, got " + perm_str(*r.perm) +
                      " (indices taken modulo the group size " + std::to_string(size) + ")");
        src[ms] = dst[md] = 1;
      }
      break;
    }
  }
}

Shape output_shape(const Request& r) {
  Shape shape = r.input->shape();
  const int rank = static_cast<int>(shape.size());
  const int size = group_size_of(r);
  switch (r.kind) {
    case Kind::all_reduce:
    case Kind::ppermute:
      return shape;
    case Kind::all_gather: {
      if (r.tiled) {
        const int a = positive_axis(r.axis, rank);
        shape[a] *= size;
      } else {
        const int a = positive_axis(r.axis, rank + 1);
        shape.insert(shape.begin() + a, size);
      }
      return shape;
    }
    case Kind::reduce_scatter: {
      const int d = positive_axis(r.axis, rank);
      if (r.tiled) shape[d] /= size;
      else shape.erase(shape.begin() + d);
      return shape;
    }
    case Kind::all_to_all: {
      const int s = positive_axis(r.axis, rank);
      const int c = positive_axis(r.concat_axis, rank);
      if (r.tiled) {
        shape[s] /= size;
        shape[c] *= size;
      } else {
        shape.erase(shape.begin() + s);
        shape.insert(shape.begin() + c, size);
      }
      return shape;
    }
  }
  return shape;
}

std::string differences(const Request& a, const Request& b) {
  std::string out;
  auto add = [&](const char* what) {
    if (!out.empty()) out += ", ";
    out += what;
  };
  if (a.kind != b.kind || std::string_view(a.api_name) != b.api_name) add("op kind differs");
  if (a.kind == b.kind && (a.kind == Kind::all_reduce || a.kind == Kind::reduce_scatter) && a.reduce != b.reduce)
    add("reduce op differs");
  if (a.input->dtype() != b.input->dtype()) add("dtype differs");
  if (a.input->shape() != b.input->shape()) add("shape differs");
  if (a.groups != b.groups && !(*a.groups == *b.groups)) add("group differs");
  if (a.kind == b.kind) {
    if (a.axis != b.axis || a.concat_axis != b.concat_axis || a.tiled != b.tiled) add("axis parameters differ");
    if (a.kind == Kind::ppermute && *a.perm != *b.perm) add("permutation differs");
  }
  return out;
}

}  // namespace weft::collectives
