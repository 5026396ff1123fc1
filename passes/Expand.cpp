// mt-expand: unrolls mt.repeat, numbers dropout streams, rejects duplicate names.
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTEXPAND
#include "passes/Passes.h.inc"

namespace {

/// Replaces `repeat` by `count` copies of its block, parameters renamed
/// `<prefix>.<layer>.<name>`.
LogicalResult unroll(RepeatOp repeat, SymbolTableCollection &symbols, int64_t &nextLayer) {
  auto block = symbols.lookupNearestSymbolFrom<FunctionOpInterface>(
      repeat, repeat.getCalleeAttr());
  Region &body = block.getFunctionBody();
  if (!body.hasOneBlock())
    return repeat.emitOpError("block ") << repeat.getCalleeAttr()
                                        << " must have a single basic block";

  OpBuilder builder(repeat);
  Value stream = repeat.getInput();
  MLIRContext *context = repeat->getContext();
  for (int64_t layer = 0; layer < static_cast<int64_t>(repeat.getCount()); ++layer) {
    // Every copy carries a tag of its block copy (mt.layer), renumbered in program order
    // below; recomputation and pipeline partitioning group ops by it.
    IntegerAttr ordinal = IntegerAttr::get(IntegerType::get(context, 64), nextLayer++);
    std::string prefix = (repeat.getPrefix() + "." + llvm::Twine(layer) + ".").str();
    IRMapping mapping;
    mapping.map(body.getArgument(0), stream);
    for (Operation &op : body.front()) {
      if (op.hasTrait<OpTrait::IsTerminator>()) {
        stream = mapping.lookup(op.getOperand(0));
        break;
      }
      Operation *copy = builder.clone(op, mapping);
      // Diagnostics about a copy point at the block and at the repeat that made it.
      copy->setLoc(CallSiteLoc::get(op.getLoc(), repeat.getLoc()));
      copy->setAttr(kLayerAttr, ordinal);
      if (auto param = dyn_cast<ParamOp>(copy))
        param.setName(prefix + param.getName().str());
    }
  }
  repeat.replaceAllUsesWith(stream);
  repeat.erase();
  return success();
}

struct MtExpand : impl::MtExpandBase<MtExpand> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTableCollection symbols;
    int64_t nextLayer = 0;

    // Innermost first: a repeat is unrolled once its block repeats nothing, so nested
    // repeats compose their prefixes (o.1.i.0.w). No progress means recursion.
    while (true) {
      SmallVector<RepeatOp> repeats = opsOf<RepeatOp>(module), ready;
      if (repeats.empty())
        break;
      for (RepeatOp repeat : repeats) {
        auto block = symbols.lookupNearestSymbolFrom<FunctionOpInterface>(
            repeat, repeat.getCalleeAttr());
        if (block.getFunctionBody().getOps<RepeatOp>().empty())
          ready.push_back(repeat);
      }
      if (ready.empty()) {
        repeats.front().emitOpError("block ")
            << repeats.front().getCalleeAttr() << " repeats itself through mt.repeat";
        return signalPassFailure();
      }
      for (RepeatOp repeat : ready)
        if (failed(unroll(repeat, symbols, nextLayer)))
          return signalPassFailure();
    }

    // Layer ordinals in program order. A copy of a nested block carries its outermost
    // repeat's copy's tag, so the unit is the outermost block; number those units by
    // first appearance.
    for (auto fn : module.getOps<FunctionOpInterface>()) {
      if (fn.isPrivate())
        continue;
      DenseMap<int64_t, int64_t> ordinalOf;
      fn.walk([&](Operation *op) {
        auto tag = op->getAttrOfType<IntegerAttr>(kLayerAttr);
        if (!tag)
          return;
        auto [it, inserted] = ordinalOf.try_emplace(tag.getInt(), ordinalOf.size());
        op->setAttr(kLayerAttr, IntegerAttr::get(tag.getType(), it->second));
      });
    }

    // Block functions are private helpers; once unrolled nothing calls them.
    SymbolTable table(module);
    for (auto fn : llvm::make_early_inc_range(module.getOps<FunctionOpInterface>()))
      if (fn.isPrivate() && SymbolTable::symbolKnownUseEmpty(fn, module))
        fn.erase();

    // Every random op — a dropout, an attention that drops its probabilities — draws
    // from its own stream.
    auto forEachRandomOp = [&](auto fn) {
      return module.walk([&](Operation *op) {
        if (auto a = dyn_cast<AttentionOp>(op); a && !a.getDropout())
          return WalkResult::advance();
        return isa<DropoutOp, AttentionOp>(op) ? fn(op) : WalkResult::advance();
      });
    };
    auto streamOf = [](Operation *op) { return op->getAttrOfType<IntegerAttr>("stream"); };
    int64_t nextStream = 0;
    forEachRandomOp([&](Operation *op) {
      if (IntegerAttr stream = streamOf(op))
        nextStream = std::max<int64_t>(nextStream, stream.getInt() + 1);
      return WalkResult::advance();
    });
    forEachRandomOp([&](Operation *op) {
      if (!streamOf(op))
        op->setAttr("stream", IntegerAttr::get(IntegerType::get(op->getContext(), 64),
                                               nextStream++));
      return WalkResult::advance();
    });
    // Two ops of one stream would draw the same mask (a stream written inside a
    // repeated block is copied into every layer).
    DenseMap<int64_t, Operation *> byStream;
    WalkResult unique = forEachRandomOp([&](Operation *op) {
      if (streamOf(op).getInt() >= (int64_t{1} << 24)) {
        op->emitOpError("dropout stream ") << streamOf(op).getInt() << " exceeds 2^24 - 1";
        return WalkResult::interrupt();
      }
      auto [it, inserted] = byStream.try_emplace(streamOf(op).getInt(), op);
      if (inserted)
        return WalkResult::advance();
      InFlightDiagnostic diag = op->emitOpError("dropout stream ")
                                << streamOf(op).getInt()
                                << " is used twice; leave streams to mt-expand";
      diag.attachNote(it->second->getLoc()) << "first use here";
      return WalkResult::interrupt();
    });
    if (unique.wasInterrupted())
      return signalPassFailure();

    for (auto fn : module.getOps<FunctionOpInterface>()) {
      llvm::StringMap<ParamOp> byName;
      WalkResult result = fn.walk([&](ParamOp param) {
        auto [it, inserted] = byName.try_emplace(param.getName(), param);
        if (inserted)
          return WalkResult::advance();
        InFlightDiagnostic diag = param.emitOpError("parameter '")
                                  << param.getName() << "' is defined twice";
        diag.attachNote(it->second.getLoc()) << "first definition here";
        return WalkResult::interrupt();
      });
      if (result.wasInterrupted())
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace mlir::mt
