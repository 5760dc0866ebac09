// The fiber scheduler (why and how: fiber_scheduler.hpp).
#include "runtime/fiber_scheduler.hpp"

#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#if defined(WEFT_FIBER_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

#include "core/log.hpp"
#include "runtime/execution.hpp"
#include "runtime/fiber_placement.hpp"
#include "runtime/stack_guard.hpp"
#include "transport/rendezvous.hpp"  // seconds_str
#include "transport/wait_queue.hpp"
#include "weft/memory.hpp"

#if defined(BOOST_USE_UCONTEXT)
// The sanitizer builds use Boost.Context's ucontext backend (src/runtime/CMakeLists.txt). It keeps the
// thread's current activation record in a function that Boost compiles into its library only when the library
// itself is built for ucontext, which Debian's (fcontext) is not; it is defined here instead: per thread, the
// record of the thread's own context until a fiber runs.
namespace boost::context::detail {
fiber_activation_record*& fiber_activation_record::current() noexcept {
  thread_local fiber_activation_record thread_record;
  thread_local fiber_activation_record* current = &thread_record;
  return current;
}
}  // namespace boost::context::detail
#endif

namespace weft::detail {
namespace {

namespace ctx = boost::context;
using transport::WaitClock;

// A replica's stack (WEFT_FIBER_STACK, default 8 MiB, as a thread's): only the pages it touches are ever
// backed, and a guard page below it turns an overflow into a fault, reported naming the replica
// (stack_guard.hpp), rather than silent corruption.
// How long an idle worker polls before it sleeps: covers the gap between back-to-back collectives and pmap
// calls without a futex round trip, and is short enough to cost nothing measurable when the program does
// something else. Only when the workers do not outnumber the cores.
constexpr std::chrono::microseconds kSpin{50};

// How often the watchdog looks at the workers while a watched run is in flight.
constexpr std::chrono::milliseconds kWatchEvery{100};
// How long without a run before the watchdog stops ticking and sleeps until the next one.
constexpr std::chrono::seconds kWatchIdle{10};
const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

// What a worker does now, for the watchdog and holds(): the fiber it runs (-1 between fibers) since when,
// the block of tasks it runs, and its thread (to read its state from /proc).
struct WorkerState {
  std::atomic<int> task{-1};
  std::atomic<std::int64_t> since_ns{0};
  std::atomic<int> begin{0}, end{0};
  std::atomic<int> tid{0};
};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(WaitClock::now().time_since_epoch()).count();
}

// True when thread `tid` of this process sleeps in a futex (a mutex or a condition variable): the first
// field of /proc/self/task/<tid>/syscall is the system call it blocks in.
bool sleeps_in_futex(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return in >> number && number == SYS_futex;
}

// Stacks are kept for the next run: mapping and unmapping 8 MiB per replica per pmap call would cost more
// than the call.
class StackCache {
 public:
  explicit StackCache(std::size_t bytes) : allocator_(bytes) {}

  ctx::stack_context allocate() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        ctx::stack_context s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    return allocator_.allocate();
  }
  void deallocate(ctx::stack_context& s) {
    std::lock_guard lock(mutex_);
    free_.push_back(s);
  }
  ~StackCache() {
    for (ctx::stack_context& s : free_) allocator_.deallocate(s);
  }

 private:
  ctx::protected_fixedsize_stack allocator_;
  std::mutex mutex_;
  std::vector<ctx::stack_context> free_;
};

// Boost.Context's StackAllocator concept over the cache; tells `allocated` where the stack is.
class CachedStack {
 public:
  CachedStack(StackCache& cache, ctx::stack_context* allocated) : cache_(&cache), allocated_(allocated) {}
  ctx::stack_context allocate() { return *allocated_ = cache_->allocate(); }
  void deallocate(ctx::stack_context& s) noexcept { cache_->deallocate(s); }

 private:
  StackCache* cache_;
  ctx::stack_context* allocated_;
};

// AddressSanitizer must hear of every stack switch (else an exception unwinding a fiber's stack looks like a
// wild write): start before leaving a stack (null `save` when leaving it for good), finish after arriving.
// Nothing in other builds.
#if defined(WEFT_FIBER_ASAN)
struct AsanStack {
  const void* bottom = nullptr;
  std::size_t size = 0;
};
inline void asan_start(void** save, const AsanStack& to) { __sanitizer_start_switch_fiber(save, to.bottom, to.size); }
inline void asan_finish(void* save, AsanStack* from) { __sanitizer_finish_switch_fiber(save, &from->bottom, &from->size); }
#else
struct AsanStack {};
inline void asan_start(void**, const AsanStack&) {}
inline void asan_finish(void*, AsanStack*) {}
#endif

