// mt-pad-vocab: Megatron's --make-vocab-size-divisible-by, without changing the loss.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTPADVOCAB
#include "passes/Passes.h.inc"

namespace {

struct MtPadVocab : impl::MtPadVocabBase<MtPadVocab> {
  using Base::Base;

  LogicalResult pad(FunctionOpInterface fn) {
    bool changed = false;
    WalkResult walk = fn.walk([&](EmbeddingOp op) {
      auto param = op.getTable().getDefiningOp<ParamOp>();
      if (!param) {
        op.emitOpError("table must be an mt.param to be padded");
        return WalkResult::interrupt();
      }
      auto type = cast<RankedTensorType>(param.getType());
      int64_t rows = type.getDimSize(0);
      int64_t padded = (rows + multiple - 1) / multiple * multiple;
      if (padded != rows) {
        param.getResult().setType(RankedTensorType::get({padded, type.getDimSize(1)},
                                                        type.getElementType()));
        changed = true;
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    if (!changed)
      return success();

    DenseMap<Operation *, int64_t> classesBefore;
    fn.walk([&](CrossEntropyOp op) {
      classesBefore[op] = cast<RankedTensorType>(op.getLogits().getType()).getShape().back();
    });
    if (failed(reinferTypes(fn)))
      return failure();
    fn.walk([&](CrossEntropyOp op) {
      int64_t now = cast<RankedTensorType>(op.getLogits().getType()).getShape().back();
      if (now != classesBefore[op] && !op.getNumClasses())
        op.setNumClasses(classesBefore[op]);
    });
    return success();
  }

  void runOnOperation() override {
    if (multiple <= 0) {
      getOperation().emitError("mt-pad-vocab: multiple ") << multiple << " must be positive";
      return signalPassFailure();
    }
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      if (!fn.isExternal() && failed(pad(fn)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
