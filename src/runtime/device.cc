// Devices: how they print, and how the runtime looks one up (by id, or checking that a Device it is handed
// is really one of its own).
#include <ostream>
#include <string>
#include <vector>

#include "runtime/internal.hpp"
#include "weft/error.hpp"

namespace weft {

std::string to_string(const Device& device) {
  return "CpuDevice(id=" + std::to_string(device.id) + ", process=" + std::to_string(device.process_index) + ")";
}
std::ostream& operator<<(std::ostream& os, const Device& device) { return os << to_string(device); }
std::ostream& operator<<(std::ostream& os, const std::vector<Device>& devices) {
  os << "[";
  for (std::size_t i = 0; i < devices.size(); ++i) os << (i ? ",\n " : "") << devices[i];
  return os << "]";
}

const Device& Runtime::Impl::device(int id) const {
  if (id < 0 || id >= static_cast<int>(devices.size()))
    throw InvalidArgument("no device with id " + std::to_string(id) + "; this runtime has " +
                          std::to_string(devices.size()) + " devices (ids 0.." + std::to_string(devices.size() - 1) + ")");
  return devices[id];
}

const Device& Runtime::Impl::device(const Device& d, const std::string& what) const {
  // A device this runtime never had: most often one taken from an earlier runtime (devices listed before a
  // new runtime with fewer devices became the current one).
  if (d.id < 0 || d.id >= static_cast<int>(devices.size()))
    throw InvalidArgument(what + ": no device with id " + std::to_string(d.id) + " (" + to_string(d) +
                          ") in this runtime, which has " + std::to_string(devices.size()) + " devices (ids 0.." +
                          std::to_string(devices.size() - 1) +
                          "); was it taken from an earlier runtime, before one with fewer devices (RuntimeOptions::device_count) "
                          "became the current one? Take the devices from the current runtime");
  const Device& known = device(d.id);
  if (!(known == d))
    throw InvalidArgument(what + ": " + to_string(d) + " is not a device of this runtime: device " +
                          std::to_string(d.id) + " is " + to_string(known) + " (this job has " +
                          std::to_string(process_count) + (process_count == 1 ? " process" : " processes") + ")");
  return known;
}

}  // namespace weft
