// Loading oneDNN at run time and running float32 products through its matmul primitive (why: onednn.hpp).
#include "array/onednn.hpp"

#include "array/gemm_threads.hpp"
#include "weft/error.hpp"

#if defined(WEFT_ONEDNN_HEADERS)
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>


#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <vector>
#endif

namespace weft::onednn {

#if !defined(WEFT_ONEDNN_HEADERS)

class Library {};

const Library* load(std::string& description, std::string& why, bool& jit) {
  description.clear();
  jit = false;
  why = "weft was built without oneDNN's headers (Debian: libdnnl-dev)";
  return nullptr;
}

void matmul_f32(const Library&, const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t, bool,
                bool) {
  throw Error("matmul: weft was built without oneDNN");
}

void matmul_bf16(const Library&, const std::uint16_t*, const std::uint16_t*, float*, std::int64_t, std::int64_t,
                 std::int64_t, bool, bool) {
  throw Error("matmul: weft was built without oneDNN");
}

std::string bf16_kernels(const Library&) { return ""; }

#else

namespace {

// The entry points used, typed by their declarations in dnnl.h (one list for the struct and the lookup).
#define WEFT_DNNL_ENTRIES(X) \
  X(engine_create) \
  X(stream_create) \
  X(stream_destroy) \
  X(memory_desc_init_by_strides) \
  X(memory_desc_get_size) \
  X(matmul_desc_init) \
  X(primitive_attr_create) \
  X(primitive_attr_destroy) \
  X(primitive_attr_set_scratchpad_mode) \
  X(primitive_attr_set_fpmath_mode) \
  X(primitive_desc_create) \
  X(primitive_desc_destroy) \
  X(primitive_desc_query) \
  X(primitive_desc_query_md) \
  X(primitive_create) \
  X(primitive_destroy) \
  X(primitive_execute) \
  X(memory_create) \
  X(memory_destroy) \
  X(version)

struct Api {
#define WEFT_DNNL_ENTRY(name) decltype(&::dnnl_##name) name = nullptr;
  WEFT_DNNL_ENTRIES(WEFT_DNNL_ENTRY)
#undef WEFT_DNNL_ENTRY
  void (*omp_set_num_threads)(int) = nullptr;  // from the OpenMP runtime oneDNN brought in
  int (*omp_get_max_threads)() = nullptr;
};

// Debian's soname of oneDNN 2.x (package libdnnl2).
constexpr const char* kSoname = "libdnnl.so.2";

// A failed call for one product shape names the shape; one made once for every product (engine, stream) does not.
void check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return;
  throw Error("matmul: oneDNN's " + std::string(what) + " failed with status " + std::to_string(int(status)));
}
void check(dnnl_status_t status, const char* what, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (status == dnnl_success) return;
  throw Error("matmul: oneDNN's " + std::string(what) + " failed with status " + std::to_string(int(status)) +
              " for a (" + std::to_string(m) + ", " + std::to_string(k) + ") @ (" + std::to_string(k) + ", " +
              std::to_string(n) + ") float32 product");
}

}  // namespace

// One product shape: its primitive and the scratchpad it needs.
struct Primitive {
  const Api* api = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a{}, b{}, c{}, scratch{};
  std::size_t scratch_bytes = 0;
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  ~Primitive() {
    if (primitive) api->primitive_destroy(primitive);
    if (pd) api->primitive_desc_destroy(pd);
  }
};

class Library {
 public:
  Api api;
  dnnl_engine_t engine = nullptr;

