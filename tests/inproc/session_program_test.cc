// A traced program run by a Session (Session::run(Program, ProgramHandles); what weft.popxl lowers its graphs
// to): the session effects find their streams, variables and remote buffers by name, collectives run over the
// session's replicas, and the results equal the closed forms computed here. Also: the errors for a handle the
// run was not given and for a program that takes inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace session_program_test {

using testing::ErrorOf;
using testing::ExpectContains;

constexpr int kReplicas = 4;

ProgramParams Named(const char* key, const std::string& name, std::vector<std::int64_t> shape = {},
                    bool typed = false) {
  ProgramParams p{{key, name}};
  if (typed) {
    p["shape"] = std::move(shape);
    p["dtype"] = DType::i32;
  }
  return p;
}

class SessionProgram : public ::testing::Test {
 protected:
  Runtime rt{{.device_count = kReplicas, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"}};
};

TEST_F(SessionProgram, EffectsFindTheirHandlesByNameAndCollectivesSpanTheReplicas) {
  Session s({.replicas = kReplicas, .runtime = &rt});
  Variable w = s.variable(Array::arange(4, DType::i32), std::nullopt, Retrieval::all_replicas, "w");
  RemoteBuffer buffer = s.remote_buffer({4}, DType::i32, 2);
  HostStream x = s.h2d_stream({4}, DType::i32, "x");
  HostStream y = s.d2h_stream({4}, DType::i32, "y");

  // y = psum(x + w) over the replicas; w <- x + w; the remote buffer's entry 1 <- w * 10, read back and
  // stored after y (so y2 checks the remote round trip).
  ProgramBuilder b(Mesh({{"replica", kReplicas}}));
  const int xv = b.emit("host_load", {}, Named("stream", "x", {4}, true))[0];
  const int wv = b.emit("variable_read", {}, Named("variable", "w", {4}, true))[0];
  const int sum = b.emit("add", {xv, wv})[0];
  const int total = b.emit("psum", {sum}, {{"axes", std::vector<std::string>{"replica"}}})[0];
  b.emit("variable_update", {sum}, Named("variable", "w"));
  const int entry = b.constant(Array::scalar(1, DType::i32));
  b.emit("remote_store", {b.emit("multiply", {sum, b.constant(Array::scalar(10, DType::i32))})[0], entry},
         Named("buffer", "rb"));
  const int back = b.emit("remote_load", {entry}, Named("buffer", "rb", {4}, true))[0];
  b.emit("host_store", {total}, Named("stream", "y"));
  const Program program = b.build();
  EXPECT_EQ(program.count("host_load"), 1u);
  const ProgramHandles handles{.variables = {{"w", w}}, .buffers = {{"rb", buffer}}, .streams = {{"x", x}, {"y", y}}};
  static_cast<void>(back);  // unused: dead code, removed (the remote_load is an effect, kept)

  // Replica r's x is r * 100 + (0, 1, 2, 3).
  std::vector<double> xs;
  for (int r = 0; r < kReplicas; ++r)
    for (int k = 0; k < 4; ++k) xs.push_back(r * 100 + k);
  const auto out = s.run(program, handles, {{x, Array::from_doubles(xs, {kReplicas, 4}, DType::i32)}});
  // y on every replica: sum_r (r * 100 + k + k) = 600 + 8k.
  std::vector<double> want;
  for (int r = 0; r < kReplicas; ++r)
    for (int k = 0; k < 4; ++k) want.push_back(600 + 8 * k);
  EXPECT_EQ(out.at(y).to_doubles(), want);
  // w on replica r: r * 100 + 2k (all_replicas retrieval: one row per replica).
  std::vector<double> w_want;
  for (int r = 0; r < kReplicas; ++r)
    for (int k = 0; k < 4; ++k) w_want.push_back(r * 100 + 2 * k);
  EXPECT_EQ(s.get_tensor_data(w).to_doubles(), w_want);
  // The same program run by a hand-written replica function reads back what the traced one stored.
  std::vector<double> stored;
  s.run(
      [&](Replica& r) {
        const Array entry1 = r.remote_load(buffer, 1);
        if (r.index() == 2) stored = entry1.to_doubles();
      },
      {{x, Array::zeros({kReplicas, 4}, DType::i32)}});
  EXPECT_EQ(stored, (std::vector<double>{2000, 2020, 2040, 2060}));
}

TEST_F(SessionProgram, AMissingHandleAndAProgramWithInputsAreRefusedByName) {
  Session s({.replicas = kReplicas, .runtime = &rt});
  HostStream x = s.h2d_stream({4}, DType::i32, "x");
  ProgramBuilder b(Mesh({{"replica", kReplicas}}));
  b.emit("host_store", {b.emit("host_load", {}, Named("stream", "x", {4}, true))[0]}, Named("stream", "z"));
  const Program program = b.build();
  const std::string text = ErrorOf<InvalidArgument>(
      [&] { s.run(program, {.streams = {{"x", x}}}, {{x, Array::zeros({kReplicas, 4}, DType::i32)}}); });
  ExpectContains(text, {"equation 1 `host_store[stream='z'] a`", "host_store: the session's run was given no stream "
                                                                   "named 'z'"});

  ProgramBuilder with_input(Mesh({{"replica", kReplicas}}));
  with_input.set_outputs({with_input.input({DType::f32, {2}, {}})});
  const std::string inputs = ErrorOf<InvalidArgument>([&] { s.run(with_input.build(), {}); });
  ExpectContains(inputs, {"a session's program takes no inputs", "this one takes 1"});
}

}  // namespace session_program_test
}  // namespace
}  // namespace weft
