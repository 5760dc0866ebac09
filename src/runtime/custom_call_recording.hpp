// Recording a custom_vjp / custom_jvp call into the current trace (src/program/custom_calls.hpp says what the
// closing equation holds): one function for both kinds, used by weft::custom_vjp (custom_vjp.cc) and
// weft::custom_jvp (transforms.cc).
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "weft/array.hpp"

namespace weft::detail {

// The call's closing equation `op` (custom_vjp_call or custom_jvp_call) over primals..., out, residuals...,
// emitted into the trace the operands belong to; its one result stands for `out`.
Array record_custom_call(const char* op, std::span<const Array> primals, const Array& out,
                         std::span<const Array> residuals, std::int64_t rule, const std::string& name);

}  // namespace weft::detail
