// mt-fuse-bias-dropout-add: a residual branch's bias, dropout and add as one op.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSEBIASDROPOUTADD
#include "passes/Passes.h.inc"

namespace {

/// Whether every reader of `v` comes after `op` in its block.
bool readAfter(Value v, Operation *op) {
  return llvm::all_of(v.getUsers(), [&](Operation *user) {
    Operation *at = op->getBlock()->findAncestorOpInBlock(*user);
    return at && op->isBeforeInBlock(at);
  });
}

struct MtFuseBiasDropoutAdd : impl::MtFuseBiasDropoutAddBase<MtFuseBiasDropoutAdd> {
  using Base::Base;

  void runOnOperation() override {
    for (DropoutOp dropout : opsOf<DropoutOp>(getOperation())) {
      Value dropped = dropout.getResult();
      auto add = dropped.hasOneUse() ? dyn_cast<AddOp>(*dropped.getUsers().begin()) : AddOp();
      // The fused op stands at the add's place: the mask's readers must come after it.
      if (!add || add.getLhs() == add.getRhs() || !samePlacement(dropout, add) ||
          (dropout.getMask() && !readAfter(dropout.getMask(), add)))
        continue;
      Value residual = add.getLhs() == dropped ? add.getRhs() : add.getLhs();
      Value input = dropout.getInput(), bias;
      auto biasAdd = input.getDefiningOp<BiasAddOp>();
      if (biasAdd && input.hasOneUse() && samePlacement(biasAdd, dropout)) {
        input = biasAdd.getInput();
        bias = biasAdd.getBias();
      } else {
        biasAdd = {};
      }
      OpBuilder b(add);
      auto fused = BiasDropoutAddOp::create(
          b, dropout.getLoc(), input, residual, bias, dropout.getRateAttr(),
          dropout.getStreamAttr(), dropout.getSequenceParallelAttr(),
          dropout.getFeatureParallelAttr(), dropout.getKeepMaskAttr(),
          dropout.getContextParallelAttr());
      fused->setDiscardableAttrs(dropout->getDiscardableAttrDictionary());
      add.getResult().replaceAllUsesWith(fused.getResult());
      if (dropout.getMask())
        dropout.getMask().replaceAllUsesWith(fused.getMask());
      add.erase();
      dropout.erase();
      if (biasAdd)
        biasAdd.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
