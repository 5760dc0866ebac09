// Memory accounting: who is charged for a buffer's bytes. Each device owns one account with a capacity
// (WEFT_DEVICE_MEMORY); host buffers have none.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace weft {

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

}  // namespace weft
