// Planning a round (algorithms.hpp): outputs allocated once per group, the work handed to the shared-memory
// algorithms.
#include "collectives/algorithms.hpp"

#include <algorithm>

#include "collectives/shared_memory.hpp"
#include "weft/error.hpp"

namespace weft::collectives {

const Request& first_request(std::span<const Request* const> requests) {
  for (const Request* r : requests)
    if (r) return *r;
  throw Error("internal: a collective round without a request");
}

std::shared_ptr<Plan> start_plan(const Request& first, int num_replicas) {
  auto plan = std::make_shared<Plan>();
  plan->collective = lower(first);
  plan->groups = first.groups;
  plan->buffers.resize(static_cast<std::size_t>(first.groups->num_groups()));
  plan->outputs.resize(static_cast<std::size_t>(num_replicas));
  return plan;
}

std::size_t plan_group(Plan& plan, std::span<const Request* const> requests, int group,
                       const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of) {
  const FlatCollective& c = plan.collective;
  const std::vector<int>& members = plan.groups->members(group);
  const int g = static_cast<int>(members.size());
  GroupBuffers& b = plan.buffers[static_cast<std::size_t>(group)];
  b.in.assign(static_cast<std::size_t>(g), nullptr);
  b.out.assign(static_cast<std::size_t>(g), nullptr);
  int given = 0;
  for (int k = 0; k < g; ++k)
    if (const Request* r = requests[members[k]]) {
      b.in[k] = r->input->bytes();
      ++given;
    }
  if (c.kind == Kind::ppermute && given == g) {
    // Arrays are immutable, so a destination takes its source's array: no bytes move.
    std::vector<char> received(static_cast<std::size_t>(g), 0);
    for (auto [s, d] : *c.perm) {
      const int ms = ((s % g) + g) % g, md = ((d % g) + g) % g;
      plan.outputs[members[md]] = *requests[members[ms]]->input;
      received[md] = 1;
    }
    const Array& like = *requests[members[0]]->input;
    for (int k = 0; k < g; ++k)
      if (!received[k]) plan.outputs[members[k]] = Array::zeros(like.shape(), like.dtype());
    return 0;
  }
  std::size_t bytes = 0;
  Array shared;
  std::byte* shared_data = nullptr;
  for (int k = 0; k < g; ++k) {
    const int m = members[k];
    const Request* r = requests[m];
    if (!r) continue;
    if (c.shared_output()) {
      // One result buffer per group, handed to every member as an immutable array; written through the
      // pointer taken while the plan still holds it alone (copy-on-write would copy after).
      if (!shared_data) {
        shared = Array::empty(output_shape(*r), c.out_dtype, account_of(m));
        shared_data = shared.mutable_bytes();
        bytes = shared.nbytes();
      }
      plan.outputs[m] = shared;
      b.out[k] = shared_data;
    } else {
      plan.outputs[m] = Array::empty(output_shape(*r), c.out_dtype, account_of(m));
      b.out[k] = plan.outputs[m].mutable_bytes();
      bytes = std::max(bytes, plan.outputs[m].nbytes() * static_cast<std::size_t>(g));
    }
  }
  if (c.kind == Kind::all_reduce || c.kind == Kind::reduce_scatter)
    plan.bytes_reduced += static_cast<std::uint64_t>(g) * c.in_bytes();
  return bytes;
}

const transport::PollContext& no_wait() {
  static const transport::PollContext context;
  return context;
}

std::shared_ptr<Plan> make_plan(std::span<const Request* const> requests,
                                const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                const Thresholds& sizes) {
  std::shared_ptr<Plan> plan = start_plan(first_request(requests), static_cast<int>(requests.size()));
  std::size_t largest = 0;
  for (int gi = 0; gi < plan->groups->num_groups(); ++gi)
    largest = std::max(largest, plan_group(*plan, requests, gi, account_of));
  plan->split_work = plan->collective.kind != Kind::ppermute && largest >= sizes.split_bytes;
  if (!plan->split_work && plan->collective.kind != Kind::ppermute) {
    SharedMemoryCommunicator shared;
    for (GroupBuffers& b : plan->buffers) shared.run(plan->collective, b, no_wait());
  }
  return plan;
}

void execute_part(const Plan& plan, int replica) {
  const int group = plan.groups->group_of(replica);
  SharedMemoryCommunicator::run_share(plan.collective, plan.buffers[static_cast<std::size_t>(group)],
                                      plan.groups->rank_in_group(replica));
}

}  // namespace weft::collectives
