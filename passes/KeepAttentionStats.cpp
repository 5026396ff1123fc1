// mt-keep-attention-stats: the attention forward keeps its rows' statistics for its
// gradient.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTKEEPATTENTIONSTATS
#include "passes/Passes.h.inc"

namespace {

struct MtKeepAttentionStats : impl::MtKeepAttentionStatsBase<MtKeepAttentionStats> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<AttentionGradOp> grads;
    getOperation().walk([&](AttentionGradOp grad) {
      if (!grad.getStats())
        grads.push_back(grad);
    });
    for (AttentionGradOp grad : grads) {
      auto forward = grad.getOutput().getDefiningOp<AttentionOp>();
      if (!forward || forward.getQkv() != grad.getQkv())
        continue; // an output from elsewhere (a pipeline stage's stash): nothing to keep
      if (forward.getHeadsAttr() != grad.getHeadsAttr() ||
          forward.getKvHeadsAttr() != grad.getKvHeadsAttr() ||
          forward.getCausalAttr() != grad.getCausalAttr() ||
          forward.getWindowAttr() != grad.getWindowAttr() ||
          forward.getDropoutAttr() != grad.getDropoutAttr() ||
          forward.getStreamAttr() != grad.getStreamAttr())
        continue; // not this attention's gradient: its rows are other rows
      if (!forward.getStats()) {
        OpBuilder b(forward);
        auto keeping = AttentionOp::create(
            b, forward.getLoc(), forward.getQkv(), forward.getHeadsAttr(), forward.getKvHeadsAttr(),
            forward.getCausalAttr(), forward.getDropoutAttr(), forward.getStreamAttr(),
            forward.getHeadParallelAttr(), b.getUnitAttr(), forward.getContextParallelAttr(),
            forward.getRingAttr(), forward.getWindowAttr());
        keeping->setDiscardableAttrs(forward->getDiscardableAttrDictionary());
        forward.getResult().replaceAllUsesWith(keeping.getResult());
        forward.erase();
        forward = keeping;
      }
      grad.getStatsMutable().assign(forward.getStats());
    }
  }
};

} // namespace
} // namespace mlir::mt
