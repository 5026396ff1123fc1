// mt-context-parallel: Megatron-Core's context parallelism as a rewrite of a specialized
// step (Passes.td says what it writes). Position-wise ops need nothing but the
// `context_parallel` mark on those whose values depend on positions; attention is the
// only op that mixes positions, and it reads the whole sequence's keys and values
// through an all-gather over the context-parallel axis.
#include "dialects/mt/Collectives.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTCONTEXTPARALLEL
#include "passes/Passes.h.inc"

namespace {

/// Tokens and targets become this rank's share of each sequence, [B, S/cp].
LogicalResult splitInputs(FunctionOpInterface fn, int64_t cp) {
  for (BlockArgument arg : fn.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() < 2)
      continue;
    if (!isa<IntegerType>(type.getElementType()))
      return fn.emitError("mt-context-parallel: argument ")
             << arg.getArgNumber() << " of type " << type
             << " is not tokens or targets (integer [B, S])";
    const int64_t s = type.getDimSize(1);
    if (ShapedType::isDynamic(s) || s % (2 * cp) != 0)
      return fn.emitError("mt-context-parallel: sequence length ")
             << s << " is not divisible by 2·cp = " << 2 * cp
             << " (the load-balanced split cuts it into 2·cp chunks)";
    SmallVector<int64_t> shape(type.getShape());
    shape[1] = s / cp;
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
  }
  return success();
}

/// Attention over the group's whole sequence: its QKV gathered (stacked by rank), then
/// put in order.
void gatherKeysAndValues(AttentionOp attention, int64_t cp, FlatSymbolRefAttr grid) {
  OpBuilder b(attention);
  Location loc = attention.getLoc();
  auto qkv = cast<RankedTensorType>(attention.getQkv().getType());
  SmallVector<int64_t> stacked(qkv.getShape());
  stacked[0] *= cp;
  Value gathered = shard::AllGatherOp::create(
      b, loc, RankedTensorType::get(stacked, qkv.getElementType()), grid,
      b.getDenseI16ArrayAttr({static_cast<int16_t>(kCpAxis)}), attention.getQkv(),
      b.getIndexAttr(0));
  auto ordered = ContextOrderOp::create(b, loc, gathered, b.getI64IntegerAttr(cp), UnitAttr());
  // The layer's own ops (mt.layer), for the pipeline and recomputation.
  for (Operation *inserted : {gathered.getDefiningOp(), ordered.getOperation()})
    inserted->setDiscardableAttrs(attention->getDiscardableAttrDictionary());
  attention.getQkvMutable().assign(ordered.getResult());
  attention.setContextParallelAttr(b.getI64IntegerAttr(cp));
}

/// Ring attention: the op keeps its rank's QKV and its rows' statistics (each ring step
/// merges by them); the runtime brings the others' keys and values round.
void markRing(AttentionOp attention, int64_t cp) {
  OpBuilder b(attention);
  auto ring = AttentionOp::create(
      b, attention.getLoc(), attention.getQkv(), attention.getHeadsAttr(),
      attention.getKvHeadsAttr(), attention.getCausalAttr(), attention.getDropoutAttr(),
      attention.getStreamAttr(), attention.getHeadParallelAttr(), b.getUnitAttr(),
      b.getI64IntegerAttr(cp), b.getUnitAttr(), attention.getWindowAttr());
  ring->setDiscardableAttrs(attention->getDiscardableAttrDictionary());
  attention.getResult().replaceAllUsesWith(ring.getResult());
  if (Value stats = attention.getStats())
    stats.replaceAllUsesWith(ring.getStats());
  attention.erase();
}

LogicalResult partition(FunctionOpInterface fn, int64_t cp, bool ring, FlatSymbolRefAttr grid) {
  SmallVector<AttentionOp> attentions;
  SmallVector<MoeRouterOp> routers;
  IntegerAttr parts = IntegerAttr::get(IntegerType::get(fn->getContext(), 64), cp);
  WalkResult walk = fn.walk([&](Operation *op) {
    if (isa<AttentionProbsOp, AttentionContextOp>(op)) {
      op->emitOpError("mt-context-parallel: unfused attention cannot be split over the "
                      "context-parallel group (use fused attention)");
      return WalkResult::interrupt();
    }
    if (auto attention = dyn_cast<AttentionOp>(op))
      attentions.push_back(attention);
    else if (auto router = dyn_cast<MoeRouterOp>(op))
      routers.push_back(router);
    else if (isa<PositionEmbeddingOp, RotaryOp, DropoutOp>(op))
      op->setAttr("context_parallel", parts);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted() || failed(splitInputs(fn, cp)) || failed(reinferTypes(fn)))
    return failure();
  for (AttentionOp attention : attentions) {
    if (ring)
      markRing(attention, cp);
    else
      gatherKeysAndValues(attention, cp, grid);
  }
  for (MoeRouterOp router : routers)
    if (failed(shareRouterLoad(router, grid, kCpAxis, cp)))
      return failure();
  return reinferTypes(fn);
}

struct MtContextParallel : impl::MtContextParallelBase<MtContextParallel> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (cp < 1 || dp < 1 || tp < 1) {
      module.emitError("mt-context-parallel: cp ")
          << cp << ", dp " << dp << " and tp " << tp << " must be positive";
      return signalPassFailure();
    }
    if (commType != "all-gather" && commType != "p2p") {
      module.emitError("mt-context-parallel: comm-type must be all-gather or p2p, not '")
          << commType << "'";
      return signalPassFailure();
    }
    if (cp == 1)
      return;
    FlatSymbolRefAttr grid = getOrCreateGrid(module, dp, cp, tp);
    if (!grid)
      return signalPassFailure();
    for (auto fn : module.getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(partition(fn, cp, commType == "p2p", grid)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