  // The primitive for this shape and these transposes, created on first use and kept (a training step has
  // a handful of shapes; creating one costs 5-30 us, as much as a small product). A program whose shapes
  // keep changing would grow the cache without end, so past kMaxKept shapes it starts over; callers hold
  // their primitive by shared_ptr, so one in use outlives its eviction.
  // `bf16`: bfloat16 operands with a float32 result (accumulated in float32 by the kernel), else float32 all
  // through.
  // `threads`: the OpenMP threads the calling thread allows now (its ICV), which the primitive is made for (oneDNN
  // splits the product into that many parts when it creates the primitive, and runs that many at execution).
  std::shared_ptr<const Primitive> primitive(std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb,
                                             bool bf16, int threads) const {
    const Key key{m, k, n, ta, tb, bf16, threads};
    {
      const std::shared_lock read(mutex_);
      if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    std::shared_ptr<const Primitive> made = create(m, k, n, ta, tb, bf16);
    const std::unique_lock write(mutex_);
    if (cache_.size() >= kMaxKept) cache_.clear();
    return cache_.emplace(key, std::move(made)).first->second;
  }
  static constexpr std::size_t kMaxKept = 256;

 private:
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool, int>;
  mutable std::shared_mutex mutex_;
  mutable std::map<Key, std::shared_ptr<const Primitive>> cache_;

  std::unique_ptr<Primitive> create(std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb,
                                    bool bf16) const {
    auto p = std::make_unique<Primitive>();
    p->api = &api;
    // Row-major operands as stored: op(A) (m, k) reads A (m, k) with strides (k, 1), or A (k, m) transposed
    // with strides (1, m); likewise op(B).
    const dnnl_dims_t a_dims = {m, k}, a_strides = {ta ? 1 : k, ta ? m : 1};
    const dnnl_dims_t b_dims = {k, n}, b_strides = {tb ? 1 : n, tb ? k : 1};
    const dnnl_dims_t c_dims = {m, n}, c_strides = {n, 1};
    const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    check(api.memory_desc_init_by_strides(&p->a, 2, a_dims, in, a_strides), "memory_desc_init", m, k, n);
    check(api.memory_desc_init_by_strides(&p->b, 2, b_dims, in, b_strides), "memory_desc_init", m, k, n);
    check(api.memory_desc_init_by_strides(&p->c, 2, c_dims, dnnl_f32, c_strides), "memory_desc_init", m, k, n);
    dnnl_matmul_desc_t desc;
    check(api.matmul_desc_init(&desc, &p->a, &p->b, nullptr, &p->c), "matmul_desc_init", m, k, n);
    dnnl_primitive_attr_t attr = nullptr;
    check(api.primitive_attr_create(&attr), "primitive_attr_create", m, k, n);
    const std::unique_ptr<dnnl_primitive_attr, decltype(api.primitive_attr_destroy)> attr_owner(
        attr, api.primitive_attr_destroy);
    check(api.primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode", m, k, n);
    check(api.primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict), "set_fpmath_mode", m, k, n);
    check(api.primitive_desc_create(&p->pd, &desc, attr, engine, nullptr), "primitive_desc_create", m, k, n);
    if (const dnnl_memory_desc_t* scratch = api.primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0)) {
      p->scratch = *scratch;
      p->scratch_bytes = api.memory_desc_get_size(scratch);
    }
    check(api.primitive_create(&p->primitive, p->pd), "primitive_create", m, k, n);
    return p;
  }
};

namespace {

// What a thread needs to call oneDNN: its stream, its scratchpad, and OpenMP told to stay on this thread.
struct ThreadState {
  const Library* library = nullptr;
  dnnl_stream_t stream = nullptr;
  std::vector<unsigned char> scratch;
  ~ThreadState() {
    if (stream) library->api.stream_destroy(stream);
  }
};

ThreadState& thread_state(const Library& library) {
  thread_local ThreadState state;
  if (!state.stream) {
    check(library.api.stream_create(&state.stream, library.engine, dnnl_stream_default_flags), "stream_create");
    state.library = &library;
  }
  return state;
}

struct Loaded {
  std::unique_ptr<Library> library;
  std::string description, why;
  bool jit = false;
};

Loaded load_once() {
  Loaded out;
  void* handle = ::dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    out.why = "no oneDNN: " + std::string(why ? why : kSoname);
    return out;
  }
  auto library = std::make_unique<Library>();
  Api& api = library->api;
  bool complete = true;
  auto resolve = [&](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(::dlsym(handle, name));
    complete = complete && entry != nullptr;
  };
#define WEFT_DNNL_RESOLVE(name) resolve(api.name, "dnnl_" #name);
  WEFT_DNNL_ENTRIES(WEFT_DNNL_RESOLVE)
#undef WEFT_DNNL_RESOLVE
#undef WEFT_DNNL_ENTRIES
  // dlsym on the handle also searches the libraries it depends on: Debian's oneDNN brings libgomp.
  resolve(api.omp_set_num_threads, "omp_set_num_threads");
  resolve(api.omp_get_max_threads, "omp_get_max_threads");
  if (!complete) {
    // The library stays loaded (its OpenMP runtime may have started threads); it computes nothing.
    out.why = std::string(kSoname) + " lacks the oneDNN 2.x entry points weft uses";
    return out;
  }
  try {
    check(api.engine_create(&library->engine, dnnl_cpu, 0), "engine_create");
    // The kernels its matmul picks here: a product of blocked size tells (the name is the implementation's).
    // (Made for one thread, as the products of a thread that has not called oneDNN yet: the probe's ICV is
    // set for it and restored, the loading thread may be the embedder's.)
    const int had = api.omp_get_max_threads();
    api.omp_set_num_threads(1);
    const std::shared_ptr<const Primitive> probe = library->primitive(64, 64, 64, false, false, false, 1);
    api.omp_set_num_threads(had);
    const char* impl = nullptr;
    check(api.primitive_desc_query(probe->pd, dnnl_query_impl_info_str, 0, &impl), "primitive_desc_query", 64, 64,
          64);
    const std::string kernels = impl ? impl : "unknown";
    out.jit = kernels.rfind("ref", 0) != 0;  // "ref:any", "gemm:ref" are its portable C++ loops
    const dnnl_version_t* v = api.version();
    out.description = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                      std::to_string(v->patch) + " (" + kernels + " kernels)";
  } catch (const Error& e) {
    out.why = "oneDNN cannot run a float32 matmul here: " + std::string(e.what());
    return out;
  }
  out.library = std::move(library);
  return out;
}

}  // namespace

