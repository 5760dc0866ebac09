// Where array storage comes from. Collectives allocate a result of the same size every call, and on the
// machines we run on a first touch of fresh memory is the dominant cost of a large one: a 512 MiB all_gather
// output is 131K page faults of 4 KiB (~1 s of kernel time on a VM whose faults cost ~8 us), against ~25 ms to
// copy the data. Two remedies, both here:
//  - large blocks (>= 2 MiB) are 2 MiB aligned and asked to be backed by transparent huge pages (Linux
//    madvise(MADV_HUGEPAGE); harmless where THP is off), so a first touch faults once per 2 MiB, not 4 KiB;
//  - freed blocks of >= 128 KiB are kept for the next allocation of the same size, up to a cap that scales
//    with the machine's memory (1/16 of it, between 256 MiB and 2 GiB), so a loop of 64 MiB all_to_alls
//    (512 MiB of outputs per call) reuses warm pages instead of faulting new ones;
//  - a freed block remembers its owner (the memory account of the device it served), and the pool hands an
//    owner back its own blocks first, newest first: a device's next result of the same size then lands in
//    memory its own worker thread wrote last, in that core's caches. Handed to the other core, every store
//    first fetches the line from here: an all_to_all-shaped copy (2 threads, 4 x 1 MiB outputs each) took
//    88 us when each thread kept its outputs and 130-146 us when the outputs changed threads every call;
//  - smaller blocks come from malloc, which a program that owns its process may tune to serve them from the
//    heap and keep freed heap memory (weft::tune_process_malloc, weft/memory.hpp); weft alone leaves the
//    process's malloc as it found it.
// Device memory accounting is separate (MemoryAccount charges live buffers only).
#pragma once
#include <cstddef>

namespace weft::detail {

// A block of at least `bytes` (a multiple of 64), 64-byte aligned (2 MiB aligned when large), preferably
// one `owner` gave back (any identity: buffers pass their memory account). Throws std::bad_alloc when the
// system refuses.
std::byte* acquire_block(std::size_t bytes, const void* owner = nullptr);
// Gives back a block from acquire_block of the same `bytes`; `owner` as there.
void release_block(std::byte* block, std::size_t bytes, const void* owner = nullptr);
// The most bytes the pool keeps for reuse, and the bytes it keeps now (for tests and reports).
std::size_t block_pool_capacity();
std::size_t block_pool_cached();

}  // namespace weft::detail
