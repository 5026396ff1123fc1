// mt-fuse-grad-accumulation: weight gradients added straight into the parameters'.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSEGRADACCUMULATION
#include "passes/Passes.h.inc"

namespace {

/// Whether every weight gradient of `op` is read by one mt.param_grad alone.
bool onlyParamGradsRead(GradAccumulatingOpInterface op) {
  auto grads = op->getResults().drop_front(op.getFirstWeightGradient());
  return !grads.empty() && llvm::all_of(grads, [](OpResult r) {
    return r.hasOneUse() && isa<ParamGradOp>(*r.getUsers().begin());
  });
}

struct MtFuseGradAccumulation : impl::MtFuseGradAccumulationBase<MtFuseGradAccumulation> {
  using Base::Base;

  void runOnOperation() override {
    WalkResult walk = getOperation().walk([](GradAccumulatingOpInterface op) {
      if (op.accumulates() || !onlyParamGradsRead(op))
        return WalkResult::advance();
      // The weight gradients take the accumulator type (the op's own type rule).
      op->setAttr("accumulate", UnitAttr::get(op->getContext()));
      return failed(reinferOp(op)) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
