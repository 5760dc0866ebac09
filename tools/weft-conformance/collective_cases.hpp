// Collective cases (docs/conformance.md, e.g. tests/data/jax-cases.json, computed by JAX): one op over a
// mesh of replicas, run as a pmap on the shared runtime; replica d runs on its slice of "input" and must
// produce its slice of "expected".
#pragma once
#include <memory>

#include <nlohmann/json.hpp>

#include "case.hpp"

namespace conformance {

// Parses a case with "mesh", "op", "params", "input", "expected", "exact"; throws std::runtime_error with
// the rule broken (the caller turns it into a broken case).
std::unique_ptr<Case> parse_collective_case(const nlohmann::json& j);

// How collective cases run: as a pmap of the replica function (the default), or traced, as pmap(jit(f))
// (weft/jit.hpp): the function traced once into a program every replica runs. Set before running cases.
void set_traced_collectives(bool traced);

}  // namespace conformance
