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
    if (factor > 0 && policy == "probs")
      for (MoeRouterOp router : routers)
        dropByGates(router, factor);
  }
};

} // namespace
} // namespace mlir::mt
