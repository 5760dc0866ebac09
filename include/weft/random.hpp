// Counter-based random numbers with JAX's key API (jax.random), on the threefry-2x32 block cipher with 20
// rounds, JAX's default PRNG. A key is a value: nothing here has state, so the same key gives the same
// numbers on any thread, replica, device count or process. Derive independent streams with split (several
// new keys) or fold_in (a key per replica, step or epoch: fold_in(key, r.index())), never by reusing a key.
//
//   random::Key key = random::key(0);
//   auto [init_key, data_key] = random::split2(key);
//   Array w = random::normal(init_key, {784, 512}) * 0.05;
//   Array order = random::permutation(random::fold_in(data_key, epoch), 60000);
//
// The algorithms are JAX's classic ones (jax_threefry_partitionable off, JAX's default before 0.5.0), bit for
// bit: key(seed) is [seed >> 32, seed & 0xffffffff], split(key, n) encrypts the counters 0..2n-1, random
// bits of a shape encrypt 0..size-1 (the two halves of the counter vector as the cipher's two words),
// uniform puts the top mantissa-many bits into [1, 2) and subtracts 1, normal is
// sqrt(2) * erfinv(uniform(nextafter(-1, 0), 1)) with XLA's erfinv, permutation stable-sorts by random keys.
// Checked against Random123's known answers and values JAX publishes (tests/unit/random_test.cc). Where
// weft and JAX can part:
//   - key(seed) keeps a 64-bit seed's high word, as JAX does with jax_enable_x64; JAX's default 32-bit mode
//     drops it (PRNGKey(2**32 + 5) == PRNGKey(5) there). Seeds below 2^32 agree in both modes.
//   - normal: the log1p inside erfinv is correctly rounded here; XLA uses each backend's own log1p, so a
//     last-bit difference from a given JAX build or device is possible (every published JAX value agrees).
//   - 16-bit floats round every step as the jaxpr says; XLA may fuse the steps in float32 (excess precision),
//     which can move the last bit of a 16-bit normal, or of a 16-bit uniform with a range other than [0, 1).
//   - bernoulli compares a float32 uniform with p (JAX's default for a Python float p; with x64 JAX would
//     draw float64), and permutation gives int32 below 2^31 (int64 from there on).
#pragma once
#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "weft/array.hpp"

namespace weft::random {

// JAX's raw key: two 32-bit words.
struct Key {
  std::array<std::uint32_t, 2> words{};
  bool operator==(const Key& other) const = default;
};
std::string to_string(const Key& key);  // "Key(0, 42)"
std::ostream& operator<<(std::ostream& os, const Key& key);

// The threefry-2x32 block cipher with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; Random123): encrypts the counter (x0, x1) under the key (k0, k1).
std::array<std::uint32_t, 2> threefry2x32(std::array<std::uint32_t, 2> key, std::array<std::uint32_t, 2> counter);

// jax.random.PRNGKey(seed).
Key key(std::uint64_t seed);
// jax.random.split(key, n): n new keys (n >= 0).
std::vector<Key> split(const Key& key, int n);
// split(key, 2) as a pair: auto [a, b] = split2(key).
std::pair<Key, Key> split2(const Key& key);
// jax.random.fold_in(key, data): a new key mixing in a 32-bit value (a replica index, a step number).
Key fold_in(const Key& key, std::uint32_t data);

// jax.random.bits: uint32 values, stored in an int64 array of `shape` (weft has no uint32 dtype).
Array bits(const Key& key, const Shape& shape);
// jax.random.uniform: floats in [minval, maxval) of `dtype` (any float dtype, each from its own number of
// random bits: 32, 64, 16 for float16, 8 for bfloat16). As in JAX, the scaled value can round up to maxval
// when the range is narrow for its magnitude, and maxval < minval gives minval everywhere.
Array uniform(const Key& key, const Shape& shape, DType dtype = DType::f32, double minval = 0.0, double maxval = 1.0);
// jax.random.normal: standard normal floats.
Array normal(const Key& key, const Shape& shape, DType dtype = DType::f32);
// jax.random.bernoulli: true with probability p.
Array bernoulli(const Key& key, double p, const Shape& shape);
// jax.random.permutation(key, n): a random ordering of 0..n-1 as int32 (int64 when n >= 2^31); n >= 0.
Array permutation(const Key& key, std::int64_t n);
// jax.random.permutation(key, x): x shuffled along its first axis (an integer scalar x means n = x).
Array permutation(const Key& key, const Array& x);

}  // namespace weft::random
