// API misuse that used to crash (issue 8, item 8): a Device naming a process that does not exist, and
// sharded arrays read after their Runtime is gone. Misuse is an InvalidArgument naming the device and what
// the runtime has; a sharded array keeps alive what reading it needs.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace misuse_test {

using namespace weft::testing;

// ---------------------------------------------------------------------------------------------------
// Devices of processes that do not exist (a one-process job has only process 0).

struct DeviceUse {
  const char* what;
  std::function<void(Runtime&)> call;
};

TEST(DeviceOfAnotherProcess, EveryApiTakingADeviceRejectsIt) {
  Runtime rt({.device_count = 2, .log_level = "error"});
  const Device absent{1, 5};  // id 1 exists, but on process 0
  const std::vector<DeviceUse> uses = {
      {"pmap", [&](Runtime& r) {
         auto f = pmap([](Replica& rep, const Array& x) { return rep.psum(x, "i"); },
                       {.axis = "i", .devices = {Device{0, 0}, absent}, .runtime = &r});
         f(Array::arange(2));
       }},
      {"pmap", [&](Runtime& r) {  // every device of a process that does not exist
         auto f = pmap([](const Array& x) { return x; }, {.devices = {Device{0, 5}, absent}, .runtime = &r});
         f(Array::arange(2));
       }},
      {"device_put", [&](Runtime& r) { device_put(Array::arange(3), absent, r); }},
      {"device_put_sharded", [&](Runtime& r) { device_put_sharded({Array::arange(2), Array::arange(2)}, {Device{0, 0}, absent}, r); }},
      {"memory_in_use", [&](Runtime& r) { r.memory_in_use(absent); }},
  };
  for (const DeviceUse& use : uses) {
    SCOPED_TRACE(use.what);
    const Outcome o = Timed([&] { use.call(rt); });
    ASSERT_TRUE(o.threw) << "accepted " << to_string(absent);
    EXPECT_EQ(o.type, "InvalidArgument") << o.message;
    ExpectContains(o.message, {"process=5", "is not a device of this runtime", "1 process"});
  }
  // An id out of range is still named as such.
  const Outcome o = Timed([&] { device_put(Array::arange(3), Device{7, 0}, rt); });
  EXPECT_EQ(o.type, "InvalidArgument") << o.message;
  ExpectContains(o.message, {"no device with id 7", "2 devices"});
  // The runtime's own devices are accepted.
  EXPECT_EQ(device_put(Array::arange(3), rt.devices()[1], rt).device(), 1);
}

// ---------------------------------------------------------------------------------------------------
// A sharded array outlives its runtime.

TEST(ShardedArrayLifetime, ReadableAfterItsRuntimeIsDestroyed) {
  ShardedArray s, replicated;
  {
    Runtime rt({.device_count = 2, .log_level = "error"});
    auto f = pmap([](const Array& x) { return x * 2.0; }, {.runtime = &rt});
    s = f(Array::arange(4).reshape({2, 2}));
    replicated = device_put_replicated(Array::arange(3), rt.devices(), rt);
  }
  // A runtime made now is likely to reuse the freed one's memory: reading s must not count its bytes there
  // (that was a read of the dead Runtime and a write into its freed Impl; AddressSanitizer reports
  // stack-use-after-scope on the read).
  Runtime fresh({.device_count = 2, .log_level = "error"});
  EXPECT_EQ(s.to_host().to_doubles(), (std::vector<double>{0, 2, 4, 6}));
  EXPECT_EQ(s[1].to_doubles(), (std::vector<double>{4, 6}));
  EXPECT_EQ(s.slice(0, 1).to_doubles(), (std::vector<double>{0, 2}));
  EXPECT_EQ(replicated.to_host().to_doubles(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(fresh.stats().bytes_device_to_host, 0u) << "a dead runtime's reads were counted in a new runtime";
}

}  // namespace misuse_test
}  // namespace
}  // namespace weft
