// mt-set-capacity: Megatron-Core's --moe-expert-capacity-factor (with
// --moe-token-drop-policy position).
#include "passes/Passes.h"

#include <cmath>

namespace mlir::mt {
#define GEN_PASS_DEF_MTSETCAPACITY
#include "passes/Passes.h.inc"

namespace {

struct MtSetCapacity : impl::MtSetCapacityBase<MtSetCapacity> {
  using Base::Base;

  void runOnOperation() override {
    if (!std::isfinite(factor)) {
      getOperation().emitError("mt-set-capacity: the capacity factor must be a finite number");
      return signalPassFailure();
    }
    if (factor < 0)
      return;
    Builder b(&getContext());
    getOperation().walk([&](Operation *op) {
      if (!isa<MoeDispatchOp, MoeCombineOp, MoeDispatchGradOp, MoeCombineGradOp>(op))
        return;
      if (factor > 0)
        op->setAttr("capacity_factor", b.getF64FloatAttr(factor));
      else
        op->removeAttr("capacity_factor");
    });
  }
};

} // namespace
} // namespace mlir::mt
