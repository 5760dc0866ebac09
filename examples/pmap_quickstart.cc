// The reference notebook "Multi-IPUs in JAX: pmap quickstart" (shared/reference/jax_ipu_pmap_quickstart.ipynb),
// cell by cell, in C++ on 4 virtual CPU devices. The notebook's cells are named by their execution counts
// (In [N]); each cell that prints something starts its output with a "# cell N" line. The expected transcript
// is tests/data/pmap_quickstart.expected (the notebook's outputs, with our device names).
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include <weft/weft.hpp>

// Designated initializers ({.axis = "i"}) leave the other options at their defaults on purpose; GCC's
// -Wextra would call that a missing initializer.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using weft::Array;
using weft::Device;
using weft::Replica;
using weft::ShardedArray;

namespace {

// Python's pretty-printed list of devices, one per line; `indent` = the column the list starts at.
std::string device_list(const std::vector<Device>& devices, int indent = 0) {
  std::string text = "[";
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (i > 0) text += ",\n" + std::string(indent + 1, ' ');
    text += weft::to_string(devices[i]);
  }
  return text + "]";
}

// A multi-line repr nested `n` columns deep in a pretty-printed container: continuation lines shift right.
std::string indented(const std::string& text, int n) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += std::string(n, ' ');
  }
  return out;
}

}  // namespace

