#ifndef MT_PASSES_PASSES_H
#define MT_PASSES_PASSES_H

#include "dialects/mt/MtDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"

namespace mlir::mt {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Infers `op`'s result types again from its operands (ops without InferTypeOpInterface
/// keep theirs). Fails, with the op's diagnostic, when the shapes do not agree.
LogicalResult reinferOp(Operation *op);

/// Infers every op's result types again from its operands, in program order, and
/// updates the function's result types. Fails at the first op whose shapes do not
/// agree (the op reports why).
LogicalResult reinferTypes(FunctionOpInterface fn);

/// Numbers the ops of a differentiated training step in program order into `position`
/// and returns where its backward starts: at the loss seed mt-autodiff writes (the
/// first arith.constant), or -1 when there is none.
int64_t numberOps(Block &body, llvm::DenseMap<Operation *, int64_t> &position);

/// The attribute names mt-memory-plan writes.
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

} // namespace mlir::mt

#endif
