// mt-set-capacity: Megatron-Core's --moe-expert-capacity-factor and
// --moe-token-drop-policy (Passes.td says what it writes).
#include "passes/Passes.h"

#include <cmath>

namespace mlir::mt {
#define GEN_PASS_DEF_MTSETCAPACITY
#include "passes/Passes.h.inc"

namespace {

/// The probs policy: the dispatches and combines of the router's experts read them
/// through an mt.moe_drop of its gates (one per router and number of experts).
void dropByGates(MoeRouterOp router, double factor) {
  OpBuilder b(router->getContext());
  b.setInsertionPointAfter(router);
  Value experts = router.getExperts();
  llvm::SmallDenseMap<int64_t, Value> dropped;
  for (OpOperand &use : llvm::make_early_inc_range(experts.getUses())) {
    Operation *user = use.getOwner();
    std::optional<int64_t> count;
    if (auto dispatch = dyn_cast<MoeDispatchOp>(user))
      count = dispatch.getNumExperts();
    else if (auto combine = dyn_cast<MoeCombineOp>(user))
      count = combine.getNumExperts();
    if (!count)
      continue;
    Value &kept = dropped[*count];
    if (!kept) {
      auto drop = MoeDropOp::create(b, router.getLoc(), router.getGates(), experts,
                                    b.getI64IntegerAttr(*count), b.getF64FloatAttr(factor));
      drop->setDiscardableAttrs(router->getDiscardableAttrDictionary());
      kept = drop.getResult();
    }
    use.set(kept);
  }
}

struct MtSetCapacity : impl::MtSetCapacityBase<MtSetCapacity> {
  using Base::Base;

  void runOnOperation() override {
    if (!std::isfinite(factor)) {
      getOperation().emitError("mt-set-capacity: the capacity factor must be a finite number");
      return signalPassFailure();
    }
    if (policy != "probs" && policy != "position") {
      getOperation().emitError("mt-set-capacity: the drop policy must be probs or position, not '")
          << policy << "'";
      return signalPassFailure();
    }
    if (factor < 0)
      return;
    // The factor and policy given replace the model's: its drops go, its capacities too.
    getOperation().walk([](MoeDropOp drop) {
      drop.getResult().replaceAllUsesWith(drop.getExperts());
      drop.erase();
    });
    Builder b(&getContext());
    SmallVector<MoeRouterOp> routers;
    getOperation().walk([&](Operation *op) {
      if (auto router = dyn_cast<MoeRouterOp>(op))
        routers.push_back(router);
      if (!isa<MoeDispatchOp, MoeCombineOp, MoeDispatchGradOp, MoeCombineGradOp>(op))
        return;
      if (factor > 0 && policy == "position")
        op->setAttr("capacity_factor", b.getF64FloatAttr(factor));
      else
        op->removeAttr("capacity_factor");
    });
    if (factor == 0 || policy != "probs")
      return;
    for (MoeRouterOp router : routers)
      dropByGates(router, factor);
    // A dispatch or combine of experts no router gave has no gates to drop by.
    WalkResult walk = getOperation().walk([&](Operation *op) {
      Value experts;
      if (auto dispatch = dyn_cast<MoeDispatchOp>(op))
        experts = dispatch.getExperts();
      else if (auto combine = dyn_cast<MoeCombineOp>(op))
        experts = combine.getExperts();
      if (!experts || experts.getDefiningOp<MoeDropOp>())
        return WalkResult::advance();
      op->emitOpError("mt-set-capacity: the probs policy keeps the slots of the largest ")
          << "gates, but these experts come from no mt.moe_router (use the position policy)";
      return WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
