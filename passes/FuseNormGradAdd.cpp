// mt-fuse-norm-grad-add: the residual stream's gradient summed in a norm's gradient.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSENORMGRADADD
#include "passes/Passes.h.inc"

namespace {

/// Folds the add that sums `norm`'s input gradient into the residual stream's gradient
/// into `norm`, which stays in its place: the other summand must be defined before it.
template <typename NormGrad> void fuse(NormGrad norm) {
  Value dx = norm.getInputGrad();
  auto add = dx.hasOneUse() ? dyn_cast<AddOp>(*dx.getUsers().begin()) : AddOp();
  if (norm.getResidualGrad() || !add || add.getLhs() == add.getRhs() ||
      !samePlacement(norm, add))
    return;
  Value residual = add.getLhs() == dx ? add.getRhs() : add.getLhs();
  Operation *def = residual.getDefiningOp();
  if (residual.getType() != dx.getType() ||
      (def ? def->getBlock() != norm->getBlock() || !def->isBeforeInBlock(norm)
           : cast<BlockArgument>(residual).getOwner() != norm->getBlock()))
    return;
  norm.getResidualGradMutable().assign(residual);
  add.getResult().replaceAllUsesWith(dx);
  add.erase();
}

struct MtFuseNormGradAdd : impl::MtFuseNormGradAddBase<MtFuseNormGradAdd> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<Operation *> norms;
    getOperation().walk([&](Operation *op) {
      if (isa<LayerNormGradOp, RmsNormGradOp>(op))
        norms.push_back(op);
    });
    for (Operation *op : norms) {
      if (auto layerNorm = dyn_cast<LayerNormGradOp>(op))
        fuse(layerNorm);
      else
        fuse(cast<RmsNormGradOp>(op));
    }
  }
};

} // namespace
} // namespace mlir::mt
