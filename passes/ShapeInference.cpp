// Re-derives result types in program order; mt-specialize and mt-pad-vocab use it.
#include "passes/Passes.h"

namespace mlir::mt {

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
