// mt-fuse-cross-entropy: the loss and its gradient in one pass over the logits.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSECROSSENTROPY
#include "passes/Passes.h.inc"

namespace {

/// The loss `grad` differentiates: the mt.cross_entropy of its logits, targets and
/// classes in its own block; null where there is none (a pipeline's backward program).
CrossEntropyOp lossOf(CrossEntropyGradOp grad) {
  for (Operation *user : grad.getLogits().getUsers())
    if (auto loss = dyn_cast<CrossEntropyOp>(user))
      if (loss->getBlock() == grad->getBlock() && loss.getTargets() == grad.getTargets() &&
          loss.getNumClassesAttr() == grad.getNumClassesAttr())
        return loss;
  return {};
}

/// Whether `seed` can be had where `loss` is: defined before it, or an op of no operands
/// and no effects (the loss seed mt-autodiff writes) that can move there.
bool availableAt(Value seed, CrossEntropyOp loss) {
  Operation *def = seed.getDefiningOp();
  if (!def)
    return seed.getParentBlock() == loss->getBlock();
  if (def->getBlock() == loss->getBlock() && def->isBeforeInBlock(loss))
    return true;
  return def->getNumOperands() == 0 && isMemoryEffectFree(def);
}

struct MtFuseCrossEntropy : impl::MtFuseCrossEntropyBase<MtFuseCrossEntropy> {
  using Base::Base;

  void runOnOperation() override {
    for (CrossEntropyGradOp grad : opsOf<CrossEntropyGradOp>(getOperation())) {
      CrossEntropyOp loss = lossOf(grad);
      if (!loss || !availableAt(grad.getLossGrad(), loss))
        continue;
      if (Operation *seed = grad.getLossGrad().getDefiningOp();
          seed && !(seed->getBlock() == loss->getBlock() && seed->isBeforeInBlock(loss)))
        seed->moveBefore(loss);
      OpBuilder b(loss);
      auto fused = CrossEntropyWithGradOp::create(b, loss.getLoc(), grad.getLossGrad(),
                                                  loss.getLogits(), loss.getTargets(),
                                                  loss.getNumClassesAttr());
      fused->setDiscardableAttrs(loss->getDiscardableAttrDictionary());
      loss.getResult().replaceAllUsesWith(fused.getLoss());
      grad.getResult().replaceAllUsesWith(fused.getDlogits());
      grad.erase();
      loss.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