int main() {
  // In [1]: pip install of jax/jaxlib for IPUs (environment setup; nothing to reproduce).
  // In [2]: config.FLAGS.jax_ipu_device_count = 4 -- here: a runtime with 4 virtual devices.
  weft::Runtime rt({.device_count = 4});
  // In [3]: imports -- #include <weft/weft.hpp>.

  // In [7]: the platform and its devices.
  std::cout << "# cell 7\n";
  std::cout << "Platform=" << rt.platform() << "\n";
  std::cout << "Number of devices=" << rt.device_count() << "\n";
  const std::vector<Device> devices = rt.devices();
  std::cout << device_list(devices) << "\n";

  // ---- Basic pmap: pure map with no communication ----

  // In [8]-[10]: from jax import pmap, lax; num_devices, N; @pmap def square(x): return x ** 2.
  const auto num_devices = static_cast<std::int64_t>(rt.devices().size());
  const std::int64_t N = 3;
  auto square = weft::pmap([](const Array& x) { return weft::power(x, 2.0); });

  // In [11]: the first call prepares the program; replica i squares row i.
  std::cout << "# cell 11\n";
  const Array data = Array::arange(N * num_devices, weft::DType::f32).reshape({num_devices, -1});
  ShardedArray output = square(data);
  std::cout << "INPUT: " << weft::to_string(data) << "\n";
  std::cout << "OUTPUT: " << weft::to_string(output.to_host()) << " <class 'weft::ShardedArray'>\n";

  // In [12]: the second call reuses the prepared program; its input is already on the devices.
  std::cout << "# cell 12\n";
  output = square(output);
  std::cout << "OUTPUT: " << weft::to_string(output.to_host()) << "\n";

  // In [13]: the shards of the output live on different devices.
  std::cout << "# cell 13\n";
  std::cout << device_list(output.devices()) << "\n";

  // In [14]: move one shard to another device on the fly.
  std::cout << "# cell 14\n";
  const Array b = weft::device_put(output[1], devices[3]);
  std::cout << "(" << weft::repr(b, "DeviceArray") << ",\n " << weft::to_string(rt.device(b.device())) << ")\n";

  // In [15]: output[0:1] keeps the leading axis.
  std::cout << "# cell 15\n";
  std::cout << weft::repr(output.slice(0, 1), "DeviceArray") << "\n";

  // ---- Collective communication operations: a single pmap reduction across all devices ----

  // In [16]: normalize = partial(pmap, axis_name="i")(lambda x: x / lax.psum(x, axis_name="i")).
  auto normalize = weft::pmap([](Replica& r, const Array& x) { return x / r.psum(x, "i"); }, {.axis = "i"});

  // In [17]: two rows run on the first two devices.
  std::cout << "# cell 17\n";
  output = normalize(data.slice(0, 2));
  std::cout << weft::repr(output) << "\n";

  // In [18]: np.sum(np.asarray(output), axis=0) -- normalized across devices.
  std::cout << "# cell 18\n";
  std::cout << weft::repr(output.to_host().sum(0)) << "\n";

  // ---- pmap reduction across different replica groups ----

  // In [19]: nested pmap, 'rows' outside 'cols', normalizing over rows, cols and both.
  std::cout << "# cell 19\n";
  auto f = weft::pmap(
      [](Replica& r, const Array& x) {
        Array row_normed = x / r.psum(x, "rows");
        Array col_normed = x / r.psum(x, "cols");
        Array doubly_normed = x / r.psum(x, {"rows", "cols"});
        return std::tuple{row_normed, col_normed, doubly_normed};
      },
      {.mesh = {{"rows", 2}, {"cols", 2}}});
  const Array x = Array::arange(4, weft::DType::f32).reshape({2, 2});
  const auto outputs = f(x);
  const auto& [row_normed, col_normed, doubly_normed] = outputs;
  std::cout << "OUTPUTS: (" << weft::repr(row_normed) << ", " << weft::repr(col_normed) << ", "
            << weft::repr(doubly_normed) << ")\n";

  // ---- Manual data sharding ----

  // In [23]: rows 0, 1 onto the first two devices, rows 2, 3 onto the last two.
  const std::vector<Device> sub_devices0(devices.begin(), devices.begin() + 2);
  const std::vector<Device> sub_devices1(devices.begin() + 2, devices.end());
  const ShardedArray indata0 = weft::device_put_sharded({data[0], data[1]}, sub_devices0);
  const ShardedArray indata1 = weft::device_put_sharded({data[2], data[3]}, sub_devices1);

  // In [24]: one program per device subset.
  auto normalize_fn = [](Replica& r, const Array& v) { return v / r.psum(v, "i"); };
  auto normalize_fn2 = [](Replica& r, const Array& v) { return v / r.pmean(v, "i"); };
  auto normalize0 = weft::pmap(normalize_fn, {.axis = "i", .devices = sub_devices0});
  auto normalize1 = weft::pmap(normalize_fn2, {.axis = "i", .devices = sub_devices1});

  // In [25]: out0, out1 -- shown as IPython pretty-prints a tuple (items one column in).
  std::cout << "# cell 25\n";
  const ShardedArray out0 = normalize0(indata0);
  const ShardedArray out1 = normalize1(indata1);
  std::cout << "(" << indented(weft::repr(out0), 1) << ",\n " << indented(weft::repr(out1), 1) << ")\n";

  // In [26]: where the shards of out0 and out1 live.
  std::cout << "# cell 26\n";
  std::cout << "(" << device_list(out0.devices(), 1) << ",\n " << device_list(out1.devices(), 1) << ")\n";

  // ---- Collective permute between devices: Rule 30 on a ring split over the devices ----

  // In [21]: halo exchange with ppermute; (source, destination) pairs along the axis.
  const int device_count = rt.device_count();
  auto send_right = [device_count](Replica& r, const Array& v, const std::string& axis_name) {
    weft::Permutation perm;
    for (int i = 0; i < device_count; ++i) perm.emplace_back(i, (i + 1) % device_count);
    return r.ppermute(v, axis_name, perm);
  };
  auto send_left = [device_count](Replica& r, const Array& v, const std::string& axis_name) {
    weft::Permutation perm;
    for (int i = 0; i < device_count; ++i) perm.emplace_back((i + 1) % device_count, i);
    return r.ppermute(v, axis_name, perm);
  };
  auto update_board = [](const Array& board) {
    const std::int64_t n = board.shape()[0];
    const Array left = board.slice(0, n - 2);
    const Array right = board.slice(2, n);
    const Array center = board.slice(1, n - 1);
    return left ^ (center | right);
  };
  auto step = weft::pmap(
      [&](Replica& r, const Array& board_slice) {
        const std::int64_t n = board_slice.shape()[0];
        Array left = board_slice.slice(0, 1);
        Array right = board_slice.slice(n - 1, n);
        std::tie(right, left) = std::tuple{send_left(r, left, "i"), send_right(r, right, "i")};
        const Array enlarged_board_slice = Array::concatenate({left, board_slice, right});
        return update_board(enlarged_board_slice);
      },
      {.axis = "i"});
  auto print_board = [](const Array& board) {
    std::string line;
    for (double cell : board.to_doubles()) line += cell != 0 ? '*' : ' ';
    std::cout << line << "\n";
  };

  // In [22]: a 40-cell board with the middle cell set, 20 steps.
  std::cout << "# cell 22\n";
  std::vector<bool> cells(40, false);
  cells[cells.size() / 2] = true;
  const Array board = Array::from_vector(cells);
  const Array reshaped_board = board.reshape({device_count, -1});
  print_board(reshaped_board);
  ShardedArray stepped = step(reshaped_board);
  print_board(stepped.to_host());
  for (int i = 1; i < 20; ++i) {
    stepped = step(stepped);
    print_board(stepped.to_host());
  }
  return 0;
}
