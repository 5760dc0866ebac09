// Arrays as case files write them, {"dtype": "float32", "shape": [2, 3], "data": [...]}, read into weft
// arrays. Both case kinds (collective and array-op) use this one reader so they accept the same spellings.
#pragma once
#include <string>

#include <nlohmann/json.hpp>
#include <weft/array.hpp>

namespace conformance {

using json = nlohmann::json;

// Reads `spec`; `data` is row-major, flat or nested. Floating values may be "nan", "inf", "-inf" (JSON has
// no spelling for them) or null (NaN); integer dtypes take integers within the dtype's range only, bool takes
// true/false or 0/1, so a typo in a hand-written file cannot be rounded into a plausible value. Throws
// std::runtime_error starting with `what` (e.g. "inputs[1]").
weft::Array parse_array(const json& spec, const std::string& what);

// An integer field in [lo, hi]: not a float, a bool or a value that would wrap in an int (nlohmann's
// get<int>() truncates 1.5 and wraps 4294967298 to 2, and converting 1e10 is undefined). Throws
// std::runtime_error "<what> must be an integer in [lo, hi], not <value>".
int parse_int(const json& value, const std::string& what, int lo, int hi);

}  // namespace conformance
