// A Session's state on disk: one .safetensors file (the Hugging Face format: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes) holding every
// variable and every remote buffer entry, with the session's layout in the header's "__metadata__": the
// replica count, and for each variable its name, shape, dtype, grouping (stride, group size), retrieval mode,
// sharding and remote buffer entry. A checkpoint is restored only into a session of the same layout; the
// error names the first difference. Other tools read the tensors (safetensors, numpy) without weft.
//
//   save_checkpoint(session, "step-100.safetensors", {{"step", "100"}});
//   std::map<std::string, std::string> meta = load_checkpoint(session, "step-100.safetensors");
//
// Written atomically: a temporary file in the same directory, flushed to disk, then renamed over the target,
// so a crash mid-write never leaves a truncated checkpoint under the target's name.
#pragma once
#include <map>
#include <string>

#include "weft/session.hpp"

namespace weft {

// Reads every variable back from the devices and writes the file with `metadata` (user strings: step,
// epoch, seed, ...). In a multi-instance session every instance calls it (it is collective) and instance 0
// writes the file.
void save_checkpoint(Session& session, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});
// Restores a checkpoint written by save_checkpoint into a session whose variables and buffers were created
// the same way (same order, names, shapes, dtypes, groupings, sharding); the values go to the devices when
// the weights are already there. Returns the user metadata. Every instance reads the file.
std::map<std::string, std::string> load_checkpoint(Session& session, const std::string& path);

}  // namespace weft
