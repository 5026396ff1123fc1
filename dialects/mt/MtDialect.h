#ifndef MT_DIALECTS_MT_MTDIALECT_H
#define MT_DIALECTS_MT_MTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mt {
/// `batch` matrix products of an m x k and a k x n matrix: 2·batch·m·n·k FLOPs.
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t flops() const { return 2 * batch * m * n * k; }
  bool operator==(const GemmShape &o) const {
    return batch == o.batch && m == o.m && n == o.n && k == o.k;
  }
};
/// Sum of the elements of every result: one FLOP per element produced.
int64_t defaultOtherFlops(Operation *op);
/// Bytes of every operand and result, each read or written once.
int64_t defaultBytesMoved(Operation *op);
/// Bytes of a statically shaped tensor type.
int64_t tensorBytes(Type type);

/// Discardable attributes the passes write, by name.
/// mt-memory-plan:
inline constexpr llvm::StringLiteral kOffsetsAttr = "mt.offsets";
inline constexpr llvm::StringLiteral kArgOffsetsAttr = "mt.arg_offsets";
inline constexpr llvm::StringLiteral kArenaBytesAttr = "mt.arena_bytes";
/// Written by mt-expand on every op of an unrolled block: the block copy's ordinal.
inline constexpr llvm::StringLiteral kLayerAttr = "mt.layer";
/// Written by mt-pipeline-assign on every forward op (and copied by mt-autodiff onto
/// the backward ops each one's gradient rule builds): its virtual pipeline stage.
inline constexpr llvm::StringLiteral kStageAttr = "mt.stage";
/// The constant mt-autodiff seeds backward with (d loss / d loss = 1): fp16 scales it.
inline constexpr llvm::StringLiteral kLossSeedAttr = "mt.loss_seed";
/// Written by mt-recompute on the training step: the FLOPs its copies add per
/// micro-batch, GEMM and other.
inline constexpr llvm::StringLiteral kRecomputeFlopsAttr = "mt.recompute_gemm_flops";
inline constexpr llvm::StringLiteral kRecomputeOtherFlopsAttr = "mt.recompute_other_flops";
/// Written by mt-recompute on each op it copied into backward.
inline constexpr llvm::StringLiteral kRecomputedAttr = "mt.recomputed";

/// Infers `op`'s result types again from its operands (ops without InferTypeOpInterface
/// keep theirs). Fails, with the op's diagnostic, when the shapes do not agree.
LogicalResult reinferOp(Operation *op);

class TensorParallelRewriter;
template <typename ConcreteType>
class Pointwise : public OpTrait::TraitBase<ConcreteType, Pointwise> {};
template <typename ConcreteType>
class ColumnParallelConsumer : public OpTrait::TraitBase<ConcreteType, ColumnParallelConsumer> {};
template <typename ConcreteType>
class PerToken : public OpTrait::TraitBase<ConcreteType, PerToken> {};

/// GradAccumulatingOpInterface's rule: with `accumulate`, each weight gradient is read by
/// one mt.param_grad alone.
LogicalResult verifyGradAccumulating(Operation *op);
/// Whether `v` is a weight gradient its op adds into a parameter's gradient itself (and
/// so no buffer of its own, and its mt.param_grad no instruction).
bool isAccumulated(Value v);

/// The slots each expert keeps of the tokens routed to `experts` [B, S, k] among
/// `numExperts`, with a capacity factor f: ceil(B·S·k/E·f), Megatron-Core's; 0 without
/// one (or without static shapes).
int64_t expertCapacity(Value experts, int64_t numExperts, std::optional<APFloat> factor);

/// The fields of a plan instruction (dialects/mt/PlanEncoding.h).
struct PlanInstruction;
/// The plan encoding by name (PlanOpInterface's default).
LogicalResult encodeInstructionByName(Operation *op, PlanInstruction &inst);
} // namespace mlir::mt

#include "dialects/mt/MtDialect.h.inc"
#include "dialects/mt/MtEnums.h.inc"
#include "dialects/mt/MtInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/mt/MtOps.h.inc"

#endif