// The runtime's thread-locals a replica's code reads, switched with the fiber.
struct FiberLocals {
  std::shared_ptr<MemoryAccount> account;
  Execution* execution = nullptr;
  int log_replica = -1;
  bool error_from_collective = false;

  void swap_with_thread() {
    std::swap(account, default_memory_account());
    std::swap(execution, t_current_execution);
    const int replica = weft::log_replica();
    set_log_replica(log_replica);
    log_replica = replica;
    std::swap(error_from_collective, t_error_from_collective);
  }
};

struct Fiber {
  const std::function<void()>* task = nullptr;
  ctx::fiber self;     // the fiber, while suspended
  ctx::fiber worker;   // the worker's side, while the fiber runs
  ctx::stack_context stack;  // the fiber's stack (sp is its top)
  AsanStack worker_stack;    // the worker's stack, learnt on the first switch (AddressSanitizer builds)
  FiberLocals locals;  // the fiber's thread-locals while it is switched out
  WaitClock::time_point deadline = WaitClock::time_point::max();
  std::uint64_t epoch = 0;  // the wake epoch it waits to move past
  bool started = false;
  bool done = false;
};

// One worker's turn at a block of fibers.
class Worker final : public transport::FiberSuspender {
 public:
  Worker(StackCache& stacks, bool spin, WorkerState& state) : stacks_(stacks), spin_(spin), state_(state) {}

  // Tasks [base, base + count) of the run; done[i] is set once task i has returned.
  WorkerStats run(const std::function<void()>* const* tasks, int count, int base, std::atomic<char>* done) {
    base_ = base;
    done_ = done;
    state_.tid.store(static_cast<int>(::gettid()), std::memory_order_relaxed);
    const ReplicaSignalStack signal_stack;  // for this run only: the thread may be the caller's
    stats_ = {};
    fibers_.clear();
    fibers_.resize(count);
    for (int i = 0; i < count; ++i) fibers_[i].task = tasks[i];
    int pending = count;
    while (pending > 0) {
      const std::uint64_t seen = transport::wake_epoch();
      bool progressed = false;
      WaitClock::time_point next = WaitClock::time_point::max();
      WaitClock::time_point now{};  // read once a pass, when a waiting fiber's deadline matters
      for (Fiber& f : fibers_) {
        if (f.done) continue;
        // Nothing it waits for has changed since it suspended, and its deadline is ahead: leave it be.
        if (f.started && f.epoch == seen) {
          if (f.deadline == WaitClock::time_point::max()) continue;
          if (now == WaitClock::time_point{}) now = WaitClock::now();
          if (now < f.deadline) {
            next = std::min(next, f.deadline);
            continue;
          }
        }
        resume(f);
        if (f.done) {
          --pending;
          progressed = true;
        } else {
          next = std::min(next, f.deadline);
        }
      }
      // Nothing returned and nothing anywhere moved the epoch since the pass began: every fiber here waits
      // for something that has not happened yet.
      if (pending > 0 && !progressed)
        transport::wait_for_wake(seen, next, spin_ ? std::chrono::nanoseconds(kSpin) : std::chrono::nanoseconds(0));
    }
    return stats_;
  }

  void suspend(WaitClock::time_point deadline, std::uint64_t epoch) override {
    Fiber& f = *running_;
    f.deadline = deadline;
    f.epoch = epoch;
    void* save = nullptr;
    asan_start(&save, f.worker_stack);
    f.worker = std::move(f.worker).resume();
    asan_finish(save, &f.worker_stack);
  }

