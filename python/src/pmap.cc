// pmap from Python, and the JAX collectives (weft.lax) it runs.
//
// Threads and the GIL. A replica of a Python pmap runs its Python function on its device's worker thread (an
// OS thread of the C++ runtime: a Python frame cannot live anywhere else). It holds the GIL only while it
// runs Python; every collective releases it before it waits, so the replicas meet in C++ while the others
// run Python. The caller releases the GIL for the whole execution and waits on a helper thread's result in
// 50 ms slices, taking the GIL between slices to let Python handle signals: Ctrl-C (KeyboardInterrupt)
// during a pmap stops the replicas at their next weft call or Python bytecode, and the caller raises
// KeyboardInterrupt once they have stopped (each is bounded by the collective deadlines).
//
// Which replica. As jax.lax.psum finds its axis environment from the trace it is called in, weft.lax.psum
// finds the replica of the calling thread: pmap makes it current on the worker thread (ReplicaScope) for the
// length of the Python call.
#include <Python.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "bindings.hpp"

namespace weft::python {
namespace {

thread_local Replica* t_replica = nullptr;
thread_local CallState* t_call = nullptr;

// A py::object whose last owner may be a C++ thread without the GIL.
std::shared_ptr<py::object> shared_object(py::object object) {
  return {new py::object(std::move(object)), [](py::object* o) {
            if (!Py_IsInitialized()) {  // interpreter gone: leak rather than touch it
              o->release();
              delete o;
              return;
            }
            py::gil_scoped_acquire gil;
            delete o;
          }};
}

// An axis name or a tuple / list of names, as jax.lax takes them.
Axes to_axes(py::handle names) {
  if (py::isinstance<py::str>(names)) return Axes(names.cast<std::string>());
  std::vector<std::string> list;
  for (py::handle n : names) list.push_back(py::str(n).cast<std::string>());
  return Axes(std::move(list));
}

// The thread a caller's blocking work runs on while the caller polls for signals: made on the first call
// from a thread and kept for the thread's life.
class Waiter {
 public:
  Waiter() : thread_([this] { loop(); }) {}
  ~Waiter() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      work_ = std::move(work);
      done_ = false;
    }
    cv_.notify_all();
  }
  // True once the work has ended (waits at most `timeout`).
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return done_cv_.wait_for(lock, timeout, [&] { return done_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || work_; });
      if (stopping_) return;
      std::function<void()> work = std::move(work_);
      work_ = nullptr;
      lock.unlock();
      work();  // catches its own exceptions
      work = nullptr;
      lock.lock();
      done_ = true;
      done_cv_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  std::function<void()> work_;
  bool done_ = true, stopping_ = false;
  std::thread thread_;
};

// The calls in flight, for the interpreter's exit: a daemon thread may be inside a pmap when the main thread
// ends, and the runtime (and the replicas' Python state) must not be torn down under it.
struct ActiveCalls {
  std::mutex mutex;
  std::condition_variable cv;
  std::set<CallState*> calls;
  bool exiting = false;
} g_active;

// Registered with atexit, which runs before the interpreter finalizes (and before module globals, such as a
// runtime made by weft.init, are freed): stops every call in flight as Ctrl-C would and waits for them to
// end, at most kExitWait; past that (a replica blocked outside Python and weft, in time.sleep or I/O) the
// process ends now with a message rather than crash in a half-finalized interpreter.
constexpr auto kExitWait = std::chrono::seconds(30);

