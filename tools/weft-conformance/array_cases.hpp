// Array-op cases (docs/conformance.md, e.g. tests/data/array-cases.json, computed by numpy): one op of
// weft's array API applied on the host to the case's "inputs", its result compared with "expected" under
// the case's own tolerance ("exact", or "rtol" and "atol").
#pragma once
#include <memory>

#include <nlohmann/json.hpp>

#include "case.hpp"

namespace conformance {

// Parses a case with "name", "op", "params", "inputs", "expected", "exact", "rtol", "atol"; throws
// std::runtime_error with the rule broken (the caller turns it into a broken case).
std::unique_ptr<Case> parse_array_case(const nlohmann::json& j);

}  // namespace conformance