 private:
  void resume(Fiber& f) {
    if (!f.started) {
      f.started = true;
      f.self = ctx::fiber(std::allocator_arg, CachedStack(stacks_, &f.stack), [&f](ctx::fiber&& worker) {
        asan_finish(nullptr, &f.worker_stack);
        f.worker = std::move(worker);
        (*f.task)();  // never throws (FiberScheduler::run's contract)
        f.done = true;
        asan_start(nullptr, f.worker_stack);  // this stack is left for good
        return std::move(f.worker);
      });
    }
    running_ = &f;
    f.locals.swap_with_thread();
    transport::current_fiber_suspender() = this;
    void* save = nullptr;
#if defined(WEFT_FIBER_ASAN)
    AsanStack fiber_stack{static_cast<const char*>(f.stack.sp) - f.stack.size, f.stack.size};
#else
    AsanStack fiber_stack;
#endif
    asan_start(&save, fiber_stack);
    const std::int64_t waited_before = transport::interprocess_wait_ns();
    const WaitClock::time_point start = WaitClock::now();
    state_.since_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
                          std::memory_order_relaxed);
    state_.task.store(base_ + static_cast<int>(&f - fibers_.data()), std::memory_order_release);
    // The lowest page of a fiber's stack mapping is its guard (Boost's protected_fixedsize_stack).
    const char* mapping = static_cast<const char*>(f.stack.sp) - f.stack.size;
    enter_replica_stack(mapping, mapping + kPage, f.stack.size - kPage, true);
    f.self = std::move(f.self).resume();
    leave_replica_stack();
    state_.task.store(-1, std::memory_order_release);
    if (f.done && done_) done_[base_ + (&f - fibers_.data())].store(1, std::memory_order_release);
    // Waits on other processes are not work (transport::interprocess_wait_ns).
    stats_.busy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(WaitClock::now() - start).count() -
                      (transport::interprocess_wait_ns() - waited_before);
    if (!f.done) ++stats_.suspensions;
    asan_finish(save, &fiber_stack);
    transport::current_fiber_suspender() = nullptr;
    f.locals.swap_with_thread();
    running_ = nullptr;
  }

  StackCache& stacks_;
  const bool spin_;
  WorkerState& state_;
  int base_ = 0;
  std::atomic<char>* done_ = nullptr;
  std::vector<Fiber> fibers_;
  Fiber* running_ = nullptr;
  WorkerStats stats_;
};

}  // namespace

struct FiberScheduler::Impl {
  const int threads;
  const bool spin;  // the workers do not outnumber the cores
  StackCache stacks;
  std::vector<std::thread> helpers;
  Placement placement{threads};

  // The job of a run, read by the helpers: helper h runs the tasks [begin[h+1], begin[h+2]). A compact run
  // posts no job: the helpers sleep on job_cv, away from the wake epoch the busy worker signals.
  std::mutex job_mutex;
  std::condition_variable job_cv;
  std::atomic<std::uint64_t> job_serial{0};
  const std::function<void()>* const* job_tasks = nullptr;
  std::vector<int> job_begin;
  std::vector<WorkerStats> job_stats;  // per worker: helper h writes [h + 1] before it counts itself done
  std::atomic<int> job_remaining{0};
  std::atomic<bool> stopping{false};

  // What each worker does (holds(), the watchdog); the run's task-returned flags (grown, never shrunk, only
  // between runs: holds() reads them during one).
  std::unique_ptr<WorkerState[]> states;
  std::unique_ptr<std::atomic<char>[]> done;
  int done_capacity = 0;
  std::atomic<int> run_workers{0};  // workers of the run in flight; 0 between runs

  // The watchdog (fiber_scheduler.hpp): asleep unless a watched run is in flight.
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  const Watch* watch = nullptr;  // the run's, while it is in flight
  std::uint64_t watch_serial = 0;  // watched runs started
  bool watchdog_idle = false;      // asleep until the next run (watch_run wakes it)
  bool watch_stopping = false;
  std::thread watchdog;

