// The executor's shared products at run time (WEFT_SHARED_PRODUCTS; which products: program/
// shared_products.hpp). At such a product every local replica of the execution posts its rows and weight to
// one rendezvous (the collectives' kind: deadlines, abort, departure, transport/rendezvous.hpp); the last to
// arrive stacks the rows of the replicas that share a weight, runs one product over them with the GEMM
// widened to the cores whose replicas now wait (array/gemm_threads.hpp), and each replica takes a view of its
// rows of the result. Why: a data-parallel replica's 32-row products leave the GEMM kernels far from their
// speed; 256 rows reach it.
//
// The replicas of a traced pmap run the same program, so they reach the same product equations in the same
// order (PmapOptions::shared_products and SessionOptions::shared_products say the replicas run such programs);
// a replica at another equation, or one that returned, fails the round with a MismatchError or PeerLostError
// naming it; one that never comes (waiting in a collective for a partner that waits here, say) is named by
// the round's stall warning and TimeoutError, the collectives' deadlines (WEFT_COLLECTIVE_WARN / _TIMEOUT).
// The product's buffer is charged to the device of the replica that ran it; each replica's result is a view.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "transport/rendezvous.hpp"
#include "weft/array.hpp"

namespace weft::detail {

class Execution;

class ProductSharing {
 public:
  // `mode`: 1 = share, 2 = share and check that each group's weights are bitwise equal (a MismatchError if not:
  // the program's types promised they were).
  ProductSharing(Execution& execution, int mode);

  // Local replica `local`'s rows @ weight (weight transposed when `transpose_b`) for equation `equation` of
  // `program` (what the replicas must agree on; `source`, its traced source line or empty, outlives the call),
  // shared with the local replicas whose coordinates along `weight_axes` are its own. `what` describes the
  // product for stall reports.
  Array multiply(int local, const void* program, std::size_t equation, const std::string& source,
                 const std::vector<std::string>& weight_axes, const Array& rows, const Array& weight, bool transpose_b,
                 const transport::Describe& what);

  // As the communicator's: the first failure ends every pending and later round; a replica that returned is
  // named by rounds that need it.
  bool abort(int local, const std::string& cause) { return rendezvous_.abort(local, cause); }
  void depart(int local) { rendezvous_.depart(local); }

 private:
  struct Request {
    const void* program;
    std::size_t equation;
    const std::string* source;
    int group;  // the replica's coordinate along the weight's axes
    const Array* rows;
    const Array* weight;
    bool transpose_b;
  };
  struct Outcome {
    std::vector<Array> results;  // per local replica
  };
  std::shared_ptr<const Outcome> complete(std::span<const Request* const> requests) const;

  Execution& execution_;
  const int mode_;
  const int threads_;  // the GEMM's width for a shared product
  transport::Rendezvous<Request, Outcome> rendezvous_;
};

}  // namespace weft::detail
