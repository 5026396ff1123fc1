// mt-pad-vocab: Megatron's --make-vocab-size-divisible-by, without changing the loss.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTPADVOCAB
#include "passes/Passes.h.inc"

namespace {

struct MtPadVocab : impl::MtPadVocabBase<MtPadVocab> {
  using Base::Base;

  /// Marks a vocabulary table (or an output layer's bias) with its real rows, padded or
  /// not (a checkpoint of another padding loads into it either way), and rounds its rows
  /// up to the multiple.
  void padRows(ParamOp param, bool &changed) {
    auto type = cast<RankedTensorType>(param.getType());
    const int64_t rows = type.getDimSize(0);
    if (!param.getVocabRows())
      param.setVocabRows(rows);
    const int64_t padded = (rows + multiple - 1) / multiple * multiple;
    if (padded == rows)
      return;
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = padded;
    param.getResult().setType(RankedTensorType::get(shape, type.getElementType()));
    changed = true;
  }

  LogicalResult pad(FunctionOpInterface fn) {
    // The tables: what mt.embedding reads, and an untied output layer (the linear whose
    // result is a loss's logits), weight and bias alike. One that is not a parameter can
    // be left as it is only where nothing is padded (a multiple of 1 marks, no more).
    SetVector<ParamOp> tables;
    auto collect = [&](Value table, Operation *user, const Twine &what) {
      if (auto param = table.getDefiningOp<ParamOp>())
        tables.insert(param);
      else if (multiple != 1) {
        user->emitOpError(what) << " must be an mt.param to be padded";
        return false;
      }
      return true;
    };
    WalkResult walk = fn.walk([&](EmbeddingOp op) {
      return collect(op.getTable(), op, "table") ? WalkResult::advance()
                                                 : WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      return failure();
    walk = fn.walk([&](CrossEntropyOp op) {
      auto head = op.getLogits().getDefiningOp<LinearOp>();
      if (!head)
        return WalkResult::advance();
      if (!collect(head.getWeight(), op, "output layer's weight") ||
          (head.getBias() && !collect(head.getBias(), op, "output layer's bias")))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    bool changed = false;
    for (ParamOp param : tables)
      padRows(param, changed);
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
