// The block pool behind weft::Buffer: huge-page backed large blocks and reuse of freed ones (why: see
// buffer_pool.hpp).
#include "array/buffer_pool.hpp"

#include "weft/memory.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#endif

namespace weft::detail {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
// From 128 KiB: with malloc's heap serving 128 KiB-1 MiB (the pool started at 1 MiB until 2026-12-02),
// all_to_all on 8 devices took 320 us at 128 KiB and 1.1-3.3 ms at 768 KiB a call, its copies stalled in page
// faults, against 29 us and 98 us from the pool; reduce_scatter of 2 MiB (256 KiB results) 360 -> 179 us.
// Pooling from 64 KiB made training slower (58.9k against 60.9k samples/s; 128 KiB: 62.2k).
constexpr std::size_t kMinPooled = std::size_t{128} << 10;

std::size_t physical_memory() {
#if defined(__linux__)
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return std::size_t{4} << 30;
}

// Large blocks take the huge-page alignment so that the kernel can back them with 2 MiB pages throughout.
std::align_val_t alignment_for(std::size_t bytes) {
  return std::align_val_t{bytes >= kHugePage ? kHugePage : kAlignment};
}

std::byte* allocate(std::size_t bytes) {
  auto* p = static_cast<std::byte*>(::operator new(bytes, alignment_for(bytes)));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: where THP is "never" (or the range is too small) this changes nothing.
  if (bytes >= kHugePage) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace
}  // namespace weft::detail

namespace weft {

// Blocks below kMinPooled come from malloc. glibc's defaults hand each one over 128 KiB back to the system
// when freed (an mmap'ed chunk, or the top of a worker thread's heap trimmed away), so the next one faults
// in every page again: a loop of 8-replica all_gathers of 64 KiB (512 KiB results) spent most of its time in
// page faults (89 us a call against 9 us; all_to_all 64 KiB 142-238 us against 16 us). The tuning serves them
// from the heap and keeps up to 64 MiB of free heap with the process. It is process-wide (it fixes the mmap
// threshold that glibc would otherwise raise for every other library's large blocks too: a one-thread
// PyTorch step in the same process went from 5.8 to 19.8 ms), so weft never makes it on its own: weft's
// executables call this, an embedder may (issue 45, item 15). A user who tunes malloc (GLIBC_TUNABLES,
// MALLOC_*_) keeps their settings.
bool tune_process_malloc() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return false;
  static std::once_flag once;
  std::call_once(once, [] {
    ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(detail::kMinPooled));
    ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
  });
  return true;
#else
  return false;
#endif
}

}  // namespace weft

namespace weft::detail {
namespace {

class BlockPool {
 public:
  static BlockPool& instance() {
    static BlockPool* pool = new BlockPool();  // never destroyed: buffers may die during static destruction
    return *pool;
  }
  std::byte* acquire(std::size_t bytes, const void* owner) {
    if (bytes >= kMinPooled) {
      std::lock_guard lock(mutex_);
      auto [first, last] = free_.equal_range(bytes);
      if (first != last) {
        // Equal keys keep their insertion order: walk back from the newest, taking the owner's own block if
        // one of the last few is, else the newest.
        auto chosen = std::prev(last);
        auto it = chosen;
        for (int looked = 0; looked < kOwnerSearch; ++looked) {
          if (it->second.owner == owner) {
            chosen = it;
            break;
          }
          if (it == first) break;
          --it;
        }
        std::byte* p = chosen->second.block;
        free_.erase(chosen);
        cached_ -= bytes;
        return p;
      }
    }
    return allocate(bytes);
  }
  void release(std::byte* p, std::size_t bytes, const void* owner) {
    if (bytes >= kMinPooled) {
      std::lock_guard lock(mutex_);
      if (cached_ + bytes <= capacity_) {
        free_.emplace(bytes, Free{p, owner});
        cached_ += bytes;
        return;
      }
    }
    ::operator delete(p, alignment_for(bytes));
  }
  std::size_t capacity() const { return capacity_; }
  std::size_t cached() {
    std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  const std::size_t capacity_ =
      std::clamp(physical_memory() / 16, std::size_t{256} << 20, std::size_t{2} << 30);
  struct Free {
    std::byte* block;
    const void* owner;  // who gave it back (acquire_block's `owner`)
  };
  // How many free blocks of one size acquire looks through for the owner's own: a device count's worth, so
  // that the search stays short when many are cached.
  static constexpr int kOwnerSearch = 64;
  std::mutex mutex_;
  std::multimap<std::size_t, Free> free_;  // by size; equal sizes oldest first
  std::size_t cached_ = 0;
};

}  // namespace

std::byte* acquire_block(std::size_t bytes, const void* owner) { return BlockPool::instance().acquire(bytes, owner); }
void release_block(std::byte* block, std::size_t bytes, const void* owner) {
  BlockPool::instance().release(block, bytes, owner);
}
std::size_t block_pool_capacity() { return BlockPool::instance().capacity(); }
std::size_t block_pool_cached() { return BlockPool::instance().cached(); }

}  // namespace weft::detail
