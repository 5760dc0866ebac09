// The fingerprint of agreements between processes (fingerprint.hpp).
#include "collectives/fingerprint.hpp"

namespace weft::collectives {

Fingerprint& Fingerprint::add(std::uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash_ ^= (value >> (8 * i)) & 0xff;
    hash_ *= 1099511628211ull;  // FNV-1a's prime
  }
  return *this;
}

Fingerprint& Fingerprint::add(std::string_view text) {
  for (char c : text) {
    hash_ ^= static_cast<unsigned char>(c);
    hash_ *= 1099511628211ull;
  }
  return add(static_cast<std::uint64_t>(text.size()));
}

std::uint64_t fingerprint(const Request& r, std::uint64_t round) {
  Fingerprint f;
  f.add(round).add(static_cast<std::uint64_t>(r.kind)).add(std::string_view(r.api_name));
  f.add(static_cast<std::uint64_t>(r.reduce)).add(static_cast<std::uint64_t>(r.input->dtype()));
  f.add(static_cast<std::uint64_t>(r.input->shape().size()));
  for (std::int64_t d : r.input->shape()) f.add(static_cast<std::uint64_t>(d));
  f.add(static_cast<std::uint64_t>(r.groups->num_groups()));
  for (const auto& g : r.groups->groups()) {
    f.add(static_cast<std::uint64_t>(g.size()));
    for (int m : g) f.add(static_cast<std::uint64_t>(m));
  }
  f.add(static_cast<std::uint64_t>(r.axis)).add(static_cast<std::uint64_t>(r.concat_axis)).add(std::uint64_t{r.tiled});
  f.add(std::uint64_t{r.perm != nullptr});
  if (r.perm) {
    f.add(static_cast<std::uint64_t>(r.perm->size()));
    for (auto [s, d] : *r.perm) f.add((static_cast<std::uint64_t>(static_cast<std::uint32_t>(s)) << 32) ^ static_cast<std::uint32_t>(d));
  }
  return f.value();
}

}  // namespace weft::collectives
