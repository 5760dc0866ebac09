#include "weft/memory.hpp"

namespace weft {

std::shared_ptr<MemoryAccount>& default_memory_account() {
  thread_local std::shared_ptr<MemoryAccount> account;
  return account;
}

}  // namespace weft
