// Bounded JSON parsing for untrusted files (bounded_json.hpp says why and what the bounds are).
#include "array/bounded_json.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <vector>

#include "array/file_io.hpp"

namespace weft::io {
namespace {

using json = nlohmann::json;

// Thrown from inside the parser callback (nlohmann lets it through) and caught below.
struct Refused {
  std::string message;
};

}  // namespace

json parse_bounded_json(std::string_view text, const std::string& what, const std::function<void(const std::string&)>& fail,
                        const JsonBounds& bounds) {
  const std::string rule = " (the bound on a header's JSON)";
  if (text.size() > bounds.max_bytes)
    fail(what + " is " + std::to_string(text.size()) + " bytes, over the " + std::to_string(bounds.max_bytes) + " bytes" + rule);
  std::size_t values = 0;
  // The keys of every open object, innermost last; an open array holds nullopt.
  std::vector<std::optional<std::set<std::string>>> open;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= bounds.max_depth) throw Refused{what + " nests deeper than " + std::to_string(bounds.max_depth) + " levels" + rule};
        if (event == json::parse_event_t::object_start) open.emplace_back(std::set<std::string>{});
        else open.emplace_back(std::nullopt);
        break;
      case json::parse_event_t::key:
        if (!open.empty() && open.back() && !open.back()->insert(parsed.get<std::string>()).second)
          throw Refused{what + ": key \"" + printable(parsed.get<std::string>(), 200) + "\" appears twice in one object"};
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        [[fallthrough]];
      case json::parse_event_t::value:
        if (++values > bounds.max_values)
          throw Refused{what + " has more than " + std::to_string(bounds.max_values) + " JSON values" + rule};
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const Refused& r) {
    fail(r.message);
  } catch (const json::exception& e) {
    // nlohmann quotes the bytes it last read, raw: escaped, a message stays printable ASCII.
    fail(what + " is not valid JSON: " + printable(e.what(), 400));
  }
  fail(what + " could not be parsed");
  return {};
}

}  // namespace weft::io
