// mt-tensor-parallel: Megatron's tensor- and sequence-parallel layout, as a walk that
// asks each op its rule (TensorParallelOpInterface; pointwise for Mt_Pointwise ops). The
// rules and the rewriter they share live with the ops (dialects/mt/TensorParallel.cpp).
//
// Upstream's sharding propagation and shard-partition are not used for this step: the
// layout is Megatron's fixed recipe rather than a propagated choice, the fused
// head-major attention and the vocabulary-parallel cross-entropy (statistics gathered,
// logits never whole) have no equivalent upstream, and shard-partition reshards only
// 1-D grids. The collectives it inserts are upstream's shard dialect ops on the
// tensor-parallel axis of one `shard.grid`, so later passes and the plan see standard
// IR.
#include "dialects/mt/TensorParallel.h"
#include "dialects/mt/Collectives.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTTENSORPARALLEL
#include "passes/Passes.h.inc"

namespace {

/// Partitions `fn` op by op, in program order, each by its own rule.
LogicalResult partition(FunctionOpInterface fn, TensorParallelRewriter &tp) {
  if (tp.sequenceParallel()) {
    for (BlockArgument arg : fn.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (type && type.getRank() >= 2 && type.getDimSize(1) % tp.size() != 0)
        return fn.emitError("mt-tensor-parallel: sequence length ")
               << type.getDimSize(1) << " is not divisible by tp " << tp.size()
               << " (sequence parallelism splits it)";
    }
  }
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getFunctionBody().front())
    ops.push_back(&op);
  for (Operation *op : ops) {
    LogicalResult result = success();
    if (isa<ParamOp>(op))
      continue; // sharded by the rule of the op that uses it
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands())
        if (tp.layoutOf(v) != TpLayout::Replicated)
          return ret.emitOpError("mt-tensor-parallel: returns a value that is split across "
                                 "the tensor-parallel group");
    } else if (isa<shard::AllGatherOp, shard::AllReduceOp>(op)) {
      result = tp.partitionContextCollective(op);
    } else if (auto rule = dyn_cast<TensorParallelOpInterface>(op)) {
      result = rule.partition(tp);
    } else if (op->hasTrait<Pointwise>()) {
      result = tp.partitionPointwise(op);
    } else if (op->hasTrait<PerToken>()) {
      result = tp.partitionPerToken(op);
    } else {
      return op->emitOpError("mt-tensor-parallel: no tensor-parallel layout for this op");
    }
    if (failed(result))
      return failure();
  }
  return success();
}

struct MtTensorParallel : impl::MtTensorParallelBase<MtTensorParallel> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1 || dp < 1 || cp < 1) {
      module.emitError("mt-tensor-parallel: tp ")
          << tp << ", dp " << dp << " and cp " << cp << " must be positive";
      return signalPassFailure();
    }
    FlatSymbolRefAttr grid = getOrCreateGrid(module, dp, cp, tp);
    if (!grid)
      return signalPassFailure();
    if (tp == 1)
      return;
    TensorParallelRewriter rewriter(tp, sequenceParallel, grid);
    for (auto fn : module.getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(partition(fn, rewriter)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
