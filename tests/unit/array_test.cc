// weft::Array and DType: conversions (IEEE half / bfloat16 bit patterns), creation, views and copy-on-write,
// memory accounting, numpy broadcasting and promotion, elementwise ops, reductions, joins, and the messages
// of every error. Expected values are closed forms or hand-computed IEEE results, never our own output.
#include "weft/array.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/errors.hpp"
#include "weft/dtype.hpp"
#include "weft/error.hpp"
#include "weft/memory.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace array_test {

using D = std::vector<double>;

// Runs `f`, expects exception E, and checks that its message contains every one of `parts`.
template <class E = InvalidArgument>
void ExpectError(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::ExpectThrowsWith<E>(f, parts);
}

std::vector<std::uint16_t> bits16(const Array& a) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(a.size()));
  if (!out.empty()) std::memcpy(out.data(), a.bytes(), a.nbytes());
  return out;
}

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

// ---- DType ------------------------------------------------------------------------------------------

TEST(DType, SizesAndNames) {
  const std::vector<std::pair<std::size_t, std::string>> expected = {
      {4, "float32"}, {8, "float64"}, {2, "float16"}, {2, "bfloat16"}, {1, "int8"},
      {4, "int32"},   {8, "int64"},   {1, "uint8"},   {1, "bool"}};
  for (std::size_t i = 0; i < kAllDTypes.size(); ++i) {
    EXPECT_EQ(dtype_size(kAllDTypes[i]), expected[i].first);
    EXPECT_EQ(dtype_name(kAllDTypes[i]), expected[i].second);
    EXPECT_EQ(dtype_from_name(expected[i].second), kAllDTypes[i]);
  }
}

TEST(DType, UnknownNameNamesTheTextAndTheValidNames) {
  ExpectError([] { dtype_from_name("float"); }, {"'float'", "float32", "bfloat16", "bool", "uint8"});
}

TEST(DType, Kinds) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    EXPECT_TRUE(is_floating(t));
    EXPECT_FALSE(is_integer(t));
  }
  for (DType t : {DType::i8, DType::i32, DType::i64, DType::u8}) {
    EXPECT_TRUE(is_integer(t));
    EXPECT_FALSE(is_floating(t));
  }
  EXPECT_FALSE(is_integer(DType::boolean));
  EXPECT_FALSE(is_floating(DType::boolean));
  EXPECT_EQ(dtype_v<float>, DType::f32);
  EXPECT_EQ(dtype_v<bool>, DType::boolean);
  EXPECT_EQ(dtype_v<std::uint8_t>, DType::u8);
}

TEST(DType, Promotion) {
  EXPECT_EQ(promote_types(DType::i32, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::boolean, DType::u8), DType::u8);
  EXPECT_EQ(promote_types(DType::i32, DType::f32), DType::f32);
  EXPECT_EQ(promote_types(DType::i64, DType::bf16), DType::bf16);
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::bf16, DType::f16), DType::f32);
  EXPECT_EQ(promote_types(DType::u8, DType::i8), DType::i32);
  EXPECT_EQ(promote_types(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(promote_types(DType::i8, DType::i64), DType::i64);
  EXPECT_EQ(promote_types(DType::boolean, DType::f16), DType::f16);
}

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);  // 1365 / 4096
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);            // largest finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);            // below the midpoint to 65536
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);            // midpoint rounds to even = inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 units rounds up
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even (2)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie, even mantissa 0
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);   // tie, rounds up to even
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7C00);
  const std::uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0xFC00)) && half_to_float(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = half_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
    } else {
      ASSERT_EQ(float_to_half(f), bits) << b;
      ASSERT_EQ(double_to_half(static_cast<double>(f)), bits) << b;
    }
  }
}

TEST(BFloat16, KnownBitPatternsAndRoundTrip) {
  EXPECT_EQ(float_to_bf16(1.0f / 3.0f), 0x3EAB);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, rounds up to even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bf16_to_float(bits);
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), bits) << b;
    }
  }
}

TEST(Half, FromDoubleRoundsOnce) {
  // Just above the midpoint between 1 and 1 + 2^-10: through float it would land on the midpoint and round
  // down to even; rounded once it goes up.
  const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(float_to_half(static_cast<float>(above_tie)), 0x3C00);
  EXPECT_EQ(double_to_half(above_tie), 0x3C01);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  EXPECT_EQ(double_to_half(1.0 / 3.0), 0x3555);
  EXPECT_EQ(double_to_bf16(1.0 / 3.0), 0x3EAB);
}

// ---- creation ---------------------------------------------------------------------------------------

TEST(Array, DefaultIsEmptyFloat32) {
  Array a;
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.shape(), Shape{0});
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.nbytes(), 0u);
  EXPECT_EQ(a.device(), -1);
}

TEST(Array, ShapeHelpers) {
  EXPECT_EQ(num_elements({}), 1);
  EXPECT_EQ(num_elements({2, 3, 4}), 24);
  EXPECT_EQ(num_elements({2, 0}), 0);
  EXPECT_EQ(shape_str({2, 3}), "(2, 3)");
  EXPECT_EQ(shape_str({3}), "(3,)");
  EXPECT_EQ(shape_str({}), "()");
}

TEST(Array, FromVectorAndBack) {
  Array a = Array::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.ndim(), 2);
  EXPECT_EQ(a.nbytes(), 24u);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.value_at(4), 5.0);
  Array b = Array::from_list<bool>({true, false, true});
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_doubles(), (D{1, 0, 1}));
  Array i = Array::from_list<std::int64_t>({-5, 1LL << 40});
  EXPECT_EQ(i.to_vector<std::int64_t>(), (std::vector<std::int64_t>{-5, 1LL << 40}));
  EXPECT_EQ(Array::scalar(7.0, DType::i32).item<int>(), 7);
}

TEST(Array, FromBytesNormalisesBools) {
  const std::uint8_t raw[] = {0, 2, 255};
  Array b = Array::from_bytes(DType::boolean, {3}, raw);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{false, true, true}));
}

