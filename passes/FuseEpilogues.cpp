// mt-fuse-epilogues: GELU and its gradient folded into the GEMMs beside them.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTFUSEEPILOGUES
#include "passes/Passes.h.inc"

namespace {

/// The one GELU reading `linear`'s result; null where none or several do, or where it is
/// exact (cuBLASLt's epilogues compute the tanh form only). Every other reader (GELU's
/// gradient, a pipeline stash's return) reads the fused op's `pre`.
GeluOp soleGelu(LinearOp linear) {
  GeluOp gelu;
  for (Operation *user : linear.getResult().getUsers())
    if (auto g = dyn_cast<GeluOp>(user)) {
      if (gelu)
        return {};
      gelu = g;
    }
  return gelu && gelu.getApproximate() == "tanh" && samePlacement(linear, gelu) ? gelu
                                                                                : GeluOp();
}

/// The tanh GELU's gradient that is the only reader of `product`, as its incoming
/// gradient.
GeluGradOp soleGeluGrad(LinearGradInputOp product) {
  Value dx = product.getResult();
  if (!dx.hasOneUse())
    return {};
  auto grad = dyn_cast<GeluGradOp>(dx.use_begin()->getOwner());
  return grad && grad.getApproximate() == "tanh" && grad.getGrad() == dx &&
                 grad.getInput() != dx && samePlacement(product, grad)
             ? grad
             : GeluGradOp();
}

struct MtFuseEpilogues : impl::MtFuseEpiloguesBase<MtFuseEpilogues> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<LinearOp> linears;
    SmallVector<LinearGradInputOp> products;
    getOperation().walk([&](Operation *op) {
      if (auto linear = dyn_cast<LinearOp>(op))
        linears.push_back(linear);
      else if (auto product = dyn_cast<LinearGradInputOp>(op))
        products.push_back(product);
    });
    // In the linear's place: every reader of the GELU comes after it.
    for (LinearOp linear : linears) {
      GeluOp gelu = soleGelu(linear);
      if (!gelu)
        continue;
      OpBuilder b(linear);
      auto fused = LinearGeluOp::create(b, linear.getLoc(), linear.getInput(),
                                        linear.getWeight(), linear.getBias());
      fused->setDiscardableAttrs(linear->getDiscardableAttrDictionary());
      gelu.getResult().replaceAllUsesWith(fused.getResult());
      linear.getResult().replaceAllUsesWith(fused.getPre());
      gelu.erase();
      linear.erase();
    }
    // In the gradient's place: the pre-activation may be defined after the product.
    for (LinearGradInputOp product : products) {
      GeluGradOp grad = soleGeluGrad(product);
      if (!grad)
        continue;
      OpBuilder b(grad);
      auto fused = LinearGradInputGeluOp::create(b, grad.getLoc(), product.getGrad(),
                                                 product.getWeight(), grad.getInput());
      fused->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
      grad.getResult().replaceAllUsesWith(fused.getResult());
      grad.erase();
      product.erase();
    }
  }
};

} // namespace
} // namespace mlir::mt
