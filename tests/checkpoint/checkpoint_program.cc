// The multi-instance checkpoint test (tests/checkpoint/two_instances.cmake runs it):
//   checkpoint_program save DIR     under weftrun, 2 instances x 4 replicas: the model of model.hpp, steps
//                                   1-3, save DIR/step-3.safetensors, steps 4-5, save DIR/step-5.safetensors
//   checkpoint_program refused DIR  under weftrun, 2 instances: a save instance 0 cannot write (no such
//                                   directory) fails on every instance, each with its own message, and the
//                                   job goes on: a save after it succeeds
//   checkpoint_program verify DIR   one process of 8 replicas: (1) the same steps from scratch save, byte for
//                                   byte, the same step-3 file; (2) a session restored from the 2-instance
//                                   step-3 file and run for steps 4-5 saves the same step-5 file
// Checkpoints are deterministic (same layout, same values, same metadata: same bytes), so equal files mean
// equal values everywhere, unbound remote entries of the other instance included.
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

#include "model.hpp"
#include "weft/checkpoint.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

using weft::testing::CheckpointModel;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int compare(const std::string& a, const std::string& b) {
  const std::string x = read_file(a), y = read_file(b);
  if (x == y) {
    std::cout << "identical: " << a << " and " << b << " (" << x.size() << " bytes)\n";
    return 0;
  }
  std::size_t k = 0;
  while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
  std::cout << "DIFFERENT: " << a << " (" << x.size() << " bytes) and " << b << " (" << y.size()
            << " bytes) first differ at byte " << k << "\n";
  return 1;
}

int save(const std::string& dir) {
  weft::Runtime rt;
  weft::Session s({.runtime = &rt});
  if (s.replication_factor() != CheckpointModel::kReplicas || rt.process_count() != 2) {
    std::cerr << "checkpoint_program save: needs 2 instances of 4 replicas (weftrun --num-instances 2 --num-replicas 8)\n";
    return 2;
  }
  const CheckpointModel m(s);
  m.run_steps(s, 1, 3);
  weft::save_checkpoint(s, dir + "/step-3.safetensors", {{"step", "3"}});
  m.run_steps(s, 4, 5);
  weft::save_checkpoint(s, dir + "/step-5.safetensors", {{"step", "5"}});
  std::cout << "instance " << rt.process_index() << " saved\n";
  return 0;
}

int refused(const std::string& dir) {
  weft::Runtime rt;
  weft::Session s({.runtime = &rt});
  const CheckpointModel m(s);
  m.run_steps(s, 1, 1);
  const std::string bad = dir + "/no-such-dir/x.safetensors";
  const std::string expected = rt.process_index() == 0
                                   ? "save_checkpoint: cannot create a temporary file in '" + dir + "/no-such-dir'"
                                   : "save_checkpoint: instance 0 could not write '" + bad + "' (its error says why)";
  std::string got = "nothing";
  try {
    weft::save_checkpoint(s, bad);
  } catch (const std::exception& e) {
    got = e.what();
  }
  if (got.find(expected) == std::string::npos) {
    std::cout << "instance " << rt.process_index() << ": WRONG ERROR: " << got << "\n  expected: " << expected << "\n";
    return 1;
  }
  m.run_steps(s, 2, 2);
  weft::save_checkpoint(s, dir + "/after-refusal.safetensors");
  std::cout << "instance " << rt.process_index() << ": refused as expected, then saved\n";
  return 0;
}

int verify(const std::string& dir) {
  weft::Runtime rt({.device_count = CheckpointModel::kReplicas});
  int failures = 0;
  {
    weft::Session s({.runtime = &rt});
    const CheckpointModel m(s);
    m.run_steps(s, 1, 3);
    weft::save_checkpoint(s, dir + "/single-3.safetensors", {{"step", "3"}});
  }
  failures += compare(dir + "/step-3.safetensors", dir + "/single-3.safetensors");
  {
    weft::Session s({.runtime = &rt});
    const CheckpointModel m(s);
    const auto meta = weft::load_checkpoint(s, dir + "/step-3.safetensors");
    if (meta != std::map<std::string, std::string>{{"step", "3"}}) {
      std::cout << "DIFFERENT: the metadata read back\n";
      ++failures;
    }
    m.run_steps(s, 4, 5);
    weft::save_checkpoint(s, dir + "/restored-5.safetensors", {{"step", "5"}});
  }
  failures += compare(dir + "/step-5.safetensors", dir + "/restored-5.safetensors");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: checkpoint_program save|refused|verify DIR\n";
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "save") return save(argv[2]);
    if (mode == "verify") return verify(argv[2]);
    if (mode == "refused") return refused(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_program: error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "checkpoint_program: unknown mode " << mode << "\n";
  return 2;
}