void stop_calls_at_exit() {
  {
    std::lock_guard lock(g_active.mutex);
    g_active.exiting = true;
    if (g_active.calls.empty()) return;
    std::string names;
    for (CallState* call : g_active.calls) {
      call->interrupted = true;
      stop_other_replicas(*call, -1, "the interpreter is exiting");
      names += (names.empty() ? "" : ", ") + call->name;
    }
    // Said here, once: the threads that made these calls are daemon threads, which the interpreter may stop
    // before they report anything.
    std::fprintf(stderr, "weft: the interpreter is exiting: stopping %zu call(s) still running in other threads (%s)\n",
                 g_active.calls.size(), names.c_str());
    std::fflush(stderr);
  }
  py::gil_scoped_release nogil;
  std::unique_lock lock(g_active.mutex);
  if (!g_active.cv.wait_for(lock, kExitWait, [] { return g_active.calls.empty(); })) {
    std::fprintf(stderr,
                 "weft: the interpreter is exiting but %zu pmap/session call(s) in other threads did not stop "
                 "within %lld s (a replica blocked outside Python and weft); exiting now\n",
                 g_active.calls.size(), static_cast<long long>(kExitWait.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
}

// While alive, `call` is in flight.
class ActiveCall {
 public:
  explicit ActiveCall(CallState& call) : call_(call) {
    std::lock_guard lock(g_active.mutex);
    if (g_active.exiting)
      throw weft::Error(call.name + ": the interpreter is exiting; no new pmap or session run can start");
    g_active.calls.insert(&call_);
  }
  ~ActiveCall() {
    std::lock_guard lock(g_active.mutex);
    g_active.calls.erase(&call_);
    g_active.cv.notify_all();
  }
  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

 private:
  CallState& call_;
};

// Where the weft package lives: frames there are weft's own, not the user's call site.
std::string g_package_dir;

// libstdc++'s std::source_location is one pointer to this layout ({file, function, line, column}); a
// location built at run time is that pointer copied in. Elsewhere the binding's own location is used.
struct SiteImpl {
  const char* file;
  const char* function;
  unsigned line;
  unsigned column;
};
struct Site {
  std::string file, function;
  SiteImpl impl;
};

std::source_location make_location(const std::string& file, const std::string& function, unsigned line) {
#if defined(__GLIBCXX__)
  static_assert(sizeof(std::source_location) == sizeof(const SiteImpl*));
  static std::map<std::tuple<std::string, std::string, unsigned>, std::unique_ptr<Site>> sites;  // under the GIL
  std::unique_ptr<Site>& site = sites[{file, function, line}];
  if (!site) {
    site = std::make_unique<Site>(Site{file, function, {}});
    site->impl = {site->file.c_str(), site->function.c_str(), line, 0};
  }
  std::source_location location;
  const SiteImpl* pointer = &site->impl;
  std::memcpy(static_cast<void*>(&location), &pointer, sizeof pointer);
  return location;
#else
  (void)file, (void)function, (void)line;
  return std::source_location::current();
#endif
}

}  // namespace

std::source_location python_call_site() {
  // Per code object: whether it is weft's own, and its names; per (code, line): the location. Both keep a
  // reference to the code object, so an address is never reused for another code (bounded by the program's
  // code; under the GIL).
  struct CodeInfo {
    bool internal;
    std::string file, function;
  };
  static std::unordered_map<PyCodeObject*, CodeInfo> codes;
  static std::map<std::pair<PyCodeObject*, int>, std::source_location> sites;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    auto found = codes.find(code);
    if (found == codes.end()) {
      py::handle code_object(reinterpret_cast<PyObject*>(code));
      std::string file = py::str(code_object.attr("co_filename")).cast<std::string>();
      const bool internal = !g_package_dir.empty() && file.rfind(g_package_dir, 0) == 0;
      std::string function = py::str(code_object.attr("co_name")).cast<std::string>();
      Py_INCREF(code);  // kept by the table
      found = codes.emplace(code, CodeInfo{internal, std::move(file), std::move(function)}).first;
    }
    if (!found->second.internal) {
      const int line = PyFrame_GetLineNumber(frame);
      Py_DECREF(code);
      Py_DECREF(frame);
      auto site = sites.find({found->first, line});
      if (site == sites.end())
        site = sites.emplace(std::pair{found->first, line},
                             make_location(found->second.file, found->second.function, static_cast<unsigned>(line)))
                   .first;
      return site->second;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return std::source_location::current();
}

Replica& current_replica(const char* op) {
  if (!t_replica)
    throw InvalidArgument(std::string(op) +
                          " was called outside a replica: collectives run inside a function mapped by weft.pmap "
                          "(or a Session program), on the replica's own thread");
  if (t_call && t_call->interrupted) throw weft::Error(std::string(op) + ": interrupted (KeyboardInterrupt in the caller)");
  return *t_replica;
}

CallState* current_call() { return t_call; }

ReplicaScope::ReplicaScope(Replica& replica, CallState* call) : previous_replica_(t_replica), previous_call_(t_call) {
  t_replica = &replica;
  t_call = call;
}

ReplicaScope::~ReplicaScope() {
  t_replica = previous_replica_;
  t_call = previous_call_;
}

void keep_python_thread_state(py::gil_scoped_acquire& gil) {
  struct Kept {
    bool kept = false;
    ~Kept() {
      // At thread exit. Python frees every thread state itself when it finalizes; taking the GIL during or
      // after that would end (or crash) this thread.
      if (!kept || !Py_IsInitialized() || _Py_IsFinalizing()) return;
      py::gil_scoped_acquire again;  // this thread's kept state, counted twice now
      again.dec_ref();               // drop the keeping count; `again` frees the state when it ends
    }
  };
  thread_local Kept keeper;
  if (!keeper.kept) {
    gil.inc_ref();
    keeper.kept = true;
  }
}

void note_python_thread(CallState& call, int index, bool running) {
  if (call.python_threads.size() <= static_cast<std::size_t>(index)) call.python_threads.resize(index + 1, 0);
  const unsigned long self = PyThread_get_thread_ident();
  // An interrupt sent while the replica was leaving Python must not fire in this thread's next call (its
  // thread state is kept).
  if (!running) PyThreadState_SetAsyncExc(self, nullptr);
  call.python_threads[index] = running ? self : 0;
}

std::string describe_python_error(const py::error_already_set& error) {
  std::string type = py::str(error.type().attr("__name__")).cast<std::string>();
  const std::string text = py::str(error.value()).cast<std::string>();
  return text.empty() ? type : type + ": " + text;
}

void stash_python_error(CallState& call, Replica& replica, const py::error_already_set& error) {
  if (call.python_error) return;  // the first one is the root cause
  py::object value = error.value();
  if (error.trace() && !PyException_GetTraceback(value.ptr())) PyException_SetTraceback(value.ptr(), error.trace().ptr());
  call.python_error = value;
  call.python_error_replica = replica.index();
  call.python_error_where = "replica " + std::to_string(replica.index()) + " (" + to_string(replica.device()) + ")";
}

void raise_python_error(CallState& call) {
  if (!call.python_error) return;
  py::object value = std::move(call.python_error);
  call.python_error = py::object();
  const std::string note = "raised in " + call.python_error_where + " of " + call.name;
  if (py::hasattr(value, "add_note")) value.attr("add_note")(note);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr())), value.ptr());
  throw py::error_already_set();
}

