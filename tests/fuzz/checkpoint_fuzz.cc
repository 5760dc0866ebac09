// Fuzz target: the .safetensors checkpoint reader (weft/checkpoint.hpp; src/array/safetensors.cc, the file
// format, and src/runtime/checkpoint.cc, the session layout), loading arbitrary bytes into a live session
// that holds one of everything a checkpoint stores (tests/checkpoint/model.hpp: plain, grouped, bfloat16 and
// bool variables, remote and replica-sharded ones, a multi-entry remote buffer). A truncated or corrupt file,
// or one of another layout, must be an InvalidArgument and leave the session as it was; nothing may crash,
// overflow or allocate beyond the file.
//
// Seed: WEFT_FUZZ_WRITE_CHECKPOINT=PATH makes the target save the model's checkpoint to PATH first (how
// tests/data/fuzz/checkpoint/seed-model.safetensors was made).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "checkpoint/model.hpp"
#include "support/temp_dir.hpp"
#include "weft/checkpoint.hpp"
#include "weft/error.hpp"
#include "weft/weft.hpp"

namespace {

constexpr int kReplicas = weft::testing::CheckpointModel::kReplicas;

weft::RuntimeOptions runtime_options() {
  weft::RuntimeOptions o;
  o.device_count = kReplicas;
  return o;
}

struct World {
  weft::Runtime runtime{runtime_options()};
  weft::Session session{weft::SessionOptions{kReplicas, 1, &runtime, "fuzz"}};
  weft::testing::CheckpointModel model{session};
  weft::testing::TempDir dir;
  std::string path = dir.file("fuzz.safetensors");
};

World& world() {
  static World* w = [] {
    auto* made = new World;  // never destroyed: the runtime's threads live until the process ends
    made->session.weights_from_host();  // a load then also goes to the devices
    if (const char* seed = std::getenv("WEFT_FUZZ_WRITE_CHECKPOINT")) weft::save_checkpoint(made->session, seed, {{"step", "7"}});
    return made;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  World& w = world();
  std::ofstream(w.path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                   static_cast<std::streamsize>(size));
  try {
    (void)weft::load_checkpoint(w.session, w.path);
  } catch (const weft::InvalidArgument&) {
  }
  return 0;
}
