// Gradient rules of the collectives tensor parallelism inserts. The collectives are
// upstream's shard dialect ops; their rules follow Megatron's conjugate operators
// (Shoeybi et al. 2019): within the group, every rank's downstream computation is
// replicated, so the gradient arriving at an all-reduce is already complete (identity),
// while the gradient leaving a copy into the region is partial (all-reduce). Sequence
// parallelism swaps them for all-gather and reduce-scatter, each the other's gradient
// (Korthikanti et al. 2022).
#include "dialects/mt/Collectives.h"
#include "dialects/mt/MtDialect.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::mt;

FlatSymbolRefAttr mlir::mt::getOrCreateGrid(ModuleOp module, int64_t dp, int64_t cp, int64_t tp) {
  const int64_t shape[] = {dp, cp, tp};
  Operation *existing = module.lookupSymbol("grid");
  if (!existing) {
    OpBuilder b(module.getBodyRegion());
    shard::GridOp::create(b, module.getLoc(), "grid", ArrayRef<int64_t>(shape));
  } else if (auto grid = dyn_cast<shard::GridOp>(existing);
             !grid || grid.getShape() != ArrayRef<int64_t>(shape)) {
    existing->emitError("the rank grid @grid must be dp x cp x tp = ")
        << dp << "x" << cp << "x" << tp << " for this layout";
    return {};
  }
  return FlatSymbolRefAttr::get(module.getContext(), "grid");
}

Value mlir::mt::createTpAllReduce(OpBuilder &b, Location loc, Value input,
                                  FlatSymbolRefAttr grid, int64_t axis) {
  return shard::AllReduceOp::create(b, loc, input.getType(), grid,
                                    b.getDenseI16ArrayAttr({static_cast<int16_t>(axis)}), input,
                                    shard::ReductionKindAttr::get(b.getContext(),
                                                                  shard::ReductionKind::Sum));
}

LogicalResult mlir::mt::shareRouterLoad(MoeRouterOp router, FlatSymbolRefAttr grid, int64_t axis,
                                        int64_t weight) {
  if (router.getAuxLossCoeff().isZero())
    return success();
  auto sameLayer = [&](Value inserted) {
    inserted.getDefiningOp()->setDiscardableAttrs(router->getDiscardableAttrDictionary());
    return inserted;
  };
  const double coeff = router.getAuxLossCoeff().convertToDouble() * static_cast<double>(weight);
  if (Value load = router.getLoad()) {
    OpBuilder b(router);
    router.setAuxLossCoeffAttr(b.getF64FloatAttr(coeff));
    router.getLoadMutable().assign(
        sameLayer(createTpAllReduce(b, router.getLoc(), load, grid, axis)));
    return success();
  }
  OpBuilder b(router->getBlock(), std::next(router->getIterator()));
  const int64_t experts = cast<RankedTensorType>(router.getLogits().getType()).getDimSize(2);
  auto count =
      MoeCountOp::create(b, router.getLoc(), router.getExperts(), b.getI64IntegerAttr(experts));
  Value load = sameLayer(createTpAllReduce(b, router.getLoc(), sameLayer(count), grid, axis));
  auto gating =
      MoeRouterOp::create(b, router.getLoc(), router.getLogits(), load, router.getTopkAttr(),
                          router.getPreSoftmaxAttr(), b.getF64FloatAttr(coeff));
  sameLayer(gating.getGates());
  router.getGates().replaceAllUsesWith(gating.getGates());
  router.getExperts().replaceAllUsesExcept(gating.getExperts(), count);
  router.setAuxLossCoeffAttr(b.getF64FloatAttr(0.0));
  return success();
}

Value mlir::mt::createTpAllGather(OpBuilder &b, Location loc, Value input, Type resultType,
                                  FlatSymbolRefAttr grid, int64_t axis, int64_t dim) {
  return shard::AllGatherOp::create(b, loc, resultType, grid,
                                    b.getDenseI16ArrayAttr({static_cast<int16_t>(axis)}), input,
                                    b.getIndexAttr(dim));
}

Value mlir::mt::createTpReduceScatter(OpBuilder &b, Location loc, Value input,
                                      Type resultType, FlatSymbolRefAttr grid, int64_t axis,
                                      int64_t dim) {
  return shard::ReduceScatterOp::create(
      b, loc, resultType, grid, b.getDenseI16ArrayAttr({static_cast<int16_t>(axis)}), input,
      shard::ReductionKindAttr::get(b.getContext(), shard::ReductionKind::Sum),
      b.getIndexAttr(dim));
}

FailureOr<SmallVector<Value>> TpCopyOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  return SmallVector<Value>{
      createTpAllReduce(b, getLoc(), resultGrads[0], getGridAttr(), getGridAxis())};
}

namespace {

static int64_t onlyAxis(ArrayRef<int16_t> axes) { return axes.empty() ? 0 : axes.front(); }

struct AllReduceGradient
    : DifferentiableOpInterface::ExternalModel<AllReduceGradient, shard::AllReduceOp> {
  FailureOr<SmallVector<Value>> buildGradients(Operation *, OpBuilder &,
                                               ValueRange resultGrads) const {
    return SmallVector<Value>{resultGrads[0]};
  }
};

struct AllGatherGradient
    : DifferentiableOpInterface::ExternalModel<AllGatherGradient, shard::AllGatherOp> {
  FailureOr<SmallVector<Value>> buildGradients(Operation *op, OpBuilder &b,
                                               ValueRange resultGrads) const {
    auto gather = cast<shard::AllGatherOp>(op);
    return SmallVector<Value>{createTpReduceScatter(
        b, op->getLoc(), resultGrads[0], gather.getInput().getType(), gather.getGridAttr(),
        onlyAxis(gather.getGridAxes()), gather.getGatherAxis().getSExtValue())};
  }
};

struct ReduceScatterGradient
    : DifferentiableOpInterface::ExternalModel<ReduceScatterGradient, shard::ReduceScatterOp> {
  FailureOr<SmallVector<Value>> buildGradients(Operation *op, OpBuilder &b,
                                               ValueRange resultGrads) const {
    auto scatter = cast<shard::ReduceScatterOp>(op);
    return SmallVector<Value>{createTpAllGather(
        b, op->getLoc(), resultGrads[0], scatter.getInput().getType(), scatter.getGridAttr(),
        onlyAxis(scatter.getGridAxes()), scatter.getScatterAxis().getSExtValue())};
  }
};

} // namespace

void mlir::mt::registerCollectiveGradients(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, shard::ShardDialect *) {
    shard::AllReduceOp::attachInterface<AllReduceGradient>(*context);
    shard::AllGatherOp::attachInterface<AllGatherGradient>(*context);
    shard::ReduceScatterOp::attachInterface<ReduceScatterGradient>(*context);
  });
}
