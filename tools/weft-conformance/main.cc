// weft-conformance: runs conformance cases through weft's public API and compares every result with the
// expected output (docs/conformance.md). Two kinds of case, in any mix of files: collective cases over a
// mesh (e.g. tests/data/jax-cases.json, computed by JAX; collective_cases.cc) and host array-op cases
// (e.g. tests/data/array-cases.json, computed by numpy; array_cases.cc).
//
//   weft-conformance [--verbose] [--filter SUBSTR] FILE...
//
// This file is the driver: options, reading the files, one shared runtime, the report and the exit status
// (0: every case passed; 1: some case failed, a malformed case included; 2: a file could not be read, or the
// run could not start, e.g. an invalid WEFT_* setting: "weft-conformance: error: <why>").
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <weft/weft.hpp>

#include "case.hpp"
#include "case_file.hpp"
#include "collective_cases.hpp"

namespace {

// Exception texts may span lines (one per replica); a report line must stay one line.
std::string one_line(const std::string& text) {
  std::string out;
  bool at_line_start = false;
  for (char c : text) {
    if (c == '\n') {
      out += "; ";
      at_line_start = true;
    } else if (!(at_line_start && (c == ' ' || c == '\t'))) {
      out += c;
      at_line_start = false;
    }
  }
  return out;
}

// Devices one process can hold (RuntimeOptions::device_count's limit, src/runtime/runtime_options.cc): the runtime
// is sized for the largest mesh up to this; a case with a larger mesh fails as a bad case on its own.
constexpr int kMaxLocalDevices = 4096;

int run(int argc, char** argv);

}  // namespace

// Every error the run can raise ends here as one clear line and exit status 2, never as std::terminate.
int main(int argc, char** argv) {
  weft::tune_process_malloc();  // the tool owns its process (weft/memory.hpp)
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "weft-conformance: error: " << one_line(e.what()) << "\n";
  } catch (...) {
    std::cout.flush();
    std::cerr << "weft-conformance: error: unknown exception\n";
  }
  return 2;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"Runs conformance cases (collective cases such as tests/data/jax-cases.json, array-op cases such "
               "as tests/data/array-cases.json) through weft and compares each result with the expected output. "
               "See docs/conformance.md."};
  std::vector<std::string> paths;
  bool verbose = false;
  std::string filter;
  double collective_timeout = -1;
  app.add_option("FILE", paths, "case files (JSON)")->required();
  app.add_flag("-v,--verbose", verbose, "print every case, not only the failing ones");
  app.add_option("-f,--filter", filter, "run only the cases whose name contains SUBSTR")->option_text("SUBSTR");
  bool traced = false;
  app.add_flag("--traced", traced,
               "run collective cases as pmap(jit(f)): the replica function traced once into a program that "
               "every replica runs (weft/jit.hpp), instead of calling it on every replica");
  app.add_option("--collective-timeout", collective_timeout,
                 "seconds a collective may wait before failing its case (default: the runtime's)");
  CLI11_PARSE(app, argc, argv);
  conformance::set_traced_collectives(traced);

  // Parse every file first: the runtime needs the largest mesh.
  bool unreadable = false;
  std::vector<std::unique_ptr<conformance::Case>> cases;
  for (const std::string& path : paths) {
    try {
      for (auto& c : conformance::load_case_file(path))
        if (c->name().find(filter) != std::string::npos) cases.push_back(std::move(c));
    } catch (const std::exception& e) {
      std::cerr << "weft-conformance: error: " << e.what() << "\n";
      unreadable = true;
    }
  }

  // A runtime only when some case needs devices (host array-op cases do not). In one process: enough
  // devices for the largest mesh. Under weftrun each instance has WEFT_DEVICE_COUNT devices and the meshes
  // are laid over the global ones.
  int devices = 0;
  for (const auto& c : cases)
    if (c->devices() <= kMaxLocalDevices) devices = std::max(devices, c->devices());
  std::unique_ptr<weft::Runtime> runtime;
  if (devices > 0) {
    weft::RuntimeOptions options;
    options.device_count = std::getenv("WEFT_DEVICE_COUNT") ? 0 : std::max(devices, 8);
    if (collective_timeout >= 0) options.collective_timeout_s = collective_timeout;
    runtime = std::make_unique<weft::Runtime>(options);
  }

  int passed = 0;
  int failed = 0;
  for (const auto& c : cases) {
    std::optional<std::string> failure;
    try {
      failure = c->run(runtime.get());
    } catch (const std::exception& e) {
      failure = "error: " + one_line(e.what());
    }
    if (failure) {
      std::cout << "FAIL " << c->name() << ": " << *failure << "\n";
      ++failed;
    } else {
      if (verbose) std::cout << "PASS " << c->name() << " (" << c->describe() << ")\n";
      ++passed;
    }
    std::cout.flush();
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  if (unreadable) return 2;
  return failed > 0 ? 1 : 0;
}

}  // namespace
