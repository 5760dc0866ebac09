#include "core/error_kind.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "weft/error.hpp"

namespace weft {

ErrorRecord current_error() {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    return {ErrorKind::invalid_argument, e.what()};
  } catch (const MismatchError& e) {
    return {ErrorKind::mismatch, e.what()};
  } catch (const TimeoutError& e) {
    return {ErrorKind::timeout, e.what()};
  } catch (const AbortedError& e) {
    return {ErrorKind::aborted, e.what()};
  } catch (const PeerLostError& e) {
    return {ErrorKind::peer_lost, e.what()};
  } catch (const OutOfMemoryError& e) {
    return {ErrorKind::out_of_memory, e.what()};
  } catch (const Error& e) {
    return {ErrorKind::error, e.what()};
  } catch (const std::exception& e) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
    std::string type = status == 0 && demangled ? demangled : typeid(e).name();
    std::free(demangled);
    return {ErrorKind::foreign, type + ": " + e.what()};
  } catch (...) {
    return {ErrorKind::foreign, "an exception that is not a std::exception"};
  }
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::invalid_argument: throw InvalidArgument(message);
    case ErrorKind::mismatch: throw MismatchError(message);
    case ErrorKind::timeout: throw TimeoutError(message);
    case ErrorKind::aborted: throw AbortedError(message);
    case ErrorKind::peer_lost: throw PeerLostError(message);
    case ErrorKind::out_of_memory: throw OutOfMemoryError(message);
    case ErrorKind::error:
    case ErrorKind::foreign: throw Error(message);
  }
  throw Error(message);
}

}  // namespace weft
