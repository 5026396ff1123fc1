// The opcode table (plan/Opcodes.def) as data: what the plan reader checks of every
// instruction, and where the executor sends it.
#ifndef MT_RUNTIME_PLAN_OPCODES_H
#define MT_RUNTIME_PLAN_OPCODES_H

#include "plan_generated.h"

#include <cstddef>
#include <iterator>

namespace mt {

/// Who executes an opcode.
enum class RunsOn { Backend, Comm };

struct OpcodeInfo {
  plan::Opcode opcode;
  int minInputs, maxInputs, minOutputs, maxOutputs;
  /// Bit masks of the inputs and the outputs holding ids, targets, experts or their
  /// counts; the input and the output holding a dropout mask, -1 where there is none.
  int indexInputs, indexOutputs, maskInput, maskOutput;
  /// The first output that may be a parameter's gradient (Grad buffers from it on); -1.
  int gradOutput;
  RunsOn runsOn;
};

inline constexpr OpcodeInfo kOpcodes[] = {
#define MT_OPCODE(name, minIn, maxIn, minOut, maxOut, index, indexOut, mask, maskOut, grad,     \
                  runsOn, shapes)                                                          \
  {plan::Opcode::name, minIn,    maxIn,   minOut, maxOut,        index,                            \
   indexOut,           mask,     maskOut, grad,   RunsOn::runsOn},
#include "plan/Opcodes.def"
#undef MT_OPCODE
};

namespace detail {
constexpr bool tableFollowsSchema() {
  for (size_t i = 0; i < std::size(kOpcodes); ++i)
    if (static_cast<size_t>(kOpcodes[i].opcode) != i)
      return false;
  return std::size(kOpcodes) == static_cast<size_t>(plan::Opcode::MAX) + 1;
}
constexpr bool runsOnComm(plan::Opcode opcode) {
  return kOpcodes[static_cast<size_t>(opcode)].runsOn == RunsOn::Comm;
}
/// The communicator's opcodes are the seven Executor::runCollective handles.
constexpr bool commRowsAreTheCollectives() {
  int comm = 0;
  for (const OpcodeInfo &info : kOpcodes)
    comm += info.runsOn == RunsOn::Comm;
  return comm == 7 && runsOnComm(plan::Opcode::AllReduce) && runsOnComm(plan::Opcode::AllGather) &&
         runsOnComm(plan::Opcode::ReduceScatter) && runsOnComm(plan::Opcode::RingAttention) &&
         runsOnComm(plan::Opcode::RingAttentionGrad) && runsOnComm(plan::Opcode::MoeExchange) &&
         runsOnComm(plan::Opcode::MoeExchangeBack);
}
} // namespace detail
static_assert(detail::tableFollowsSchema(),
              "plan/Opcodes.def must list every opcode of plan.fbs, in the schema's order");
static_assert(detail::commRowsAreTheCollectives(),
              "a new collective opcode needs a case in Executor::runCollective");

/// Whether `opcode` is one of a mixture of experts' (MoeRouter to MoeExchangeBack, and
/// MoeDrop).
constexpr bool isMixtureOfExperts(plan::Opcode opcode) {
  return (opcode >= plan::Opcode::MoeRouter && opcode <= plan::Opcode::MoeExchangeBack) ||
         opcode == plan::Opcode::MoeDrop;
}

/// The table's row for `opcode`, which the caller has checked is at most Opcode::MAX.
inline const OpcodeInfo &opcodeInfo(plan::Opcode opcode) {
  return kOpcodes[static_cast<size_t>(opcode)];
}

} // namespace mt

#endif
