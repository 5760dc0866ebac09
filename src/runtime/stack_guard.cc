// Stack overflows of replicas as one line naming the replica (stack_guard.hpp). The handler runs on a
// signal stack with the faulting stack exhausted: it only reads this thread's plain thread-locals (touched
// before, so none is allocated in the handler) and writes with write(2).
#include "runtime/stack_guard.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/log.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WEFT_STACK_GUARD 0
#else
#define WEFT_STACK_GUARD 1
#endif

namespace weft::detail {
#if WEFT_STACK_GUARD
namespace {

// A frame larger than a page can step over the guard page into whatever lies below: faults this far below the
// guard still count as the overflow.
constexpr std::uintptr_t kBelowGuard = 64 * 1024;
// The handler's frame is small, but the kernel's signal frame holds the CPU's vector state (AMX: ~11 KiB).
constexpr std::size_t kSignalStack = 32 * 1024;
constexpr unsigned kSignalStacks = 16;
alignas(64) char g_signal_stacks[kSignalStacks][kSignalStack];

struct ReplicaStack {
  std::uintptr_t guard_begin = 0, guard_end = 0;
  std::size_t bytes = 0;
  bool fiber = false;
};
thread_local ReplicaStack t_stack;

struct sigaction g_previous {};

// Appends text / a number to a fixed buffer (no allocation, no locale: async-signal-safe).
struct Line {
  char text[512];
  std::size_t used = 0;
  void add(const char* s) {
    while (*s && used + 1 < sizeof text) text[used++] = *s++;
  }
  void add(std::uint64_t n) {
    char digits[24];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n && k < 24);
    while (k && used + 1 < sizeof text) text[used++] = digits[--k];
  }
  void add_size(std::size_t bytes) {
    if (bytes % (1 << 20) == 0) {
      add(static_cast<std::uint64_t>(bytes >> 20));
      add(" MiB");
    } else {
      add(static_cast<std::uint64_t>(bytes >> 10));
      add(" KiB");
    }
  }
};

void on_fault(int signal, siginfo_t* info, void* context) {
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const ReplicaStack& s = t_stack;
  if (s.bytes && at < s.guard_end && at + kBelowGuard >= s.guard_begin) {
    Line line;
    line.add("weft: fatal: ");
    const int replica = log_replica();
    if (replica >= 0) {
      line.add("replica ");
      line.add(static_cast<std::uint64_t>(replica));
    } else {
      line.add("a replica");
    }
    line.add(" overflowed its stack (");
    line.add_size(s.bytes);
    line.add(s.fiber ? ", a fiber): deep recursion or large arrays on the stack in its own code; raise it with "
                       "WEFT_FIBER_STACK (bytes, K/M/G; RuntimeOptions::fiber_stack_bytes)\n"
                     : ", its thread under WEFT_SCHEDULER=threads): deep recursion or large arrays on the stack in "
                       "its own code; raise the threads' stack with ulimit -s (KiB) before the program starts, or "
                       "run under fibers with WEFT_FIBER_STACK\n");
    [[maybe_unused]] const ssize_t written = ::write(2, line.text, line.used);
  }
  // Hand the fault on: to the handler that was there before, else the default action, which the faulting
  // instruction meets again when this returns.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(signal, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(signal);
  }
  ::signal(signal, SIG_DFL);
}

// The handler is installed while any OverflowReportsInstalled lives (an execution runs) and the one found
// before is put back when the last ends: SIGSEGV's disposition is the process's, which a library leaves as it
// found it (issue 45, item 15). A handler someone else installed meanwhile is theirs, and stays.
std::mutex g_install_mutex;
int g_installed = 0;

void install_handler() {
  std::lock_guard lock(g_install_mutex);
  if (g_installed++ > 0) return;
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &action, &g_previous);
}

void uninstall_handler() {
  std::lock_guard lock(g_install_mutex);
  if (--g_installed > 0) return;
  struct sigaction current {};
  if (sigaction(SIGSEGV, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_fault)
    sigaction(SIGSEGV, &g_previous, nullptr);
}

}  // namespace

OverflowReportsInstalled::OverflowReportsInstalled() { install_handler(); }
OverflowReportsInstalled::~OverflowReportsInstalled() { uninstall_handler(); }

ReplicaSignalStack::ReplicaSignalStack() {
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) {
    own_ = false;  // the thread has one already (the embedder's, or an enclosing scope's)
  } else {
    // One of a few static signal stacks, dealt round-robin: a thread allocates nothing (a thread's first
    // malloc reserves a 64 MiB arena, which a process near its address-space limit, with thousands of device
    // threads, does not have). Two threads share a stack only if they overflow at the same moment, among
    // kSignalStacks or more.
    static std::atomic<unsigned> next{0};
    stack_t stack{};
    stack.ss_sp = g_signal_stacks[next.fetch_add(1, std::memory_order_relaxed) % kSignalStacks];
    stack.ss_size = kSignalStack;
    own_ = sigaltstack(&stack, nullptr) == 0;
  }
  [[maybe_unused]] volatile std::size_t touched = t_stack.bytes;  // touched now, not first in the handler
  (void)log_replica();
}

ReplicaSignalStack::~ReplicaSignalStack() {
  if (!own_) return;
  stack_t none{};
  none.ss_flags = SS_DISABLE;
  sigaltstack(&none, nullptr);
}

void enter_replica_stack(const void* guard_begin, const void* guard_end, std::size_t bytes, bool fiber) {
  t_stack = {reinterpret_cast<std::uintptr_t>(guard_begin), reinterpret_cast<std::uintptr_t>(guard_end), bytes, fiber};
}

void leave_replica_stack() { t_stack = {}; }

void enter_own_thread_stack() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* lowest = nullptr;
  std::size_t bytes = 0, guard = 0;
  if (pthread_attr_getstack(&attr, &lowest, &bytes) == 0 && pthread_attr_getguardsize(&attr, &guard) == 0) {
    const char* low = static_cast<const char*>(lowest);
    enter_replica_stack(low - guard, low + 4096, bytes, false);
  }
  pthread_attr_destroy(&attr);
}

#else  // the sanitizers' runtimes handle SIGSEGV and report overflows themselves

OverflowReportsInstalled::OverflowReportsInstalled() {}
OverflowReportsInstalled::~OverflowReportsInstalled() {}
ReplicaSignalStack::ReplicaSignalStack() {}
ReplicaSignalStack::~ReplicaSignalStack() {}
void enter_replica_stack(const void*, const void*, std::size_t, bool) {}
void leave_replica_stack() {}
void enter_own_thread_stack() {}

#endif
}  // namespace weft::detail
