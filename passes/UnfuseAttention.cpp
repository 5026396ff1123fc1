// mt-unfuse-attention: fused attention as the chain of its three steps.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTUNFUSEATTENTION
#include "passes/Passes.h.inc"

namespace {

struct MtUnfuseAttention : impl::MtUnfuseAttentionBase<MtUnfuseAttention> {
  using Base::Base;

  void runOnOperation() override {
    for (AttentionOp op : opsOf<AttentionOp>(getOperation())) {
      if (op.getStats()) {
        op.emitOpError("mt-unfuse-attention: the attention keeps its row statistics for a "
                       "gradient (unfuse before mt-autodiff)");
        return signalPassFailure();
      }
      const double rate = op.getDropout() ? op.getDropout()->convertToDouble() : 0.0;
      if (rate > 0 && !op.getStream()) {
        op.emitOpError("mt-unfuse-attention: the attention dropout has no stream (run "
                       "mt-expand first)");
        return signalPassFailure();
      }
      OpBuilder b(op);
      DictionaryAttr placement = op->getDiscardableAttrDictionary(); // mt.layer, mt.stage
      Value probs =
          AttentionProbsOp::create(b, op.getLoc(), op.getQkv(), op.getHeadsAttr(),
                                   op.getKvHeadsAttr(), op.getCausalAttr(), op.getWindowAttr());
      probs.getDefiningOp()->setDiscardableAttrs(placement);
      if (rate > 0) {
        // Head-parallel probabilities hold this rank's block of dimension 1.
        auto dropout =
            DropoutOp::create(b, op.getLoc(), probs, op.getDropoutAttr(), op.getStreamAttr(),
                              op.getHeadParallel() ? b.getUnitAttr() : UnitAttr(), UnitAttr(),
                              UnitAttr(), IntegerAttr());
        dropout->setDiscardableAttrs(placement);
        probs = dropout.getResult();
      }
      auto context =
          AttentionContextOp::create(b, op.getLoc(), probs, op.getQkv(), op.getKvHeadsAttr());
      context->setDiscardableAttrs(placement);
      op.getResult().replaceAllUsesWith(context.getResult());
      op.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
