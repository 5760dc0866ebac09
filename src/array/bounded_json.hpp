// JSON from untrusted files (the safetensors header, the session layout inside it), parsed within bounds.
// Internal: never included by a public header.
//
// nlohmann::json::parse builds a tree of whatever it is given: 50 MB of nested '[' took 2.7 GB before it ended
// in std::bad_alloc, naming nothing. Here the text's length is checked first, and a parser callback (which
// nlohmann calls at every value with its depth) stops the parse at the first value past the depth or count
// bound, and at a key an object already has (JSON leaves duplicates undefined; nlohmann keeps the last one,
// silently). Every refusal names which bound the input broke.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace weft::io {

struct JsonBounds {
  std::size_t max_bytes = std::size_t{100} << 20;  // the safetensors library's own header limit
  int max_depth = 64;                              // a checkpoint's header nests 3 levels, its layout 5
  std::size_t max_values = std::size_t{1} << 20;   // values, arrays and objects: ~10 per tensor in a header
};

// Parses `text` (named `what` in messages: "the header") within `bounds`. A refusal calls `fail` with the
// message ("the header nests deeper than 64 levels (the bound on a header's JSON)", "the header: key \"w\"
// appears twice in one object", "the header is not valid JSON: ..." with raw bytes escaped); `fail` must throw.
nlohmann::json parse_bounded_json(std::string_view text, const std::string& what,
                                  const std::function<void(const std::string&)>& fail, const JsonBounds& bounds = {});

}  // namespace weft::io
