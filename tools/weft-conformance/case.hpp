// What the driver (main.cc) knows of a case, whatever its kind: its name, how many devices it needs, how to
// run it and say whether it passed. Collective cases (collective_cases.hpp) and array-op cases
// (array_cases.hpp) implement it; case_file.hpp reads either kind from a file.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <weft/runtime.hpp>

namespace conformance {

class Case {
 public:
  explicit Case(std::string name) : name_(std::move(name)) {}
  virtual ~Case() = default;
  const std::string& name() const { return name_; }
  // Devices the case needs in the shared runtime; 0 = it runs on the host and needs no runtime.
  virtual int devices() const = 0;
  // Runs the case and compares its result: nothing when it passed, else why not. `runtime` is null when no
  // case of the run needs devices. Errors of the code under test propagate; the driver reports them.
  virtual std::optional<std::string> run(weft::Runtime* runtime) const = 0;
  // What a PASS line shows after the name: "psum on {i: 8}", "matmul of float32 (4, 7), float32 (7, 2)".
  virtual std::string describe() const = 0;

 private:
  std::string name_;
};

// A case that could not be parsed: it fails with `reason` (prefixed "bad case: ") without running.
std::unique_ptr<Case> broken_case(std::string name, const std::string& reason);

}  // namespace conformance
