// The program of the consumer projects (tests/package/consumer_test.cmake): what a new user writes first,
// built against an installed or embedded weft. A pmap with a psum over every device, and one over a 2-d
// mesh, each result checked element by element; exit 0 only if all are right. Run alone (8 devices) or
// under weftrun, where it also checks the documented shape of to_host() across instances
// (docs/using-weft.md): a process gets back only its own replicas, (local replicas, ...).
#include <cstdint>
#include <iostream>
#include <vector>

#include <weft/weft.hpp>

using namespace weft;

int main() {
  Runtime rt;  // WEFT_DEVICE_COUNT devices per process (weftrun sets it), default 8
  const std::int64_t n = rt.local_device_count(), total = rt.device_count();
  const std::int64_t first = static_cast<std::int64_t>(rt.process_index()) * n;
  int wrong = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++wrong;
      std::cerr << "consumer: wrong: " << what << '\n';
    }
  };

  // 1-d: each process passes its own rows (JAX's multi-process convention); row g holds g three times.
  auto total_sum = pmap([](Replica& r, const Array& x) { return r.psum(x, "i"); }, {.axis = "i", .runtime = &rt});
  Array rows = (Array::arange(n).reshape({n, 1}) + static_cast<double>(first)) * Array::ones({1, 3});
  const Array y = total_sum(rows).to_host();
  expect(y.shape() == Shape{n, 3}, "1-d result shape " + shape_str(y.shape()) + ", expected (local replicas, 3)");
  const double want = static_cast<double>(total * (total - 1) / 2);
  for (float v : y.to_vector<float>()) expect(v == want, "psum " + std::to_string(v) + ", expected " + std::to_string(want));

  // 2-d mesh (2, total/2): x[a][b] = 10a + b; psum over "b" gives 10a(total/2) + sum of b.
  const std::int64_t half = total / 2;
  auto row_sum = pmap([](Replica& r, const Array& x) { return r.psum(x, "b"); },
                      {.mesh = {{"a", 2}, {"b", static_cast<int>(half)}}, .runtime = &rt});
  Array grid = Array::arange(2).reshape({2, 1}) * 10.0 + Array::arange(half).reshape({1, half});
  const Array z = row_sum(grid).to_host();
  // One process holds the whole mesh: (2, total/2). Several: this process's replicas, flattened: (n,).
  const Shape want_shape = rt.process_count() == 1 ? Shape{2, half} : Shape{n};
  expect(z.shape() == want_shape, "mesh result shape " + shape_str(z.shape()) + ", expected " + shape_str(want_shape));
  const std::vector<float> zv = z.to_vector<float>();
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(zv.size()); ++k) {
    const std::int64_t a = (first + k) / half;  // global replica first + k sits at mesh position (a, b)
    const double row = static_cast<double>(10 * a * half + half * (half - 1) / 2);
    expect(zv[k] == row, "mesh psum element " + std::to_string(k) + " = " + std::to_string(zv[k]) + ", expected " +
                             std::to_string(row));
  }

  std::cout << "consumer: process " << rt.process_index() << " of " << rt.process_count() << ", " << total
            << " devices: psum " << (wrong ? "WRONG" : "ok") << '\n';
  return wrong ? 1 : 0;
}