void run_interruptibly(CallState& call, const std::function<void()>& work) {
  if (t_replica)
    throw InvalidArgument(call.name + ": cannot start a program from inside a replica's function (" + t_call->name +
                          "); nest pmap inside pmap (a multi-axis mesh) instead");
  ActiveCall active(call);
  std::exception_ptr failure;
  std::optional<py::error_already_set> interrupt;
  thread_local Waiter waiter;  // one per calling thread, kept (a thread per call costs ~50 us)
  {
    py::gil_scoped_release nogil;
    waiter.start([&] {
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
    });
    while (!waiter.wait_for(std::chrono::milliseconds(50))) {
      py::gil_scoped_acquire gil;
      if (call.failed_replica >= 0 && !call.stopping && std::chrono::steady_clock::now() - call.failed_at > kStopDelay)
        stop_other_replicas(call, call.failed_replica, "another replica failed");
      if (call.interrupted) continue;  // already told the replicas; wait for them to stop
      if (PyErr_CheckSignals() != 0) {  // a Python signal handler raised (KeyboardInterrupt)
        interrupt.emplace();
        call.interrupted = true;
        for (unsigned long thread : call.python_threads)
          if (thread) PyThreadState_SetAsyncExc(thread, PyExc_KeyboardInterrupt);
      }
    }
  }
  if (interrupt) {
    call.python_error = py::object();  // the replicas' KeyboardInterrupts are this one
    throw std::move(*interrupt);
  }
  raise_python_error(call);
  if (failure) std::rethrow_exception(failure);
}

namespace {

// A Python function as a weft pmap program. The Python wrapper (weft/_pmap.py) flattens pytrees: the
// function receives the leaves as numpy arrays and returns a list of leaves.
class PythonPmap {
 public:
  PythonPmap(py::object fn, std::string axis, std::vector<std::pair<std::string, int>> mesh,
             std::vector<std::optional<int>> in_axes, std::vector<std::optional<int>> out_axes,
             std::vector<Device> devices, std::string name)
      : state_(std::make_shared<State>()) {
    state_->fn = shared_object(std::move(fn));
    state_->name = name;
    PmapOptions options;
    options.axis = std::move(axis);
    for (auto& [axis_name, size] : mesh) options.mesh.push_back({axis_name, size});
    options.in_axes = std::move(in_axes);
    options.out_axes = std::move(out_axes);
    options.devices = std::move(devices);
    options.name = std::move(name);
    std::shared_ptr<State> state = state_;
    program_ = std::make_shared<PmapProgram>(
        [state](Replica& r, std::span<const Array> inputs) -> std::vector<Array> {
          return run_python_replica(r, *state->call, [&] {
            py::tuple args(inputs.size());
            for (std::size_t i = 0; i < inputs.size(); ++i) args[i] = to_numpy(inputs[i]);
            py::object out = (*state->fn)(*args);
            std::vector<Array> outputs;
            for (py::handle leaf : out) outputs.push_back(to_array(leaf, "an output of the mapped function"));
            return outputs;
          });
        },
        std::move(options));
  }

