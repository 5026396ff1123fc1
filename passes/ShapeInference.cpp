// Re-derives result types in program order; mt-specialize and mt-pad-vocab use it.
#include "passes/Passes.h"

namespace mlir::mt {

LogicalResult reinferOp(Operation *op) {
  auto infer = dyn_cast<InferTypeOpInterface>(op);
  if (!infer)
    return success();
  SmallVector<Type> types;
  if (failed(infer.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types)))
    return failure();
  for (auto [result, type] : llvm::zip_equal(op->getResults(), types))
    result.setType(type);
  return success();
}

LogicalResult reinferTypes(FunctionOpInterface fn) {
  WalkResult walk = fn.walk([&](Operation *op) {
    return failed(reinferOp(op)) ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  Block &body = fn.getFunctionBody().front();
  fn.setType(FunctionType::get(fn->getContext(), body.getArgumentTypes(),
                               body.getTerminator()->getOperandTypes()));
  return success();
}

} // namespace mlir::mt
