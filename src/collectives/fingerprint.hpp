// One fingerprint for every agreement between the processes of a job: before data moves, processes compare
// 64-bit fingerprints of what each is about to do (a collective request and its round; a variable read back to
// the host; a checkpoint's layout) and a difference becomes a MismatchError rather than a hang or a garbled
// result. One function (FNV-1a over the fields, each field's bytes in a fixed order) so that no two call sites
// hash alike things differently.
#pragma once
#include <cstdint>
#include <string_view>

#include "collectives/request.hpp"

namespace weft::collectives {

class Fingerprint {
 public:
  Fingerprint& add(std::uint64_t value);        // its 8 bytes, least significant first
  Fingerprint& add(std::string_view text);      // its bytes, then its length (so "ab"+"c" differs from "a"+"bc")
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 1469598103934665603ull;  // FNV-1a's offset basis
};

// A collective request at round `round` of its execution: every field the agreement check of one process
// compares (kind, op name, reduction, dtype, shape, groups, axes, tiling, permutation), and the round, so that
// processes that fell out of step (one issued fewer collectives) disagree too.
std::uint64_t fingerprint(const Request& request, std::uint64_t round);

}  // namespace weft::collectives
