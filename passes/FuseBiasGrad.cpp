// mt-fuse-bias-grad: a bias gradient summed by the weight gradient's GEMM.
#include "passes/Passes.h"

#include "mlir/IR/Dominance.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSEBIASGRAD
#include "passes/Passes.h.inc"

namespace {

/// The one mt.linear_grad_weight of `bias`'s dy in its block, with its placement; null
/// where none or several are.
LinearGradWeightOp soleWeightGradient(BiasGradOp bias) {
  LinearGradWeightOp found;
  for (Operation *user : bias.getGrad().getUsers()) {
    auto weight = dyn_cast<LinearGradWeightOp>(user);
    if (!weight || weight.getGrad() != bias.getGrad() || weight->getBlock() != bias->getBlock() ||
        !samePlacement(weight, bias))
      continue;
    if (found)
      return {};
    found = weight;
  }
  return found;
}

/// Whether one mt.param_grad alone reads `v`: what mt-fuse-grad-accumulation asks of
/// every weight gradient of an op before the op adds them into the parameters'.
bool addableIntoItsParameter(Value v) {
  return v.hasOneUse() && isa<ParamGradOp>(*v.getUsers().begin());
}

/// Whether every reader of `op`'s results comes after `point` (which is after `op`).
bool readAfter(Operation *op, Operation *point) {
  return llvm::all_of(op->getUsers(), [&](Operation *user) {
    return user->getBlock() == point->getBlock() && point->isBeforeInBlock(user);
  });
}

/// Where the fused op may stand: the earlier op's place, where the later one's operands
/// are defined by then (its readers come after it anyway); else the later one's, where
/// the earlier one's readers all come after it; else nowhere (null).
Operation *placeFor(Operation *earlier, Operation *later, DominanceInfo &dominance) {
  if (llvm::all_of(later->getOperands(),
                   [&](Value v) { return dominance.properlyDominates(v, earlier); }))
    return earlier;
  return readAfter(earlier, later) ? later : nullptr;
}

struct MtFuseBiasGrad : impl::MtFuseBiasGradBase<MtFuseBiasGrad> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<BiasGradOp> biases;
    getOperation().walk([&](BiasGradOp op) { biases.push_back(op); });
    DominanceInfo dominance(getOperation());
    for (BiasGradOp bias : biases) {
      LinearGradWeightOp weight = soleWeightGradient(bias);
      // Both accumulate or neither, now and once mt-fuse-grad-accumulation has run: the
      // fused op would lose the accumulation its pair had where only one result could.
      if (!weight || weight.getAccumulate() != bias.getAccumulate() ||
          addableIntoItsParameter(weight.getResult()) != addableIntoItsParameter(bias.getResult()))
        continue;
      const bool weightFirst = weight->isBeforeInBlock(bias);
      Operation *later = weightFirst ? bias.getOperation() : weight.getOperation();
      Operation *earlier = weightFirst ? weight.getOperation() : bias.getOperation();
      Operation *place = placeFor(earlier, later, dominance);
      if (!place)
        continue;
      OpBuilder b(place);
      auto fused = LinearGradWeightBiasOp::create(b, weight.getLoc(), weight.getGrad(),
                                                  weight.getInput(), weight.getAccumulate());
      fused->setDiscardableAttrs(weight->getDiscardableAttrDictionary());
      weight.getResult().replaceAllUsesWith(fused.getWeightGrad());
      bias.getResult().replaceAllUsesWith(fused.getBiasGrad());
      weight.erase();
      bias.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
