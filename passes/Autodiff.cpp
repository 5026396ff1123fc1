// mt-autodiff: reverse-mode differentiation of the loss function.
#include "passes/Passes.h"

#include "llvm/ADT/SetVector.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTAUTODIFF
#include "passes/Passes.h.inc"

namespace {

/// Values that depend on a parameter and reach the loss: exactly those whose
/// gradient the training step needs.
DenseSet<Value> valuesNeedingGradients(Block &body, Value loss) {
  DenseSet<Value> dependsOnParam;
  for (Operation &op : body) {
    bool active = isa<ParamOp>(op) ||
                  llvm::any_of(op.getOperands(),
                               [&](Value v) { return dependsOnParam.contains(v); });
    if (active)
      dependsOnParam.insert(op.getResults().begin(), op.getResults().end());
  }
  DenseSet<Value> reachesLoss{loss};
  for (Operation &op : llvm::reverse(body))
    if (llvm::any_of(op.getResults(), [&](Value v) { return reachesLoss.contains(v); }))
      reachesLoss.insert(op.getOperands().begin(), op.getOperands().end());

  DenseSet<Value> needed;
  for (Value v : dependsOnParam)
    if (reachesLoss.contains(v))
      needed.insert(v);
  return needed;
}

struct MtAutodiff : impl::MtAutodiffBase<MtAutodiff> {
  using Base::Base;

  LogicalResult differentiate(FunctionOpInterface fn) {
    Block &body = fn.getFunctionBody().front();
    Operation *terminator = body.getTerminator();
    if (terminator->getNumOperands() != 1)
      return fn.emitError("mt-autodiff: @") << function << " must return only the loss";
    Value loss = terminator->getOperand(0);
    auto lossType = dyn_cast<RankedTensorType>(loss.getType());
    if (!lossType || lossType.getRank() != 0 || !isa<FloatType>(lossType.getElementType()))
      return fn.emitError("mt-autodiff: the loss must be a float scalar tensor, got ")
             << loss.getType();

    // Dropouts keep their masks for backward, one byte per element, as Megatron does.
    for (DropoutOp d : llvm::make_early_inc_range(body.getOps<DropoutOp>())) {
      if (d.getKeepMask())
        continue;
      OpBuilder before(d);
      auto kept =
          DropoutOp::create(before, d.getLoc(), d.getInput(), d.getRateAttr(), d.getStreamAttr(),
                            d.getSequenceParallelAttr(), d.getFeatureParallelAttr(),
                            before.getUnitAttr(), d.getContextParallelAttr());
      kept->setDiscardableAttrs(d->getDiscardableAttrDictionary());
      d.getResult().replaceAllUsesWith(kept.getResult());
      d.erase();
    }

    DenseSet<Value> needed = valuesNeedingGradients(body, loss);
    SmallVector<Operation *> forward;
    for (Operation &op : body.without_terminator())
      forward.push_back(&op);

    OpBuilder b(terminator);
    DenseMap<Value, Value> grads;
    auto seed = arith::ConstantOp::create(
        b, loss.getLoc(), DenseElementsAttr::get(lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
    seed->setAttr(kLossSeedAttr, b.getUnitAttr());
    grads[loss] = seed;
    // Backward ops run where the forward op they differentiate runs (mt.stage).
    if (Operation *def = loss.getDefiningOp())
      if (Attribute stage = def->getAttr(kStageAttr))
        seed->setAttr(kStageAttr, stage);

    for (Operation *op : llvm::reverse(forward)) {
      SmallVector<Value> resultGrads;
      for (Value r : op->getResults())
        resultGrads.push_back(grads.lookup(r));
      if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
        continue;
      auto rule = dyn_cast<DifferentiableOpInterface>(op);
      if (!rule)
        return op->emitOpError("has no gradient rule, but its result reaches the loss");
      Operation *last = terminator->getPrevNode();
      FailureOr<SmallVector<Value>> operandGrads = rule.buildGradients(b, resultGrads);
      if (failed(operandGrads))
        return failure();
      for (auto [operand, g] : llvm::zip_equal(op->getOperands(), *operandGrads)) {
        if (!g || !needed.contains(operand))
          continue;
        // A parameter's gradient goes straight into its persistent buffer, one
        // contribution at a time, so no partial sum stays alive across backward.
        if (auto param = operand.getDefiningOp<ParamOp>()) {
          ParamGradOp::create(b, param.getLoc(), param.getName(), g);
          continue;
        }
        Value &acc = grads[operand];
        acc = acc ? AddOp::create(b, op->getLoc(), acc, g).getResult() : g;
      }
      if (Attribute stage = op->getAttr(kStageAttr))
        for (Operation *built = last->getNextNode(); built != terminator;
             built = built->getNextNode())
          built->setAttr(kStageAttr, stage);
    }

    // Rules build every operand's gradient; drop those nothing needed.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isPure(&op) && op.use_empty() && !op.hasTrait<OpTrait::IsTerminator>())
        op.erase();

    fn.setName(StringAttr::get(fn->getContext(), "train_step"));
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = dyn_cast_or_null<FunctionOpInterface>(SymbolTable::lookupSymbolIn(module, function));
    if (!fn || fn.isExternal()) {
      module.emitError("mt-autodiff: no function @") << function << " to differentiate";
      return signalPassFailure();
    }
    if (SymbolTable::lookupSymbolIn(module, "train_step")) {
      module.emitError("mt-autodiff: the module already has a @train_step");
      return signalPassFailure();
    }
    if (!fn.getFunctionBody().hasOneBlock()) {
      fn.emitError("mt-autodiff: @") << function << " must have a single basic block";
      return signalPassFailure();
    }
    if (failed(differentiate(fn)))
      signalPassFailure();
  }
};

} // namespace

int64_t numberOps(Block &body, DenseMap<Operation *, int64_t> &position) {
  int64_t n = 0, backwardStart = -1;
  for (Operation &op : body) {
    if (backwardStart < 0 && isa<arith::ConstantOp>(op))
      backwardStart = n;
    position[&op] = n++;
  }
  return backwardStart;
}

} // namespace mlir::mt
