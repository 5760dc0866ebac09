// A Session's state on disk: one .safetensors file (the Hugging Face format: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes) that other
// tools (safetensors, numpy) read without weft.
//
//   save_checkpoint(session, "step-100.safetensors", {{"step", "100"}});
//   std::map<std::string, std::string> meta = load_checkpoint(session, "step-100.safetensors");
//
// What the file holds:
//  - one tensor per variable, named after it ("name#1", ... when names repeat): its value as
//    weights_to_host reads it, one row per replica group (shape_on_host): the replicas of a group hold the
//    same value (PopXL's model). Replicas made to diverge inside a group are saved as the group's first
//    replica, as get_tensor_data(one_per_group) sees them. A replica-sharded variable is saved whole (its
//    per-group tensor, not its shards; the zero padding of the last shard is not stored);
//  - one tensor "remote_buffer_<id>/entry_<e>" of shape (replicas, *entry shape) per remote buffer entry
//    that no variable is bound to: every replica's copy (gathered from the other instances when there are
//    several);
//  - in "__metadata__": the user's keys, and under "weft" the session's layout as a JSON string: the replica
//    count; per variable its name, tensor, shape, dtype, grouping (stride, group size), retrieval mode,
//    placement (on the devices, or remote buffer id + entry) and shard_over; per remote buffer its entry
//    type, entry count and sharding.
// A checkpoint is restored only into a session of the same layout; the error names the file and the first
// difference ("load_checkpoint: 'ck.safetensors': variable 2 'w1' has grouping (stride 2, size 4) in the
// checkpoint but (stride 1, size 8) in the session"). A load checks the whole file first and then changes the
// session, or changes nothing. The file is untrusted input (docs/reliability.md, "Files"): the header's JSON
// is parsed within bounds (100 MiB, 64 levels, 2^20 values) and may not repeat a key; the tensors'
// data_offsets must cover the data exactly (contiguous, no overlap, no trailing bytes); the layout must name
// each tensor once and every tensor of the file; only a regular file is opened (a FIFO is refused at once).
//
// Written atomically: a temporary file in the same directory (an unpredictable name, created
// O_EXCL|O_NOFOLLOW), flushed to disk, then renamed over the target, so a crash mid-write never leaves a
// truncated checkpoint under the target's name (a killed writer may leave its temporary file,
// ".<name>.tmp-<16 hex digits>", behind). A file that is replaced keeps its mode (and owner where allowed).
#pragma once
#include <map>
#include <string>

#include "weft/session.hpp"

namespace weft {

// Reads every variable back from the devices and writes the file with `metadata` (user strings: step,
// epoch, seed, ...; the key "weft" is reserved). In a multi-instance session every instance calls it (it is
// collective), instance 0 writes the file with its own `metadata`, and every instance returns once the file
// is complete; when instance 0 cannot write it, instance 0 throws why and the others throw
// "save_checkpoint: instance 0 could not write '<path>'".
void save_checkpoint(Session& session, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});
// Restores a checkpoint written by save_checkpoint into a session whose variables and buffers were created
// the same way (same order, names, shapes, dtypes, groupings, sharding); the values go to the devices when
// the weights are already there. Returns the user metadata. Not collective: each instance reads the file
// (a checkpoint saved by N instances loads into any process layout of the same global replica count).
// A truncated or corrupt file is an InvalidArgument "load_checkpoint: '<path>': <what is wrong>".
std::map<std::string, std::string> load_checkpoint(Session& session, const std::string& path);

}  // namespace weft
