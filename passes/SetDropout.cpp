// mt-set-dropout: Megatron's --attention-dropout and --hidden-dropout.
#include "passes/Passes.h"

#include <cstdio>

namespace mlir::mt {
#define GEN_PASS_DEF_MTSETDROPOUT
#include "passes/Passes.h.inc"

namespace {

struct MtSetDropout : impl::MtSetDropoutBase<MtSetDropout> {
  using Base::Base;

  /// A rate given (≥ 0) must be a probability of dropping: [0, 1).
  bool valid(const char *name, double rate) {
    if (rate < 1.0)
      return true;
    char text[32];
    std::snprintf(text, sizeof text, "%g", rate);
    getOperation().emitError("mt-set-dropout: ")
        << name << " rate " << text << " must be less than 1";
    return false;
  }

  void runOnOperation() override {
    if (!valid("attention", attention) || !valid("hidden", hidden))
      return signalPassFailure();
    // After mt-autodiff a gradient repeats each rate, and a dropout's mask feeds one.
    WalkResult differentiated = getOperation().walk([&](Operation *op) {
      auto dropout = dyn_cast<DropoutOp>(op);
      if (!isa<AttentionGradOp, BiasDropoutAddOp>(op) && !(dropout && dropout.getKeepMask()))
        return WalkResult::advance();
      op->emitOpError("is part of a gradient: mt-set-dropout sets a model's rates, before "
                      "mt-autodiff");
      return WalkResult::interrupt();
    });
    if (differentiated.wasInterrupted())
      return signalPassFailure();
    Builder builder(&getContext());
    getOperation().walk([&](Operation *op) {
      if (auto attentionOp = dyn_cast<AttentionOp>(op); attentionOp && attention >= 0) {
        if (attention > 0)
          attentionOp.setDropoutAttr(builder.getF64FloatAttr(attention));
        else
          attentionOp.removeDropoutAttr();
      }
    });
    if (hidden < 0)
      return;
    for (DropoutOp op : opsOf<DropoutOp>(getOperation())) {
      if (hidden > 0) {
        op.setRateAttr(builder.getF64FloatAttr(hidden));
        continue;
      }
      op.getResult().replaceAllUsesWith(op.getInput());
      op.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