  Impl(int n, std::size_t stack_bytes)
      : threads(std::max(1, n)),
        spin(threads <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
        stacks(stack_bytes),
        job_stats(threads),
        states(new WorkerState[static_cast<std::size_t>(threads)]) {}

  std::vector<Hold> holds(double min_s) const {
    std::vector<Hold> out;
    const int workers = run_workers.load(std::memory_order_acquire);
    const std::int64_t now = steady_ns();
    for (int w = 0; w < workers; ++w) {
      const WorkerState& st = states[w];
      const int task = st.task.load(std::memory_order_acquire);
      if (task < 0) continue;
      const double held_s = static_cast<double>(now - st.since_ns.load(std::memory_order_relaxed)) * 1e-9;
      if (held_s < min_s) continue;
      Hold hold{w, task, held_s, {}};
      for (int t = st.begin.load(); t < st.end.load(); ++t)
        if (t != task && !done[t].load(std::memory_order_acquire)) hold.starved.push_back(t);
      if (!hold.starved.empty()) out.push_back(std::move(hold));
    }
    return out;
  }

  // One look at the workers of a watched run (watch_mutex held, so the run and its Watch stay): a warning
  // once per hold, the abort once per run, the end of the process for a deadlock.
  void check_holds(std::vector<std::int64_t>& warned_since, bool& aborted) {
    const Watch& w = *watch;
    for (const Hold& hold : holds(0.0)) {
      const std::int64_t since = states[hold.worker].since_ns.load(std::memory_order_relaxed);
      const std::string what = w.execution + ": " + describe_hold(hold, w.name);
      if (w.warn_s > 0 && hold.held_s >= w.warn_s && warned_since[hold.worker] != since) {
        warned_since[hold.worker] = since;
        log(LogLevel::warn, what + " (WEFT_COLLECTIVE_WARN)");
      }
      if (w.timeout_s <= 0 || hold.held_s < w.timeout_s) continue;
      if (!aborted) {
        aborted = true;
        const std::string report = describe_hold(hold, w.name) + ", past the collective timeout (" +
                                   transport::seconds_str(w.timeout_s) + ", WEFT_COLLECTIVE_TIMEOUT)";
        log(LogLevel::error, w.execution + ": " + report);
        if (w.abort) w.abort(hold.task, report);
      }
      if (hold.held_s >= 2 * w.timeout_s && sleeps_in_futex(states[hold.worker].tid.load())) {
        // Asleep on a lock or condition variable for twice the timeout, after the abort: the one who would
        // wake it is a fiber of its own worker, which cannot run. Nothing will ever end this run.
        log(LogLevel::error, what + "; it sleeps on a lock or condition variable that only a replica of its own "
                                    "worker could release: a deadlock (a lock held across a collective?). "
                                    "Ending the process: its run can never return (WEFT_SCHEDULER=threads gives "
                                    "each replica its own thread)");
        std::fflush(nullptr);
        std::_Exit(70);
      }
    }
  }

  // Ticks every kWatchEvery while runs come; after kWatchIdle without one it sleeps until the next, so a
  // program issuing pmap after pmap never wakes it (a wake per call would cost the call a futex round trip).
  void watchdog_loop() {
    std::unique_lock lock(watch_mutex);
    std::vector<std::int64_t> warned_since(static_cast<std::size_t>(threads), -1);
    bool aborted = false;
    std::uint64_t seen = 0;  // the run checked last (watch_serial: the Watch's address repeats run to run)
    auto last_run = WaitClock::now();
    while (!watch_stopping) {
      if (!watch && WaitClock::now() - last_run > kWatchIdle) {
        watchdog_idle = true;
        watch_cv.wait(lock, [&] { return watch || watch_stopping; });
        watchdog_idle = false;
        continue;
      }
      watch_cv.wait_for(lock, kWatchEvery);
      if (!watch || watch_stopping) continue;
      last_run = WaitClock::now();
      if (watch_serial != seen) {  // a new run
        seen = watch_serial;
        aborted = false;
        std::fill(warned_since.begin(), warned_since.end(), -1);
      }
      check_holds(warned_since, aborted);
    }
  }

  void watch_run(const Watch* w) {
    bool wake = false;
    {
      std::lock_guard lock(watch_mutex);
      watch = w;
      if (w) ++watch_serial;
      if (w && !watchdog.joinable()) watchdog = std::thread([this] { watchdog_loop(); });
      wake = w && watchdog_idle;
    }
    if (wake) watch_cv.notify_all();
  }

  // The next job's serial once it differs from `done` (or stopping): a brief poll of the serial alone (no
  // other thread writes it meanwhile), then sleep.
  std::uint64_t wait_for_job(std::uint64_t done) {
    if (spin) {
      const WaitClock::time_point until = WaitClock::now() + kSpin;
      for (int i = 0;; ++i) {
        if (job_serial.load(std::memory_order_acquire) != done || stopping.load(std::memory_order_acquire))
          return job_serial.load(std::memory_order_acquire);
        if ((i & 63) == 63 && WaitClock::now() >= until) break;
      }
    }
    std::unique_lock lock(job_mutex);
    job_cv.wait(lock, [&] { return job_serial.load() != done || stopping.load(); });
    return job_serial.load();
  }

  void post_job() {
    {
      std::lock_guard lock(job_mutex);
      job_serial.fetch_add(1, std::memory_order_acq_rel);
    }
    job_cv.notify_all();
  }

  void stop() {
    {
      std::lock_guard lock(job_mutex);
      stopping.store(true, std::memory_order_release);
    }
    job_cv.notify_all();
    for (std::thread& t : helpers) t.join();
    {
      std::lock_guard lock(watch_mutex);
      watch_stopping = true;
    }
    watch_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  }

  void helper_loop(int h) {
    Worker worker(stacks, spin, states[h + 1]);
    std::uint64_t done_serial = 0;
    for (;;) {
      done_serial = wait_for_job(done_serial);
      if (stopping.load(std::memory_order_acquire)) return;
      const int begin = job_begin[h + 1], end = job_begin[h + 2];
      job_stats[h + 1] = end > begin ? worker.run(job_tasks + begin, end - begin, begin, done.get()) : WorkerStats{};
      job_remaining.fetch_sub(1, std::memory_order_acq_rel);
      transport::signal_wake();
    }
  }
};

FiberScheduler::FiberScheduler(int threads, std::size_t stack_bytes) : impl_(std::make_unique<Impl>(threads, stack_bytes)) {
  try {
    for (int h = 0; h + 1 < impl_->threads; ++h) impl_->helpers.emplace_back([this, h] { impl_->helper_loop(h); });
  } catch (...) {
    impl_->stop();
    throw;
  }
}

FiberScheduler::~FiberScheduler() { impl_->stop(); }

std::string describe_hold(const Hold& hold, const std::function<std::string(int task)>& name) {
  auto who = [&](int task) { return name ? name(task) : "task " + std::to_string(task); };
  std::string starved;
  for (int t : hold.starved) starved += (starved.empty() ? "" : ", ") + who(t);
  return who(hold.task) + " has held fiber worker " + std::to_string(hold.worker) + " for " +
         transport::seconds_str(hold.held_s) +
         " without reaching a collective or returning (blocked in its own code: a lock, a sleep, a blocking "
         "call?); " + starved + (hold.starved.size() == 1 ? " shares" : " share") +
         " that worker (WEFT_SCHEDULER=fibers) and " + (hold.starved.size() == 1 ? "has" : "have") +
         " not run since";
}

std::vector<Hold> FiberScheduler::holds(double min_s) const { return impl_->holds(min_s); }

void FiberScheduler::run(const std::vector<std::function<void()>>& tasks, const Watch& watch) {
  Impl& s = *impl_;
  const int n = static_cast<int>(tasks.size());
  if (n == 0) return;
  if (n > s.done_capacity) {
    s.done.reset(new std::atomic<char>[static_cast<std::size_t>(n)]);
    s.done_capacity = n;
  }
  for (int i = 0; i < n; ++i) s.done[i].store(0, std::memory_order_relaxed);
  const WaitClock::time_point start = WaitClock::now();
  std::vector<const std::function<void()>*> order(n);
  for (int i = 0; i < n; ++i) order[i] = &tasks[i];
  const int workers = std::min(s.placement.workers_for_next_run(), n);
  // Worker w takes tasks [begin[w], begin[w+1]): contiguous, as even as the division allows.
  std::vector<int> begin(s.threads + 1, n);
  for (int w = 0; w <= workers; ++w) begin[w] = static_cast<int>(static_cast<long long>(w) * n / workers);
  for (int w = 0; w < workers; ++w) {
    s.states[w].begin.store(begin[w], std::memory_order_relaxed);
    s.states[w].end.store(begin[w + 1], std::memory_order_relaxed);
  }
  s.run_workers.store(workers, std::memory_order_release);
  const bool watched = watch.warn_s > 0 || watch.timeout_s > 0;
  if (watched) s.watch_run(&watch);
  if (workers > 1) {
    s.job_tasks = order.data();
    s.job_begin = begin;
    s.job_remaining.store(s.threads - 1, std::memory_order_relaxed);
    s.post_job();
  }
  Worker own(s.stacks, s.spin, s.states[0]);
  s.job_stats[0] = own.run(order.data() + begin[0], begin[1] - begin[0], begin[0], s.done.get());
  while (workers > 1 && s.job_remaining.load(std::memory_order_acquire) > 0) {
    const std::uint64_t seen = transport::wake_epoch();
    if (s.job_remaining.load(std::memory_order_acquire) == 0) break;
    transport::wait_for_wake(seen, WaitClock::time_point::max(),
                             s.spin ? std::chrono::nanoseconds(kSpin) : std::chrono::nanoseconds(0));
  }
  if (watched) s.watch_run(nullptr);
  s.run_workers.store(0, std::memory_order_release);
  const double wall_ns = std::chrono::duration<double, std::nano>(WaitClock::now() - start).count();
  s.placement.learn(workers, n, wall_ns, s.job_stats);
}

}  // namespace weft::detail
