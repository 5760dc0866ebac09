// Case files: per-case detection of the kind, broken cases kept by name (case_file.hpp).
#include "case_file.hpp"

#include <cerrno>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "array_cases.hpp"
#include "collective_cases.hpp"

namespace conformance {
namespace {

using json = nlohmann::json;

class BrokenCase final : public Case {
 public:
  BrokenCase(std::string name, std::string reason) : Case(std::move(name)), reason_(std::move(reason)) {}
  int devices() const override { return 0; }
  std::optional<std::string> run(weft::Runtime*) const override { return reason_; }
  std::string describe() const override { return "unparsed"; }

 private:
  std::string reason_;
};

// The fields decide, not the file: "mesh" marks a collective case, "inputs" an array-op case.
std::unique_ptr<Case> parse_case(const json& j) {
  if (!j.is_object()) throw std::runtime_error("a case is a JSON object, not " + j.dump());
  const bool collective = j.contains("mesh");
  const bool array_op = j.contains("inputs");
  if (collective && array_op)
    throw std::runtime_error("has both \"mesh\" (a collective case) and \"inputs\" (an array-op case)");
  if (collective) return parse_collective_case(j);
  if (array_op) return parse_array_case(j);
  throw std::runtime_error("has neither \"mesh\" (a collective case) nor \"inputs\" (an array-op case)");
}

}  // namespace

std::unique_ptr<Case> broken_case(std::string name, const std::string& reason) {
  return std::make_unique<BrokenCase>(std::move(name), "bad case: " + reason);
}

std::vector<std::unique_ptr<Case>> load_case_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error("cannot read " + path + ": it is a directory, not a case file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  return parse_case_text(text, path);
}

std::vector<std::unique_ptr<Case>> parse_case_text(std::string_view text, const std::string& path) {
  // Nesting is bounded: reading, copying and printing a JSON value recurse once per level, so "[[[[...", a
  // few hundred kilobytes deep, would overflow the stack. Case files nest a few levels (an array's rank).
  constexpr int kMaxDepth = 256;
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth)
      throw std::runtime_error(path + " nests JSON deeper than " + std::to_string(kMaxDepth) + " levels");
    return true;
  };
  json doc;
  try {
    doc = json::parse(text, bounded);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("cases") || !doc.at("cases").is_array())
    throw std::runtime_error(path + " has no \"cases\" list");

  std::vector<std::unique_ptr<Case>> cases;
  int index = 0;
  for (const json& j : doc.at("cases")) {
    try {
      cases.push_back(parse_case(j));
    } catch (const std::exception& e) {
      const bool named = j.is_object() && j.contains("name") && j.at("name").is_string();
      cases.push_back(broken_case(named ? j.at("name").get<std::string>() : path + " case #" + std::to_string(index),
                                  e.what()));
    }
    ++index;
  }
  return cases;
}

}  // namespace conformance
