// Memory accounting: who is charged for a buffer's bytes. Each device owns one account with a capacity
// (WEFT_DEVICE_MEMORY); host buffers have none.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace weft {

// Tunes glibc's malloc for weft's small array blocks (below its pool's 128 KiB): a fixed mmap threshold of
// 128 KiB and a trim threshold of 64 MiB, so that freed blocks stay warm on the heap. It is process-wide, so
// weft never does it by itself: a program that owns its process calls it once at start (weft's tools and
// examples do; WEFT_MALLOC_TUNING=1 asks for it at Runtime construction). Returns false, changing nothing,
// without glibc or when the environment tunes malloc itself (GLIBC_TUNABLES' glibc.malloc.*,
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_). docs/settings.md, "The process's malloc".
bool tune_process_malloc();

class MemoryAccount {
 public:
  // capacity 0 = unlimited.
  MemoryAccount(std::string owner, std::int64_t capacity) : owner_(std::move(owner)), capacity_(capacity) {}
  // Throws OutOfMemoryError naming the owner, the bytes asked and the bytes free.
  void charge(std::int64_t bytes);
  void release(std::int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::int64_t in_use() const { return used_.load(std::memory_order_relaxed); }
  std::int64_t capacity() const { return capacity_; }
  const std::string& owner() const { return owner_; }

 private:
  std::string owner_;
  std::int64_t capacity_;
  std::atomic<std::int64_t> used_{0};
};

// The account a Buffer is charged to when none is named: null (host memory) except on a device's worker
// thread, where it is that device's account, so arrays a replica computes count against its device.
std::shared_ptr<MemoryAccount>& default_memory_account();

// Sets default_memory_account() for the current thread for the lifetime of the scope.
class ScopedMemoryAccount {
 public:
  explicit ScopedMemoryAccount(std::shared_ptr<MemoryAccount> account)
      : previous_(std::exchange(default_memory_account(), std::move(account))) {}
  ~ScopedMemoryAccount() { default_memory_account() = std::move(previous_); }
  ScopedMemoryAccount(const ScopedMemoryAccount&) = delete;
  ScopedMemoryAccount& operator=(const ScopedMemoryAccount&) = delete;

 private:
  std::shared_ptr<MemoryAccount> previous_;
};

}  // namespace weft
