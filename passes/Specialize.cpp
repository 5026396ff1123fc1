// mt-specialize: fixes batch and sequence, re-infers every type.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTSPECIALIZE
#include "passes/Passes.h.inc"

namespace {

struct MtSpecialize : impl::MtSpecializeBase<MtSpecialize> {
  using Base::Base;

  LogicalResult specialize(FunctionOpInterface fn) {
    // The sequence: seq-length, else the position table's length, else the model's own
    // `mt.seq_length` (a model with rotary embeddings has no table).
    int64_t seq = seqLength;
    if (seq == 0) {
      fn.walk([&](PositionEmbeddingOp op) {
        seq = cast<RankedTensorType>(op.getTable().getType()).getDimSize(0);
      });
      auto module = fn->getParentOfType<ModuleOp>();
      if (auto length = module ? module->getAttrOfType<IntegerAttr>("mt.seq_length") : nullptr;
          seq == 0 && length)
        seq = length.getInt();
      if (seq == 0)
        return fn.emitError("mt-specialize: the model has no position table and no "
                            "mt.seq_length; give seq-length");
    }
    if (microBatchSize <= 0 || seq < 0)
      return fn.emitError("mt-specialize: micro-batch-size ")
             << microBatchSize << " and seq-length " << seq << " must be positive";
    const int64_t fixed[2] = {microBatchSize, seq};
    for (BlockArgument arg : fn.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() < 2)
        continue;
      SmallVector<int64_t> shape(type.getShape());
      for (int i = 0; i < 2; ++i) {
        if (!ShapedType::isDynamic(shape[i]) && shape[i] != fixed[i])
          return fn.emitError("mt-specialize: argument ")
                 << arg.getArgNumber() << " of type " << type << " has "
                 << (i == 0 ? "batch " : "sequence ") << shape[i] << ", not " << fixed[i];
        shape[i] = fixed[i];
      }
      arg.setType(RankedTensorType::get(shape, type.getElementType()));
    }
    // A window spanning the sequence masks what the causal mask does: none, so that the
    // backends run plain causal attention (cuDNN's, on a GPU).
    fn.walk([&](AttentionOp op) {
      if (op.getWindow() && static_cast<int64_t>(*op.getWindow()) >= seq)
        op.removeWindowAttr();
    });
    if (!precision.empty()) {
      MLIRContext *ctx = fn->getContext();
      Type element = llvm::StringSwitch<Type>(precision)
                         .Case("f32", Float32Type::get(ctx))
                         .Case("f64", Float64Type::get(ctx))
                         .Case("bf16", BFloat16Type::get(ctx))
                         .Case("f16", Float16Type::get(ctx))
                         .Default(Type());
      if (!element)
        return fn.emitError("mt-specialize: precision '")
               << precision << "' is not f32, f64, bf16 or f16";
      fn.walk([&](ParamOp param) {
        auto type = cast<RankedTensorType>(param.getType());
        param.getResult().setType(RankedTensorType::get(type.getShape(), element));
      });
    }
    return reinferTypes(fn);
  }

  void runOnOperation() override {
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      if (!fn.isPrivate() && !fn.isExternal() && failed(specialize(fn)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