  py::list call(py::sequence args, py::handle sharded_type) {
    std::vector<PmapArg> arguments;
    for (py::handle a : args) {
      if (py::isinstance(a, sharded_type)) {
        arguments.emplace_back(a.cast<ShardedArray>());
      } else {
        arguments.emplace_back(to_array(a, "a pmap argument"));
      }
    }
    // A Python frame lives on one OS thread: replicas that share a thread as fibers cannot run Python.
    if (Runtime::current().options().scheduler != "threads")
      throw InvalidArgument(state_->name + ": Python replicas need WEFT_SCHEDULER=threads (one OS thread per "
                            "device), but this runtime runs replicas as " + Runtime::current().options().scheduler +
                            " (unset WEFT_SCHEDULER or set it to threads)");
    CallState call;
    call.name = state_->name;
    std::vector<ShardedArray> result;
    run_interruptibly(call, [&] {
      // Calls of one Python pmap from several threads take turns (the runtime runs executions one at a time
      // anyway); the replicas find this call's state through the program.
      std::lock_guard lock(state_->mutex);
      state_->call = &call;
      result = (*program_)(std::move(arguments));
    });
    py::list out;
    for (ShardedArray& s : result) out.append(py::cast(std::move(s)));
    return out;
  }

 private:
  struct State {
    std::shared_ptr<py::object> fn;
    std::string name;
    std::mutex mutex;
    CallState* call = nullptr;
  };
  std::shared_ptr<State> state_;
  std::shared_ptr<PmapProgram> program_;
};

// The collectives release the GIL while they wait for the other replicas.
template <class F>
py::array collective(const char* op, py::handle x, py::handle axis_names, F&& body) {
  Replica& r = current_replica(op);
  const Array a = to_array(x, op);
  const Axes axes = to_axes(axis_names);
  const std::source_location site = python_call_site();
  Array result;
  {
    py::gil_scoped_release nogil;
    result = body(r, a, axes, site);
  }
  return to_numpy(result);
}

}  // namespace

void init_pmap(py::module_& m) {
  py::module_::import("atexit").attr("register")(py::cpp_function(&stop_calls_at_exit));
  py::class_<PythonPmap>(m, "PmapProgram")
      .def(py::init<py::object, std::string, std::vector<std::pair<std::string, int>>, std::vector<std::optional<int>>,
                    std::vector<std::optional<int>>, std::vector<Device>, std::string>(),
           py::arg("fn"), py::arg("axis"), py::arg("mesh"), py::arg("in_axes"), py::arg("out_axes"),
           py::arg("devices"), py::arg("name"))
      .def("__call__", &PythonPmap::call);

  g_package_dir = py::str(py::module_::import("os").attr("path").attr("dirname")(
                                 py::module_::import("weft").attr("__file__")))
                      .cast<std::string>() + "/";
  using Names = py::object;
  using Loc = std::source_location;
  using Groups = AxisIndexGroups;
  m.def("psum", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.psum", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.psum(a, ax, groups, site); });
  });
  m.def("pmean", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmean", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.pmean(a, ax, groups, site); });
  });
  m.def("pmax", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmax", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.pmax(a, ax, groups, site); });
  });
  m.def("pmin", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmin", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.pmin(a, ax, groups, site); });
  });
  m.def("all_gather", [](py::handle x, const Names& axes, const Groups& groups, int axis, bool tiled) {
    return collective("weft.lax.all_gather", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.all_gather(a, ax, axis, tiled, groups, site); });
  });
  m.def("psum_scatter", [](py::handle x, const Names& axes, const Groups& groups, int dimension, bool tiled) {
    return collective("weft.lax.psum_scatter", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) {
      return r.psum_scatter(a, ax, dimension, tiled, groups, site);
    });
  });
  m.def("all_to_all", [](py::handle x, const Names& axes, const Groups& groups, int split, int concat, bool tiled) {
    return collective("weft.lax.all_to_all", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) {
      return r.all_to_all(a, ax, split, concat, tiled, groups, site);
    });
  });
  m.def("ppermute", [](py::handle x, const Names& axes, const Permutation& perm) {
    return collective("weft.lax.ppermute", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Loc site) { return r.ppermute(a, ax, perm, site); });
  });
  m.def("axis_index", [](const Names& axes) { return current_replica("weft.lax.axis_index").axis_index(to_axes(axes)); });
  m.def("axis_size", [](const Names& axes) { return current_replica("weft.lax.axis_size").axis_size(to_axes(axes)); });
  m.def("in_replica", [] { return t_replica != nullptr; });
  m.def("calls_in_flight", [] {
    std::lock_guard lock(g_active.mutex);
    return g_active.calls.size();
  });
  m.def("replica_index", [] { return current_replica("weft.replica_index").index(); });
}

}  // namespace weft::python
