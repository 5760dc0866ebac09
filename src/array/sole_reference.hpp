// Whether a reference to a buffer is its only one, so that writing into the buffer in place cannot be seen
// by anyone else: Array::mutable_bytes's copy-on-write and the fused loops' reuse of dying inputs
// (src/program/fusion.cc) both ask it.
//
// Why not just `use_count() == 1`: that load is relaxed. Replicas on other threads may have read the buffer
// and then dropped their references (a psum result or a broadcast input is one buffer for all replicas); the
// drops are release operations on the count, but a relaxed load acquires nothing, so our writes would not be
// ordered after their reads (a data race by the C++ rules, and ThreadSanitizer reports it). Copying the
// reference is an acquire-release read-modify-write of the same count, which synchronises with every
// earlier drop; once we see ourselves alone nobody can gain a new reference (weft keeps no weak_ptr to
// buffers), so the answer stays true.
#pragma once
#include <memory>

namespace weft::detail {

template <class T>
bool sole_reference(const std::shared_ptr<T>& held) {
  if (!held || held.use_count() != 1) return false;  // the common case, without touching the count
  const std::shared_ptr<T> probe = held;             // the acquiring read-modify-write
  return probe.use_count() == 2;
}

}  // namespace weft::detail
