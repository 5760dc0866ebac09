// Reads a case file: a JSON object whose "cases" list may hold collective cases (with a "mesh") and array-op
// cases (with "inputs") in any mix; the kind is decided per case from its fields.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "case.hpp"

namespace conformance {

// Throws (naming the file, and why: no such file, a directory, not JSON) when the file cannot be read or has
// no "cases" list. A case that cannot be parsed comes back as a broken case, by name where it has one, so
// the other cases still run.
std::vector<std::unique_ptr<Case>> load_case_file(const std::string& path);

// The same on a file's text (what load_case_file and the fuzz target, tests/fuzz/case_file_fuzz.cc, call);
// `name` stands for the file in messages.
std::vector<std::unique_ptr<Case>> parse_case_text(std::string_view text, const std::string& name);

}  // namespace conformance
