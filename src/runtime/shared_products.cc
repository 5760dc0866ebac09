// Shared products at run time (shared_products.hpp): the round's completion, run by the last replica to
// arrive, and each replica's side.
#include "runtime/shared_products.hpp"

#include <algorithm>
#include <map>
#include <thread>

#include "array/gemm_threads.hpp"
#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft::detail {
namespace {

// A product's operands as rows (m, k): the leading axes of `rows` flattened (they stack along them).
Array as_matrix(const Array& rows) {
  const Shape& s = rows.shape();
  return rows.reshape({-1, s.back()});
}

}  // namespace

ProductSharing::ProductSharing(Execution& execution, int mode)
    : execution_(execution),
      mode_(mode),
      threads_(std::min<int>(static_cast<int>(execution.local_replicas.size()),
                             static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))),
      rendezvous_(static_cast<int>(execution.local_replicas.size()),
                  transport::Deadlines{execution.runtime.options.collective_warn_s,
                                       execution.runtime.options.collective_timeout_s},
                  execution.name, [&execution](int local) { return execution.replica_name(execution.local_replicas[local]); },
                  execution.local_replicas) {}

std::shared_ptr<const ProductSharing::Outcome> ProductSharing::complete(std::span<const Request* const> requests) const {
  const int n = static_cast<int>(requests.size());
  const auto who = [this](int local) { return execution_.replica_name(execution_.local_replicas[local]); };
  const Request& first = *requests[0];
  const auto at = [](const Request& r) {
    return "equation " + std::to_string(r.equation) + (r.source->empty() ? "" : " at " + *r.source);
  };
  for (int li = 1; li < n; ++li) {
    const Request& r = *requests[li];
    if (r.program != first.program || r.equation != first.equation) {
      throw MismatchError("shared product: " + who(li) + " is at " + at(r) +
                          (r.program != first.program ? " of another program" : "") + " while " + who(0) + " is at " +
                          at(first) + " (the replicas must run one program when their products are shared: "
                          "PmapOptions::shared_products, SessionOptions::shared_products)");
    }
  }
  // The replicas by weight: those agreeing on the weight's axes hold the same weight (the program's types say).
  std::map<int, std::vector<int>> groups;
  for (int li = 0; li < n; ++li) groups[requests[li]->group].push_back(li);
  auto outcome = std::make_shared<Outcome>();
  outcome->results.resize(n);
  for (const auto& [key, members] : groups) {
    const Array& weight = *requests[members[0]]->weight;
    std::vector<Array> stacked;
    stacked.reserve(members.size());
    for (int li : members) {
      const Request& r = *requests[li];
      if (mode_ == 2 && li != members[0] && !r.weight->identical(weight)) {
        throw MismatchError("shared product (WEFT_SHARED_PRODUCTS=2): " + who(li) + "'s weight differs from " +
                            who(members[0]) + "'s, which the program's types say it equals (" + at(first) + ")");
      }
      stacked.push_back(as_matrix(*r.rows));
    }
    Array product;
    {
      const kernels::WidenedGemm widened(threads_);
      product = matmul(stacked.size() == 1 ? stacked[0] : Array::concatenate(stacked, 0), weight,
                       {.transpose_a = false, .transpose_b = first.transpose_b});
    }
    execution_.runtime.stats.shared_products++;
    const std::int64_t cols = product.shape().back();
    std::size_t offset = product.offset();
    for (int li : members) {
      Shape shape = requests[li]->rows->shape();
      shape.back() = cols;
      Array view(product.dtype(), shape, product.buffer(), offset, requests[li]->rows->device());
      offset += view.nbytes();
      outcome->results[li] = std::move(view);
    }
  }
  return outcome;
}

Array ProductSharing::multiply(int local, const void* program, std::size_t equation, const std::string& source,
                               const std::vector<std::string>& weight_axes, const Array& rows, const Array& weight,
                               bool transpose_b, const transport::Describe& what) {
  const int replica = execution_.local_replicas[local];
  const Request request{program, equation, &source,
                        weight_axes.empty() ? 0 : execution_.mesh.axis_index(replica, weight_axes), &rows, &weight,
                        transpose_b};
  const std::shared_ptr<const Outcome> outcome =
      rendezvous_.arrive(local, request, [this](std::span<const Request* const> requests) { return complete(requests); },
                         what);
  return outcome->results[local];
}

}  // namespace weft::detail
