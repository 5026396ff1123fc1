// What an op writes into its plan instruction (runtime/plan/plan.fbs), through
// PlanOpInterface. The dialect meets the runtime only here, at the plan schema.
#ifndef MT_DIALECTS_MT_PLANENCODING_H
#define MT_DIALECTS_MT_PLANENCODING_H

#include "dialects/mt/MtDialect.h"
#include "plan_generated.h"

#include "mlir/IR/DialectRegistry.h"

namespace mlir::mt {

/// The attributes an instruction may carry; unset ones keep the schema's defaults.
struct PlanInstruction {
  ::mt::plan::Opcode opcode = ::mt::plan::Opcode::Fill;
  double epsilon = 0, rate = 0, value = 0;
  int64_t heads = 0, stream = -1, numClasses = 0, count = 0;
  bool causal = false, vocabParallel = false, sequenceParallel = false,
       featureParallel = false, headParallel = false, lossSeed = false, accumulate = false;
  int32_t axis = 0;
  // Rotary embeddings.
  double theta = 0, scalingFactor = 0, lowFreqFactor = 0, highFreqFactor = 0;
  int64_t kvHeads = 0, originalPositions = 0;
  bool inverse = false;
  /// ParamGrad: the parameter's name, whose gradient buffer the emitter makes its output.
  StringRef param;
};

/// The opcode name an op is encoded by: its name in CamelCase (mt.layer_norm: LayerNorm).
std::string planOpcodeName(OperationName op);

/// The opcode named `name` (CamelCase, as in plan.fbs), or failure.
FailureOr<::mt::plan::Opcode> planOpcodeNamed(StringRef name);

/// Whether the encoding by name writes (or knowingly leaves out) an attribute of this
/// name for an op of `opcode`.
bool encodesAttribute(StringRef name, ::mt::plan::Opcode opcode);

/// Plan encodings of ops of other dialects: arith.constant (a Fill) and the shard
/// collectives.
void registerPlanEncodings(DialectRegistry &registry);

} // namespace mlir::mt

#endif