const Library* load(std::string& description, std::string& why, bool& jit) {
  // Never destroyed: primitives of a process that exits while other threads still compute stay valid, and no
  // oneDNN call runs during static destruction.
  static const Loaded& loaded = *new Loaded(load_once());
  description = loaded.description;
  why = loaded.why;
  jit = loaded.jit;
  return loaded.library.get();
}

namespace {

void run(const Library& library, const void* a, const void* b, float* c, std::int64_t m, std::int64_t k,
         std::int64_t n, bool transpose_a, bool transpose_b, bool bf16) {
  ThreadState& state = thread_state(library);
  // The thread's OpenMP ICV says how many threads oneDNN's parallel loops use (1: inline), and a primitive is
  // made for that count: set for this product, and put back as it was however the product ends, since the
  // thread may be the embedder's and its other OpenMP users (PyTorch, OpenBLAS's OpenMP build) read the same
  // ICV: weft leaves it as it found it (issue 45, item 15).
  const int threads = kernels::gemm_threads();
  struct Restore {
    const Library& library;
    int had;
    int set;
    ~Restore() {
      if (set != had) library.api.omp_set_num_threads(had);
    }
  } restore{library, library.api.omp_get_max_threads(), threads};
  if (threads != restore.had) library.api.omp_set_num_threads(threads);
  const std::shared_ptr<const Primitive> kept =
      library.primitive(m, k, n, transpose_a, transpose_b, bf16, threads);
  const Primitive& p = *kept;
  if (state.scratch.size() < p.scratch_bytes) state.scratch.resize(p.scratch_bytes);
  const Api& api = library.api;
  // Memory objects wrap the caller's buffers (no copies); they are a few words each, made per call. The C API
  // takes every handle as void*; oneDNN only reads the source and the weights.
  dnnl_memory_t memories[4] = {};
  struct Release {
    const Api& api;
    dnnl_memory_t* memories;
    ~Release() {
      for (int i = 0; i < 4; ++i) {
        if (memories[i]) api.memory_destroy(memories[i]);
      }
    }
  } release{api, memories};
  check(api.memory_create(&memories[0], &p.a, library.engine, const_cast<void*>(a)), "memory_create", m, k, n);
  check(api.memory_create(&memories[1], &p.b, library.engine, const_cast<void*>(b)), "memory_create", m, k, n);
  check(api.memory_create(&memories[2], &p.c, library.engine, c), "memory_create", m, k, n);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, memories[0]}, {DNNL_ARG_WEIGHTS, memories[1]}, {DNNL_ARG_DST, memories[2]}};
  int nargs = 3;
  if (p.scratch_bytes > 0) {
    check(api.memory_create(&memories[3], &p.scratch, library.engine, state.scratch.data()), "memory_create", m, k,
          n);
    args[nargs++] = {DNNL_ARG_SCRATCHPAD, memories[3]};
  }
  check(api.primitive_execute(p.primitive, state.stream, nargs, args), "primitive_execute", m, k, n);
}

// The kernels oneDNN's bfloat16 matmul runs here, once per process: "" when it has only reference loops for
// this CPU (no AVX512-BF16 or AMX: then weft's float32 path is faster and bfloat16 goes through it).
const std::string& bf16_kernels_once(const Library& library) {
  static const std::string& kernels = *new std::string([&]() -> std::string {
    try {
      thread_state(library);  // this thread's ICV at one thread, as the probe's key says
      const std::shared_ptr<const Primitive> probe = library.primitive(64, 64, 64, false, false, true, 1);
      const char* impl = nullptr;
      if (library.api.primitive_desc_query(probe->pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) {
        return "";
      }
      const std::string name = impl;
      return name.find("ref") != std::string::npos ? "" : name;
    } catch (const Error&) {
      return "";
    }
  }());
  return kernels;
}

}  // namespace

void matmul_f32(const Library& library, const float* a, const float* b, float* c, std::int64_t m, std::int64_t k,
                std::int64_t n, bool transpose_a, bool transpose_b) {
  run(library, a, b, c, m, k, n, transpose_a, transpose_b, false);
}

void matmul_bf16(const Library& library, const std::uint16_t* a, const std::uint16_t* b, float* c, std::int64_t m,
                 std::int64_t k, std::int64_t n, bool transpose_a, bool transpose_b) {
  run(library, a, b, c, m, k, n, transpose_a, transpose_b, true);
}

std::string bf16_kernels(const Library& library) { return bf16_kernels_once(library); }

#endif

}  // namespace weft::onednn
