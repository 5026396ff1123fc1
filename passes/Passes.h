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

/// Infers every op's result types again from its operands, in program order, and
/// updates the function's result types. Fails at the first op whose shapes do not
/// agree (the op reports why).
LogicalResult reinferTypes(FunctionOpInterface fn);

/// Whether two ops sit in one place of the step, so a fusion pass may join them: the same
/// layer, stage and recomputation (their discardable attributes).
inline bool samePlacement(Operation *a, Operation *b) {
  return a->getDiscardableAttrDictionary() == b->getDiscardableAttrDictionary();
}

/// Every op of type OpT within `root`, in walk order: collected before a pass rewrites
/// any of them.
template <typename OpT> SmallVector<OpT> opsOf(Operation *root) {
  SmallVector<OpT> ops;
  root->walk([&](OpT op) { ops.push_back(op); });
  return ops;
}

/// Numbers the ops of a differentiated training step in program order into `position`
/// and returns where its backward starts: at the loss seed mt-autodiff writes (the
/// first arith.constant), or -1 when there is none.
int64_t numberOps(Block &body, llvm::DenseMap<Operation *, int64_t> &position);
} // namespace mlir::mt

#endif
