// What an op writes into its plan instruction (runtime/plan/plan.fbs), through
// PlanOpInterface. The dialect meets the runtime only here, at the plan schema.
#ifndef MT_DIALECTS_MT_PLANENCODING_H
#define MT_DIALECTS_MT_PLANENCODING_H

#include "dialects/mt/MtDialect.h"
#include "plan_generated.h"

#include "mlir/IR/DialectRegistry.h"

namespace mlir::mt {

/// An instruction as an op encodes it: its opcode and its fields, each an attribute
/// named as the field of plan.fbs's Instruction it fills. writeInstruction writes them by
/// the schema's own table of fields, so a new field is a line of plan.fbs and nothing here.
struct PlanInstruction {
  ::mt::plan::Opcode opcode = ::mt::plan::Opcode::Fill;
  SmallVector<std::pair<StringRef, Attribute>> fields; // unset fields keep their defaults
  /// ParamGrad: the parameter's name, whose gradient buffer the emitter makes its output.
  StringRef param;

  /// Sets field `name` (replacing an earlier value).
  void set(StringRef name, Attribute value);
};

/// The opcode name an op is encoded by: its name in CamelCase (mt.layer_norm: LayerNorm).
std::string planOpcodeName(OperationName op);

/// The opcode named `name` (CamelCase, as in plan.fbs), or failure.
FailureOr<::mt::plan::Opcode> planOpcodeNamed(StringRef name);

/// Whether the encoding by name writes (or knowingly leaves out) an attribute of this
/// name for an op of `opcode`.
bool encodesAttribute(StringRef name, ::mt::plan::Opcode opcode);

/// `inst` with its buffers as a table of `fbb`: each field where plan.fbs's Instruction
/// has it, converted by the field's type there (float, integer, flag or enum by name).
/// A field the schema lacks, or a value its type cannot hold, is an error at `op`.
FailureOr<flatbuffers::Offset<::mt::plan::Instruction>>
writeInstruction(flatbuffers::FlatBufferBuilder &fbb, Operation *op, const PlanInstruction &inst,
                 ArrayRef<uint32_t> inputs, ArrayRef<uint32_t> outputs);

/// Plan encodings of ops of other dialects: arith.constant (a Fill) and the shard
/// collectives.
void registerPlanEncodings(DialectRegistry &registry);

} // namespace mlir::mt

#endif
