// Errors at the API are exceptions, so `x / r.psum(x, "i")` composes. Every message says who (replica,
// device), what (op) and which rule was broken.
#pragma once
#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Bad arguments: shapes, axes, groups, options. Raised before any data moves.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
// Replicas disagree about a collective (op, dtype, shape, group, ...). Names both sides.
class MismatchError : public Error {
 public:
  using Error::Error;
};
// A blocking wait passed its deadline. Names who arrived and who is missing.
class TimeoutError : public Error {
 public:
  using Error::Error;
};
// This replica stopped because another one failed; the message names the root cause.
class AbortedError : public Error {
 public:
  using Error::Error;
};
// A peer (replica that returned early, or a lost process) can no longer take part.
class PeerLostError : public Error {
 public:
  using Error::Error;
};
// A device has not enough memory for an allocation.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace weft