TEST(Array, FromDoublesConvertsPerDType) {
  EXPECT_EQ(Array::from_doubles({1.5, -2.25}, {2}, DType::f64).to_doubles(), (D{1.5, -2.25}));
  EXPECT_EQ(Array::from_doubles({0.1}, {1}, DType::f32).to_vector<float>()[0], 0.1f);
  EXPECT_EQ(bits16(Array::from_doubles({1.0 / 3.0, 65504, 1e6}, {3}, DType::f16)),
            (std::vector<std::uint16_t>{0x3555, 0x7BFF, 0x7C00}));
  EXPECT_EQ(bits16(Array::from_doubles({1.0 / 3.0, 1.0}, {2}, DType::bf16)), (std::vector<std::uint16_t>{0x3EAB, 0x3F80}));
  // Integers truncate toward zero; 8-bit values wrap like numpy's C casts.
  EXPECT_EQ(Array::from_doubles({-1.7, 1.7, 300, -129}, {4}, DType::i8).to_doubles(), (D{-1, 1, 44, 127}));
  EXPECT_EQ(Array::from_doubles({-1, 256.5, 3.99}, {3}, DType::u8).to_doubles(), (D{255, 0, 3}));
  EXPECT_EQ(Array::from_doubles({-2.5, 2147483647.0}, {2}, DType::i32).to_doubles(), (D{-2, 2147483647.0}));
  EXPECT_EQ(Array::from_doubles({1e300}, {1}, DType::i64).to_vector<std::int64_t>()[0],
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(Array::from_doubles({0, 0.5, -3, std::nan("")}, {4}, DType::boolean).to_doubles(), (D{0, 1, 1, 1}));
  ExpectError([] { Array::from_doubles({1, 2, 3}, {2, 2}, DType::f32); }, {"3 values", "(2, 2)"});
}

TEST(Array, EveryDTypeHoldsSmallIntegersExactly) {
  for (DType t : kAllDTypes) {
    const D values = t == DType::boolean ? D{0, 1, 1, 0} : D{0, 1, 2, 100};
    Array a = Array::from_doubles(values, {2, 2}, t);
    EXPECT_EQ(a.dtype(), t);
    EXPECT_EQ(a.nbytes(), 4 * dtype_size(t));
    EXPECT_EQ(a.to_doubles(), values) << dtype_name(t);
    EXPECT_EQ(Array::arange(4, t).shape(), Shape{4});
    EXPECT_EQ(Array::zeros({3}, t).to_doubles(), (D{0, 0, 0})) << dtype_name(t);
    EXPECT_EQ(Array::ones({2}, t).to_doubles(), (D{1, 1})) << dtype_name(t);
    for (DType u : kAllDTypes) {
      if (u == DType::boolean && t != DType::boolean) continue;  // 2 and 100 become True
      EXPECT_EQ(a.astype(u).astype(t).to_doubles(), values) << dtype_name(t) << " via " << dtype_name(u);
    }
  }
}

TEST(Array, CreationHelpers) {
  EXPECT_EQ(Array::arange(5).to_doubles(), (D{0, 1, 2, 3, 4}));
  EXPECT_EQ(Array::arange(5).dtype(), DType::f32);
  EXPECT_EQ(Array::arange(0).size(), 0);
  EXPECT_EQ(Array::arange(3, DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(Array::full({2, 2}, 2.5).to_doubles(), (D{2.5, 2.5, 2.5, 2.5}));
  Array s = Array::scalar(3.0);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(s.item<float>(), 3.0f);
  ExpectError([] { Array::arange(-1); }, {"arange", "-1"});
  ExpectError([] { Array::zeros({2, -3}); }, {"negative dimensions", "(2, -3)"});
}

TEST(Array, ValueAtAndTypedAccessCheck) {
  Array a = Array::arange(4);
  ExpectError([&] { a.value_at(4); }, {"index 4 is out of bounds for size 4"});
  ExpectError([&] { a.data<double>(); }, {"float32", "float64"});
}

TEST(Array, ConstructorChecksTheBufferSize) {
  auto buffer = std::make_shared<Buffer>(16, nullptr);
  Array ok(DType::f32, {2}, buffer, 8);
  EXPECT_EQ(ok.size(), 2);
  ExpectError([&] { Array(DType::f32, {3}, buffer, 8); }, {"(3,)", "offset 8", "needs 12 bytes", "holds 16"});
}

// ---- buffers, memory accounting -------------------------------------------------------------------------

TEST(Buffer, IsAlignedAndCharged) {
  auto account = std::make_shared<MemoryAccount>("cpu:0", 0);
  {
    Buffer b(100, account);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
    EXPECT_EQ(b.size(), 100u);
    EXPECT_EQ(account->in_use(), 100);
    Buffer empty(0, account);
    EXPECT_NE(empty.data(), nullptr);
  }
  EXPECT_EQ(account->in_use(), 0);
}

TEST(MemoryAccount, ExhaustionMessage) {
  MemoryAccount account("cpu:3", 1000);
  account.charge(800);
  ExpectError<OutOfMemoryError>([&] { account.charge(300); },
                                {"device memory exhausted on cpu:3: asked 300 bytes, 200 bytes free of 1000"});
  EXPECT_EQ(account.in_use(), 800);
  account.release(800);
  account.charge(1000);
  EXPECT_EQ(account.in_use(), 1000);
}

TEST(MemoryAccount, UnlimitedWhenCapacityIsZero) {
  MemoryAccount account("host", 0);
  account.charge(std::int64_t{1} << 50);
  EXPECT_EQ(account.in_use(), std::int64_t{1} << 50);
}

TEST(MemoryAccount, ConcurrentChargesNeverExceedCapacity) {
  MemoryAccount account("cpu:0", 5000);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        try {
          account.charge(1);
          ++granted;
        } catch (const OutOfMemoryError&) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted.load(), 5000);
  EXPECT_EQ(account.in_use(), 5000);
}

TEST(MemoryAccount, ArraysChargeTheirAccountAndOomNamesTheDevice) {
  auto account = std::make_shared<MemoryAccount>("cpu:1", 64);
  {
    Array a = Array::empty({10}, DType::f32, account, 1);
    EXPECT_EQ(account->in_use(), 40);
    EXPECT_EQ(a.device(), 1);
    ExpectError<OutOfMemoryError>([&] { Array::empty({10}, DType::f32, account, 1); },
                                  {"device memory exhausted on cpu:1: asked 40 bytes, 24 bytes free of 64"});
    // copy() stays on the device, so it is charged there too, and does not fit.
    ExpectError<OutOfMemoryError>([&] { a.copy(); }, {"cpu:1", "asked 40 bytes"});
    // Copy-on-write detaches into the same account as well.
    Array b = a;
    ExpectError<OutOfMemoryError>([&] { b.mutable_bytes(); }, {"cpu:1"});
    EXPECT_EQ(account->in_use(), 40);
  }
  EXPECT_EQ(account->in_use(), 0);
}

TEST(MemoryAccount, DefaultAccountOfTheThreadIsCharged) {
  auto account = std::make_shared<MemoryAccount>("cpu:2", 0);
  {
    ScopedMemoryAccount scope(account);
    Array a = Array::zeros({4}, DType::f64);
    EXPECT_EQ(account->in_use(), 32);
  }
  EXPECT_EQ(account->in_use(), 0);
  Array host = Array::zeros({4});
  EXPECT_EQ(host.buffer()->account(), nullptr);
}

// ---- views and copy-on-write ----------------------------------------------------------------------------

TEST(CopyOnWrite, CopiesSharePointersUntilWritten) {
  Array a = Array::arange(4);
  Array b = a;
  EXPECT_TRUE(b.shares_buffer_with(a));
  b.mutable_data<float>()[0] = 42;
  EXPECT_FALSE(b.shares_buffer_with(a));
  EXPECT_EQ(a.to_doubles(), (D{0, 1, 2, 3}));
  EXPECT_EQ(b.to_doubles(), (D{42, 1, 2, 3}));
}

TEST(CopyOnWrite, SoleOwnerWritesInPlace) {
  Array a = Array::arange(4);
  const std::byte* before = a.bytes();
  a.mutable_bytes();
  EXPECT_EQ(a.bytes(), before);
}

TEST(CopyOnWrite, ViewsShareAndDetachOnWrite) {
  Array a = Array::arange(6).reshape({2, 3});
  Array row = a[1];
  EXPECT_TRUE(row.shares_buffer_with(a));
  EXPECT_EQ(row.offset(), 12u);
  EXPECT_EQ(row.to_doubles(), (D{3, 4, 5}));
  row.mutable_data<float>()[0] = -1;
  EXPECT_FALSE(row.shares_buffer_with(a));
  EXPECT_EQ(row.to_doubles(), (D{-1, 4, 5}));
  EXPECT_EQ(a.to_doubles(), (D{0, 1, 2, 3, 4, 5}));
  // A view that is the only holder of a larger buffer still copies (it does not cover it).
  Array lone = Array::arange(6).reshape({2, 3})[0];
  const std::byte* before = lone.bytes();
  lone.mutable_bytes();
  EXPECT_NE(lone.bytes(), before);
  EXPECT_EQ(lone.to_doubles(), (D{0, 1, 2}));
}

TEST(CopyOnWrite, InPlaceOperatorsDoNotTouchOtherHolders) {
  Array a = Array::arange(3);
  Array b = a;
  b += Array::ones({3});
  EXPECT_EQ(a.to_doubles(), (D{0, 1, 2}));
  EXPECT_EQ(b.to_doubles(), (D{1, 2, 3}));
  b *= Array::scalar(2.0);
  EXPECT_EQ(b.to_doubles(), (D{2, 4, 6}));
  b -= Array::scalar(1.0);
  b /= Array::scalar(2.0);
  EXPECT_EQ(b.to_doubles(), (D{0.5, 1.5, 2.5}));
}

TEST(CopyOnWrite, InPlaceBroadcastsTheRightHandSide) {
  Array m = Array::zeros({2, 3}, DType::i32);
  m += Array::from_list<std::int32_t>({1, 2, 3});
  EXPECT_EQ(m.to_doubles(), (D{1, 2, 3, 1, 2, 3}));
  m /= Array::scalar(2.0, DType::i32);  // true division then cast back to int32 (truncation)
  EXPECT_EQ(m.dtype(), DType::i32);
  EXPECT_EQ(m.to_doubles(), (D{0, 1, 1, 0, 1, 1}));
  Array v = Array::zeros({3});
  ExpectError([&] { v += Array::zeros({2, 3}); }, {"output operand with shape (3,)", "broadcast shape (2, 3)"});
}

TEST(Views, ReshapeIsAViewAndInfersOneDimension) {
  Array a = Array::arange(6);
  Array b = a.reshape({3, -1});
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_TRUE(b.shares_buffer_with(a));
  EXPECT_EQ(b.to_doubles(), (D{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b[2].to_doubles(), (D{4, 5}));
  EXPECT_EQ(Array::scalar(5).reshape({1}).shape(), Shape{1});
}

TEST(Views, ReshapeErrors) {
  Array a = Array::arange(6);
  ExpectError([&] { a.reshape({4, 2}); }, {"reshape: cannot reshape array of size 6 into shape (4, 2)"});
  ExpectError([&] { a.reshape({4, -1}); }, {"cannot reshape array of size 6 into shape (4, -1)"});
  ExpectError([&] { a.reshape({-1, -1}); }, {"only specify one unknown dimension"});
  EXPECT_EQ(Array::scalar(1).reshape({1, 1}).shape(), (Shape{1, 1}));
}

TEST(Views, IndexAndSlice) {
  Array a = Array::arange(12).reshape({4, 3});
  EXPECT_EQ(a[-1].to_doubles(), (D{9, 10, 11}));
  EXPECT_EQ(a[2][1].ndim(), 0);
  EXPECT_EQ(a[2][1].item<float>(), 7.0f);
  ExpectError([&] { a[4]; }, {"index 4 is out of bounds for axis 0 with size 4"});
  ExpectError([&] { a[-5]; }, {"index -5 is out of bounds for axis 0 with size 4"});
  ExpectError([] { Array::scalar(1)[0]; }, {"too many indices", "0-dimensional"});
  Array s = a.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_TRUE(s.shares_buffer_with(a));
  EXPECT_EQ(s.to_doubles(), (D{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(a.slice(-1, 100).to_doubles(), (D{9, 10, 11}));
  EXPECT_EQ(a.slice(3, 1).shape(), (Shape{0, 3}));
}

TEST(Views, SqueezeExpandDims) {
  Array a = Array::arange(3).reshape({1, 3, 1});
  EXPECT_EQ(a.squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(a.squeeze(-1).shape(), (Shape{1, 3}));
  ExpectError([&] { a.squeeze(1); }, {"squeeze", "size not equal to one"});
  ExpectError([&] { a.squeeze(3); }, {"axis 3 is out of bounds for array of dimension 3"});
  EXPECT_EQ(Array::arange(3).expand_dims(0).shape(), (Shape{1, 3}));
  EXPECT_EQ(Array::arange(3).expand_dims(-1).shape(), (Shape{3, 1}));
  EXPECT_TRUE(a.squeeze(0).shares_buffer_with(a));
}

TEST(Views, CopyKeepsDeviceAndAccount) {
  auto account = std::make_shared<MemoryAccount>("cpu:5", 0);
  Array a = Array::empty({4}, DType::f32, account, 5);
  std::fill(a.mutable_data<float>().begin(), a.mutable_data<float>().end(), 2.0f);
  Array c = a.copy();
  EXPECT_FALSE(c.shares_buffer_with(a));
  EXPECT_EQ(c.device(), 5);
  EXPECT_EQ(c.buffer()->account(), account);
  EXPECT_EQ(account->in_use(), 32);
  EXPECT_TRUE(c.identical(a));
  Array moved = a.with_device(7);
  EXPECT_EQ(moved.device(), 7);
  EXPECT_TRUE(moved.shares_buffer_with(a));
}

TEST(Views, Identical) {
  Array a = Array::from_list<float>({0.0f, 1.0f});
  EXPECT_TRUE(a.identical(Array::from_list<float>({0.0f, 1.0f})));
  EXPECT_FALSE(a.identical(Array::from_list<float>({-0.0f, 1.0f})));  // bytes differ
  EXPECT_FALSE(a.identical(Array::from_list<double>({0.0, 1.0})));
  EXPECT_FALSE(a.identical(a.reshape({2, 1})));
}

// ---- joins and copies ---------------------------------------------------------------------------------

TEST(Joins, Concatenate) {
  Array a = Array::arange(6).reshape({2, 3});
  Array b = Array::arange(4).reshape({2, 2}) + 10.0;
  EXPECT_EQ(Array::concatenate({a, b}, 1).to_doubles(), (D{0, 1, 2, 10, 11, 3, 4, 5, 12, 13}));
  EXPECT_EQ(Array::concatenate({a, a}, 0).shape(), (Shape{4, 3}));
  EXPECT_EQ(Array::concatenate({a, a}, -2).to_doubles(), (D{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  Array mixed = Array::concatenate({Array::arange(2, DType::i32), Array::from_list<double>({0.5})});
  EXPECT_EQ(mixed.dtype(), DType::f64);
  EXPECT_EQ(mixed.to_doubles(), (D{0, 1, 0.5}));
  ExpectError([&] { Array::concatenate({a, b}, 0); },
              {"along dimension 1, the array at index 0 has size 3 and the array at index 1 has size 2"});
  ExpectError([] { Array::concatenate({}); }, {"need at least one array"});
  ExpectError([&] { Array::concatenate({a, Array::arange(3)}); }, {"same number of dimensions"});
  ExpectError([] { Array::concatenate({Array::scalar(1)}); }, {"zero-dimensional"});
}

TEST(Joins, Stack) {
  Array a = Array::from_list<float>({1, 2});
  Array b = Array::from_list<float>({3, 4});
  Array s0 = Array::stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2}));
  EXPECT_EQ(s0.to_doubles(), (D{1, 2, 3, 4}));
  Array s1 = Array::stack({a, b}, 1);
  EXPECT_EQ(s1.to_doubles(), (D{1, 3, 2, 4}));
  EXPECT_EQ(Array::stack({a, b}, -1).to_doubles(), (D{1, 3, 2, 4}));
  EXPECT_EQ(Array::stack({Array::scalar(1), Array::scalar(2)}).shape(), Shape{2});
  ExpectError([&] { Array::stack({a, Array::arange(3)}); }, {"same shape", "(2,)", "(3,)"});
  ExpectError([&] { Array::stack({a, b}, 2); }, {"axis 2 is out of bounds for array of dimension 2"});
}

TEST(Joins, MoveaxisAndSliceAxis) {
  Array a = Array::arange(24).reshape({2, 3, 4});
  Array m = a.moveaxis(0, -1);
  ASSERT_EQ(m.shape(), (Shape{3, 4, 2}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(m.value_at((j * 4 + k) * 2 + i), i * 12 + j * 4 + k);
      }
  EXPECT_EQ(a.moveaxis(2, 0).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(a.moveaxis(1, 1).to_doubles(), a.to_doubles());
  Array s = a.slice_axis(2, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s[1][2].to_doubles(), (D{21, 22}));
  EXPECT_EQ(a.slice_axis(-2, -1, 10).to_doubles(), (D{8, 9, 10, 11, 20, 21, 22, 23}));
  ExpectError([&] { a.moveaxis(3, 0); }, {"axis 3 is out of bounds for array of dimension 3"});
}

TEST(Astype, Semantics) {
  Array f = Array::from_list<float>({-1.7f, -0.5f, 0.0f, 1.7f, 2.5f});
  EXPECT_EQ(f.astype(DType::i32).to_doubles(), (D{-1, 0, 0, 1, 2}));
  EXPECT_EQ(f.astype(DType::boolean).to_doubles(), (D{1, 1, 0, 1, 1}));
  EXPECT_EQ(Array::from_list<bool>({true, false}).astype(DType::f32).to_doubles(), (D{1, 0}));
  EXPECT_EQ(bits16(Array::from_list<std::int32_t>({1, 65504, 70000}).astype(DType::f16)),
            (std::vector<std::uint16_t>{0x3C00, 0x7BFF, 0x7C00}));
  EXPECT_EQ(bits16(Array::from_list<double>({1.0 / 3.0}).astype(DType::bf16)), std::vector<std::uint16_t>{0x3EAB});
  EXPECT_EQ(Array::from_list<std::int32_t>({300, -1}).astype(DType::u8).to_doubles(), (D{44, 255}));
  Array same = f.astype(DType::f32);
  EXPECT_TRUE(same.shares_buffer_with(f));
}

// ---- elementwise ------------------------------------------------------------------------------------------

TEST(Elementwise, Broadcasting) {
  Array m = Array::arange(6).reshape({2, 3});
  EXPECT_EQ((m + Array::from_list<float>({10, 20, 30})).to_doubles(), (D{10, 21, 32, 13, 24, 35}));
  Array col = Array::from_list<float>({1, 2}).reshape({2, 1});
  Array row = Array::from_list<float>({1, 10, 100}).reshape({1, 3});
  Array outer = col * row;
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  EXPECT_EQ(outer.to_doubles(), (D{1, 10, 100, 2, 20, 200}));
  EXPECT_EQ((Array::scalar(1) + m).shape(), (Shape{2, 3}));
  EXPECT_EQ((m - Array::zeros({0, 1, 3})).shape(), (Shape{0, 2, 3}));
  ExpectError([&] { m + Array::arange(4); }, {"operands could not be broadcast together with shapes (2, 3) (4,)"});
}

TEST(Elementwise, PromotionAndWeakScalars) {
  Array i = Array::from_list<std::int32_t>({1, 2, 3});
  Array times = i * 2.0;
  EXPECT_EQ(times.dtype(), DType::i32);
  EXPECT_EQ(times.to_doubles(), (D{2, 4, 6}));
  Array half = i / 2.0;
  EXPECT_EQ(half.dtype(), DType::f32);
  EXPECT_EQ(half.to_doubles(), (D{0.5, 1, 1.5}));
  EXPECT_EQ((i / i).dtype(), DType::f32);
  EXPECT_EQ((Array::from_list<bool>({true}) / Array::from_list<bool>({true})).dtype(), DType::f32);
  EXPECT_EQ((1.0 / Array::from_list<float>({4})).to_doubles(), (D{0.25}));
  EXPECT_EQ((10.0 - i).to_doubles(), (D{9, 8, 7}));
  EXPECT_EQ((i + Array::from_list<float>({0.5f, 0.5f, 0.5f})).dtype(), DType::f32);
  EXPECT_EQ((Array::arange(2, DType::f16) + Array::arange(2, DType::bf16)).dtype(), DType::f32);
  EXPECT_EQ((Array::arange(2, DType::u8) + Array::arange(2, DType::i8)).dtype(), DType::i32);
  EXPECT_EQ((Array::arange(2, DType::f32) + Array::arange(2, DType::f64)).dtype(), DType::f64);
  Array b = Array::from_list<bool>({true, false}) + Array::from_list<bool>({true, false});
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_doubles(), (D{1, 0}));
}

TEST(Elementwise, SixteenBitFloatsComputeInFloat32AndRound) {
  // 2049 is not a float16: 2048 + 1 rounds (to even) back to 2048; bfloat16 keeps 8 bits: 256 + 1 -> 256.
  EXPECT_EQ((Array::full({1}, 2048, DType::f16) + 1.0).to_doubles(), (D{2048}));
  EXPECT_EQ((Array::full({1}, 2048, DType::f16) + 3.0).to_doubles(), (D{2052}));
  EXPECT_EQ((Array::full({1}, 256, DType::bf16) + 1.0).to_doubles(), (D{256}));
  EXPECT_EQ(bits16(Array::ones({1}, DType::f16) / Array::full({1}, 3, DType::f16)), std::vector<std::uint16_t>{0x3555});
}

TEST(Elementwise, IntegerArithmeticWraps) {
  EXPECT_EQ((Array::full({1}, 127, DType::i8) + 1.0).to_doubles(), (D{-128}));
  EXPECT_EQ((Array::full({1}, 255, DType::u8) + 1.0).to_doubles(), (D{0}));
  EXPECT_EQ((Array::full({1}, 2147483647, DType::i32) + 1.0).to_doubles(), (D{-2147483648.0}));
  EXPECT_EQ((Array::full({1}, 65536, DType::i32) * 65536.0).to_doubles(), (D{0}));
  EXPECT_EQ((-Array::full({1}, -128, DType::i8)).to_doubles(), (D{-128}));
}

TEST(Elementwise, Power) {
  Array x = Array::arange(4);
  EXPECT_EQ(power(x, 2).to_doubles(), (D{0, 1, 4, 9}));
  EXPECT_EQ(power(x, 0.5).to_doubles()[1], 1.0);
  EXPECT_EQ(power(x, 0.5).to_vector<float>()[2], std::sqrt(2.0f));
  EXPECT_EQ(power(Array::full({1}, 3, DType::i64), 39).to_vector<std::int64_t>()[0], 4052555153018976267LL);
  EXPECT_EQ(power(Array::full({1}, 2, DType::i32), 31).to_doubles(), (D{-2147483648.0}));  // wraps
  EXPECT_EQ(power(Array::from_list<std::int32_t>({2, 3}), Array::from_list<std::int32_t>({10, 0})).to_doubles(),
            (D{1024, 1}));
  ExpectError([] { power(Array::arange(2, DType::i32), -1); }, {"negative integer powers"});
}

TEST(Elementwise, ComparisonsGiveBool) {
  Array a = Array::from_list<float>({1, 2, 3});
  Array b = Array::from_list<float>({3, 2, 1});
  EXPECT_EQ((a < b).dtype(), DType::boolean);
  EXPECT_EQ((a < b).to_doubles(), (D{1, 0, 0}));
  EXPECT_EQ((a <= b).to_doubles(), (D{1, 1, 0}));
  EXPECT_EQ((a > b).to_doubles(), (D{0, 0, 1}));
  EXPECT_EQ((a >= b).to_doubles(), (D{0, 1, 1}));
  EXPECT_EQ(equal(a, b).to_doubles(), (D{0, 1, 0}));
  EXPECT_EQ(not_equal(a, b).to_doubles(), (D{1, 0, 1}));
  Array nan = Array::full({1}, std::nan(""));
  EXPECT_EQ(equal(nan, nan).to_doubles(), (D{0}));
  EXPECT_EQ(not_equal(nan, nan).to_doubles(), (D{1}));
  EXPECT_EQ((Array::arange(3, DType::i32) < Array::scalar(1.5)).to_doubles(), (D{1, 1, 0}));  // int vs float
}

TEST(Elementwise, BitwiseAndLogical) {
  Array a = Array::from_list<std::int32_t>({12, -1});
  Array b = Array::from_list<std::int32_t>({10, 5});
  EXPECT_EQ((a & b).to_doubles(), (D{8, 5}));
  EXPECT_EQ((a | b).to_doubles(), (D{14, -1}));
  EXPECT_EQ((a ^ b).to_doubles(), (D{6, -6}));
  EXPECT_EQ((~a).to_doubles(), (D{-13, 0}));
  EXPECT_EQ((~Array::from_list<std::uint8_t>({0})).to_doubles(), (D{255}));
  Array t = Array::from_list<bool>({true, true, false, false});
  Array u = Array::from_list<bool>({true, false, true, false});
  EXPECT_EQ((t & u).to_doubles(), (D{1, 0, 0, 0}));
  EXPECT_EQ((t | u).to_doubles(), (D{1, 1, 1, 0}));
  EXPECT_EQ((t ^ u).to_doubles(), (D{0, 1, 1, 0}));
  EXPECT_EQ((~t).to_doubles(), (D{0, 0, 1, 1}));
  EXPECT_EQ((t & u).dtype(), DType::boolean);
  ExpectError([] { Array::arange(2) & Array::arange(2); }, {"bitwise_and", "float32"});
  ExpectError([] { Array::arange(2, DType::i32) | Array::arange(2, DType::f16); }, {"bitwise_or", "float16"});
  ExpectError([] { ~Array::arange(2, DType::f64); }, {"invert", "float64"});
  ExpectError([] { Array::ones({1}, DType::boolean) - Array::ones({1}, DType::boolean); }, {"subtract", "bool"});
  ExpectError([] { -Array::ones({1}, DType::boolean); }, {"negative", "bool"});
}

TEST(Elementwise, UnaryMinus) {
  EXPECT_EQ((-Array::from_list<float>({1, -2})).to_doubles(), (D{-1, 2}));
  EXPECT_TRUE(std::signbit((-Array::zeros({1})).value_at(0)));
  EXPECT_EQ((-Array::from_list<std::int64_t>({5})).to_doubles(), (D{-5}));
  EXPECT_EQ(bits16(-Array::ones({1}, DType::bf16)), std::vector<std::uint16_t>{0xBF80});
}

// ---- contiguous fast paths and in-place compound assignment -------------------------------------------------

// Element i of `shape` read from an operand of shape `in` broadcast to it (row-major, numpy's rule).
std::int64_t BroadcastIndex(std::int64_t flat, const Shape& out, const Shape& in) {
  std::int64_t index = 0, stride = 1;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::size_t d = out.size() - 1 - k;
    const std::int64_t coord = flat % out[d];
    flat /= out[d];
    if (k < in.size()) {
      const std::int64_t size = in[in.size() - 1 - k];
      if (size != 1) index += coord * stride;
      stride *= size;
    }
  }
  return index;
}

// The value `op` gives for one pair of elements of type C, written as the plain C++ expression (integers
// wrap through the unsigned type, integer division is float32 division, maximum/minimum follow numpy).
template <class C>
C ScalarOp(char op, C a, C b) {
  using U = std::make_unsigned_t<std::conditional_t<std::is_integral_v<C>, C, int>>;
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case '+': return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
      case '-': return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
      case '*': return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
      case 'M': return a < b ? b : a;
      case 'm': return b < a ? b : a;
    }
  } else {
    switch (op) {
      case '+': return a + b;
      case '-': return a - b;
      case '*': return a * b;
      case '/': return a / b;
      case 'M': return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? b : a);
      case 'm': return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
    }
  }
  return C{};
}

Array ApplyOp(char op, const Array& a, const Array& b) {
  switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    case '/': return a / b;
    case 'M': return maximum(a, b);
    case 'm': return minimum(a, b);
  }
  return {};
}

template <class C>
std::vector<C> SampleValues(std::int64_t n, int salt) {
  std::vector<C> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = (i * 37 + salt * 11) % 23 - 11;
    if constexpr (std::is_floating_point_v<C>) {
      v[i] = static_cast<C>(k) / C(3);  // inexact quotients, so rounding shows
    } else {
      v[i] = static_cast<C>(k * 13);
    }
  }
  if constexpr (std::is_floating_point_v<C>) {
    if (n > 5) {
      v[1] = std::numeric_limits<C>::quiet_NaN();
      v[3] = std::numeric_limits<C>::infinity();
      v[4] = -C(0);
    }
  } else if (n > 2) {
    v[2] = std::numeric_limits<C>::max();  // + anything wraps
    v[n - 1] = std::numeric_limits<C>::min();
  }
  return v;
}

template <class C>
void CheckLayouts() {
  // Equal shapes, a scalar on either side (also a size-1 array of higher rank), a row repeated along the
  // leading axes on either side (the bias add), and layouts only the generic walk handles. Sizes are odd so
  // vector loops have tails.
  struct Layout {
    Shape a, b, out;
  };
  const std::vector<Layout> layouts = {
      {{3, 37}, {3, 37}, {3, 37}},          {{3, 37}, {}, {3, 37}},           {{}, {3, 37}, {3, 37}},
      {{1, 1}, {3, 37}, {3, 37}},           {{5, 37}, {37}, {5, 37}},         {{37}, {5, 37}, {5, 37}},
      {{2, 3, 37}, {3, 37}, {2, 3, 37}},    {{2, 3, 37}, {1, 37}, {2, 3, 37}}, {{3, 1}, {1, 37}, {3, 37}},
      {{1, 37}, {3, 1}, {3, 37}},           {{2, 1, 37}, {3, 37}, {2, 3, 37}}};
  const std::string ops = std::is_integral_v<C> ? "+-*Mm" : "+-*/Mm";
  for (const Layout& layout : layouts) {
    const Shape& sa = layout.a;
    const Shape& sb = layout.b;
    const Shape& shape = layout.out;
    const std::vector<C> va = SampleValues<C>(num_elements(sa), 1), vb = SampleValues<C>(num_elements(sb), 2);
    const Array a = Array::from_vector(va, sa.empty() ? Shape{1} : sa).reshape(sa);
    const Array b = Array::from_vector(vb, sb.empty() ? Shape{1} : sb).reshape(sb);
    for (char op : ops) {
      const Array got = ApplyOp(op, a, b);
      ASSERT_EQ(got.shape(), shape) << op << shape_str(sa) << shape_str(sb);
      std::vector<C> expected(static_cast<std::size_t>(num_elements(shape)));
      for (std::int64_t i = 0; i < num_elements(shape); ++i) {
        expected[i] = ScalarOp<C>(op, va[BroadcastIndex(i, shape, sa)], vb[BroadcastIndex(i, shape, sb)]);
      }
      const Array want = Array::from_vector(expected, shape);
      EXPECT_TRUE(got.identical(want)) << dtype_name(want.dtype()) << " " << op << " " << shape_str(sa) << " "
                                       << shape_str(sb) << "\ngot  " << to_string(got)
                                       << "\nwant " << to_string(want);
    }
  }
}

TEST(Elementwise, FastPathsAreBitwiseTheScalarExpression) {
  CheckLayouts<float>();
  CheckLayouts<double>();
  CheckLayouts<std::int8_t>();
  CheckLayouts<std::uint8_t>();
  CheckLayouts<std::int32_t>();
  CheckLayouts<std::int64_t>();
}

TEST(Elementwise, FastAndGenericPathsAgreeOnTheSameValues) {
  // (4, 6) + (6,) takes the bias-row loop; the same values as (4, 6) + (4, 6) take the equal-shape loop, and
  // as (4, 1, 6) + (1, 3, 6) [sliced back] the generic walk. All three must agree bit for bit.
  const Array x = Array::from_doubles({0.1, -0.7, 1e30, -1e-30, 3.3, 7.1, 0.2, 0.3, -0.0, 2.5, 1e-8, 9.9,
                                       -4.4, 5.5, 6.6, -7.7, 8.8, -9.9, 0.12, 0.23, 0.34, 0.45, 0.56, 0.67},
                                      {4, 6}, DType::f32);
  const Array bias = Array::from_doubles({0.3, 1.7, -1e30, 1e-30, -3.3, 0.01}, {6}, DType::f32);
  const Array bias_full = Array::stack({bias, bias, bias, bias});
  const Array generic = (x.reshape({4, 1, 6}) * Array::ones({1, 3, 6})) / bias.reshape({1, 1, 6});
  for (int k = 0; k < 3; ++k) {
    const Array slice = generic.moveaxis(1, 0)[k];
    EXPECT_TRUE(slice.identical(x / bias_full)) << k;
    EXPECT_TRUE(slice.identical(x / bias)) << k;
  }
  EXPECT_TRUE((x + bias).identical(x + bias_full));
  EXPECT_TRUE((x - 0.25).identical(x - Array::full({4, 6}, 0.25)));
  EXPECT_TRUE((0.25 - x).identical(Array::full({4, 6}, 0.25) - x));
}

TEST(CopyOnWrite, CompoundAssignmentWritesInPlaceWhenTheBufferIsUnshared) {
  Array x = Array::arange(1000);
  const std::byte* buffer = x.bytes();
  x += Array::ones({1000});
  x *= 2.0;
  x -= Array::full({1000}, 2);  // back to 2i
  x /= Array::scalar(2.0);
  EXPECT_EQ(x.bytes(), buffer);
  EXPECT_TRUE(x.identical(Array::arange(1000)));
  x += x;  // both sides the same buffer
  EXPECT_EQ(x.bytes(), buffer);
  EXPECT_TRUE(x.identical(Array::arange(1000) * 2.0));
  Array m = Array::zeros({3, 4});
  const std::byte* mb = m.bytes();
  m += Array::from_list<float>({1, 2, 3, 4});  // the bias row, in place
  EXPECT_EQ(m.bytes(), mb);
  EXPECT_EQ(m.to_doubles(), (D{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(CopyOnWrite, CompoundAssignmentDetachesSharedBuffersAndViews) {
  Array a = Array::arange(5);
  Array b = a;
  b += 1.0;
  EXPECT_FALSE(b.shares_buffer_with(a));
  EXPECT_EQ(a.to_doubles(), (D{0, 1, 2, 3, 4}));
  EXPECT_EQ(b.to_doubles(), (D{1, 2, 3, 4, 5}));
  Array c = a;
  c += c;  // c shares with a: a stays, c doubles
  EXPECT_EQ(a.to_doubles(), (D{0, 1, 2, 3, 4}));
  EXPECT_EQ(c.to_doubles(), (D{0, 2, 4, 6, 8}));
  const Array big = Array::arange(6).reshape({2, 3});
  Array row = big[1];
  row *= 10.0;
  EXPECT_EQ(row.to_doubles(), (D{30, 40, 50}));
  EXPECT_EQ(big.to_doubles(), (D{0, 1, 2, 3, 4, 5}));
}

TEST(CopyOnWrite, CompoundAssignmentKeepsDeviceAndAccountAndNeedsNoTemporary) {
  // The account holds exactly one (10,) float32 array: an in-place += fits, as numpy's would.
  auto account = std::make_shared<MemoryAccount>("cpu:3", 40);
  Array a = Array::empty({10}, DType::f32, account, 3);
  std::fill(a.mutable_data<float>().begin(), a.mutable_data<float>().end(), 1.0f);
  a += Array::ones({10});
  a *= 3.0;
  EXPECT_EQ(a.device(), 3);
  EXPECT_EQ(a.buffer()->account(), account);
  EXPECT_EQ(account->in_use(), 40);
  EXPECT_EQ(a.to_doubles(), D(10, 6.0));
}

TEST(CopyOnWrite, ScalarCompoundAssignmentKeepsTheDType) {
  // Equal to x op scalar (the scalar takes x's dtype), for every dtype.
  for (DType dtype : kAllDTypes) {
    const Array x = Array::from_doubles({1, 2, 3, 0}, {2, 2}, dtype);
    struct Case {
      char op;
      double value;
    };
    for (const Case& c : {Case{'+', 3.0}, Case{'-', 1.0}, Case{'*', 2.5}, Case{'/', 2.0}}) {
      if (dtype == DType::boolean && c.op == '-') continue;  // refused, below
      Array y = x.copy();
      Array expected;
      switch (c.op) {
        case '+': y += c.value, expected = x + c.value; break;
        case '-': y -= c.value, expected = x - c.value; break;
        case '*': y *= c.value, expected = x * c.value; break;
        case '/': y /= c.value, expected = (x / c.value).astype(dtype); break;
      }
      EXPECT_EQ(y.dtype(), dtype) << dtype_name(dtype) << " " << c.op;
      EXPECT_TRUE(y.identical(expected)) << dtype_name(dtype) << " " << c.op << ": " << to_string(y) << " vs "
                                         << to_string(expected);
    }
  }
  Array h = Array::full({1}, 2048, DType::f16);
  h += 1.0;  // rounds (to even) back to 2048 in float16
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to_doubles(), (D{2048}));
  Array i = Array::from_list<std::int32_t>({7, -7});
  i /= 2.0;  // true division, then truncation back to int32
  EXPECT_EQ(i.to_doubles(), (D{3, -3}));
  Array flags = Array::from_list<bool>({true});
  ExpectError([&] { flags -= 1.0; }, {"subtract", "bool"});
}

TEST(CopyOnWrite, CompoundAssignmentWithAWiderOperandConvertsBack) {
  Array i = Array::from_list<std::int32_t>({1, 2});
  i += Array::from_list<float>({0.75f, -0.75f});  // float32 result 1.75, 1.25 -> truncated
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_doubles(), (D{1, 1}));
  Array f = Array::from_list<float>({1, 2});
  ExpectError([&] { f += Array::zeros({3}); },
              {"add: operands could not be broadcast together with shapes (2,) (3,)"});
}

// ---- reductions -------------------------------------------------------------------------------------------

TEST(Reductions, SumOverAxes) {
  Array a = Array::arange(6).reshape({2, 3});
  EXPECT_EQ(a.sum().ndim(), 0);
  EXPECT_EQ(a.sum().item<double>(), 15);
  EXPECT_EQ(a.sum(0).to_doubles(), (D{3, 5, 7}));
  EXPECT_EQ(a.sum(1).to_doubles(), (D{3, 12}));
  EXPECT_EQ(a.sum(-1).to_doubles(), (D{3, 12}));
  EXPECT_EQ(a.sum(0).dtype(), DType::f32);
  EXPECT_EQ(Array::arange(24).reshape({2, 3, 4}).sum(1).shape(), (Shape{2, 4}));
  EXPECT_EQ(Array::arange(24).reshape({2, 3, 4}).sum(1).to_doubles(),
            (D{12, 15, 18, 21, 48, 51, 54, 57}));
  ExpectError([&] { a.sum(2); }, {"sum", "axis 2 is out of bounds for array of dimension 2"});
  EXPECT_EQ(Array::zeros({0}).sum().item<double>(), 0);
}

TEST(Reductions, DTypeRules) {
  Array b = Array::from_list<bool>({true, true, false});
  EXPECT_EQ(b.sum().dtype(), DType::i32);
  EXPECT_EQ(b.sum().item<int>(), 2);
  EXPECT_EQ(Array::arange(4, DType::i8).sum().dtype(), DType::i32);  // JAX: small integers sum in int32
  EXPECT_EQ(Array::arange(4, DType::i64).sum().item<std::int64_t>(), 6);
  Array m = Array::arange(4, DType::i32).mean();
  EXPECT_EQ(m.dtype(), DType::f32);
  EXPECT_EQ(m.item<double>(), 1.5);
  EXPECT_EQ(b.mean().dtype(), DType::f32);
  EXPECT_EQ(b.mean().item<float>(), 2.0f / 3.0f);
  EXPECT_EQ(Array::arange(4, DType::f64).mean(0).dtype(), DType::f64);
  EXPECT_EQ(b.max().dtype(), DType::boolean);
  EXPECT_EQ(b.min().item<double>(), 0);
}

TEST(Reductions, SixteenBitFloatsAccumulateInFloat32) {
  // 4096 ones: a float16 accumulator would stall at 2048 (2048 + 1 rounds back to 2048).
  EXPECT_EQ(Array::ones({4096}, DType::f16).sum().item<double>(), 4096);
  EXPECT_EQ(Array::ones({2, 4096}, DType::f16).sum(0).value_at(0), 2);
  EXPECT_EQ(Array::ones({512}, DType::bf16).sum().item<double>(), 512);  // bf16 accumulation would stop at 256
  EXPECT_EQ(Array::ones({4096}, DType::f16).mean().item<double>(), 1);
}

TEST(Reductions, Float32SumIsPairwiseLikeNumpy) {
  // 2^24 followed by eight ones. Adding the ones one at a time to 2^24 in float32 loses every one of them
  // (2^24 + 1 rounds to even, back to 2^24); numpy's pairwise summation adds them in pairs first and gets
  // the exact 2^24 + 8.
  std::vector<float> values(9, 1.0f);
  values[0] = 16777216.0f;
  Array a = Array::from_vector(values);
  EXPECT_EQ(a.sum().item<double>(), 16777224.0);
  EXPECT_EQ(a.reshape({1, 9}).sum(1).value_at(0), 16777224.0);
  EXPECT_EQ(a.reshape({9, 1}).sum(0).value_at(0), 16777224.0);  // a size-1 trailing axis is still contiguous
  // Along a non-contiguous axis numpy adds row after row, so there the ones are lost.
  Array two_columns = Array::stack({a, a}, 1);
  ASSERT_EQ(two_columns.shape(), (Shape{9, 2}));
  EXPECT_EQ(two_columns.sum(0).to_doubles(), (D{16777216.0, 16777216.0}));
  // Long arrays recurse: 1000 copies of 0.1f sum to the float32 nearest to 100 within the pairwise error.
  EXPECT_NEAR(Array::full({1000}, 0.1).sum().item<double>(), 100.0, 1e-4);
}

TEST(Reductions, MaxMinAndNan) {
  Array a = Array::from_list<float>({3, -7, 5, 0}).reshape({2, 2});
  EXPECT_EQ(a.max().item<double>(), 5);
  EXPECT_EQ(a.min().item<double>(), -7);
  EXPECT_EQ(a.max(0).to_doubles(), (D{5, 0}));
  EXPECT_EQ(a.min(1).to_doubles(), (D{-7, 0}));
  Array n = Array::from_list<double>({1, std::nan(""), 3});
  EXPECT_TRUE(std::isnan(n.max().item<double>()));
  EXPECT_TRUE(std::isnan(n.min().item<double>()));
  EXPECT_TRUE(std::isnan(n.sum().item<double>()));
  EXPECT_EQ(Array::from_list<std::int32_t>({-5, 9}).max().item<int>(), 9);
  ExpectError([] { Array::zeros({0}).max(); }, {"zero-size array to reduction operation maximum which has no identity"});
  ExpectError([] { Array::zeros({2, 0}).min(1); }, {"minimum"});
  ExpectError([] { Array::zeros({0, 2}).max(0); }, {"maximum"});
  EXPECT_EQ(Array::zeros({2, 0}).max(0).shape(), Shape{0});  // nothing to reduce into: no error
}

TEST(Reductions, Mean) {
  Array a = Array::arange(6).reshape({2, 3});
  EXPECT_EQ(a.mean().item<double>(), 2.5);
  EXPECT_EQ(a.mean(0).to_doubles(), (D{1.5, 2.5, 3.5}));
  EXPECT_EQ(a.mean(1).to_doubles(), (D{1, 4}));
  EXPECT_EQ(a.mean(0).dtype(), DType::f32);
}

}  // namespace array_test
}  // namespace
}  // namespace weft
