// mt-pipeline-assign and mt-pipeline-partition: layers to pipeline stages, and the
// training step split into a forward and a backward function per virtual stage.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <set>

namespace mlir::mt {
#define GEN_PASS_DEF_MTPIPELINEASSIGN
#define GEN_PASS_DEF_MTPIPELINEPARTITION
#include "passes/Passes.h.inc"

namespace {

struct MtPipelineAssign : impl::MtPipelineAssignBase<MtPipelineAssign> {
  using Base::Base;

  LogicalResult assign(FunctionOpInterface fn) {
    Block &body = fn.getFunctionBody().front();
    std::set<int64_t> layers;
    for (Operation &op : body)
      if (auto layer = op.getAttrOfType<IntegerAttr>(kLayerAttr))
        layers.insert(layer.getInt());
    const int64_t virtualStages = stages * chunks;
    const int64_t count = static_cast<int64_t>(layers.size());
    // The first layer of each virtual stage.
    std::vector<int64_t> firstLayer;
    if (firstStageLayers > 0 || lastStageLayers > 0) {
      const int64_t first = firstStageLayers, last = lastStageLayers;
      const int64_t middle = count - first - last;
      const int64_t middleStages = stages - (first > 0) - (last > 0);
      if (chunks != 1 || middle < 0 || (middleStages > 0 && middle % middleStages != 0) ||
          (middleStages == 0 && middle != 0) || (middleStages > 0 && middle == 0))
        return fn.emitError("mt-pipeline-assign: ")
               << count << " layers cannot be split with " << first
               << " on the first stage and " << last << " on the last over "
               << static_cast<int64_t>(stages) << " stages (and no virtual stages)";
      int64_t at = 0;
      for (int64_t s = 0; s < stages; ++s) {
        firstLayer.push_back(at);
        at += s == 0 && first > 0 ? first
              : s == stages - 1 && last > 0 ? last
                                            : middle / middleStages;
      }
    } else {
      if (count == 0 || count % virtualStages != 0)
        return fn.emitError("mt-pipeline-assign: ")
               << count << " layers do not split evenly over "
               << static_cast<int64_t>(stages) << " pipeline stages x "
               << static_cast<int64_t>(chunks)
               << " virtual stages (an uneven split can be asked for: first/last stage "
                  "layers)";
      for (int64_t v = 0; v < virtualStages; ++v)
        firstLayer.push_back(v * (count / virtualStages));
    }
    Builder b(fn->getContext());
    bool seenLayer = false;
    for (Operation &op : body.without_terminator()) {
      int64_t stage;
      if (auto layer = op.getAttrOfType<IntegerAttr>(kLayerAttr)) {
        seenLayer = true;
        stage = std::upper_bound(firstLayer.begin(), firstLayer.end(), layer.getInt()) -
                firstLayer.begin() - 1;
      } else {
        // Before the first layer: the embeddings; after the last: the head and loss.
        stage = seenLayer ? virtualStages - 1 : 0;
      }
      op.setAttr(kStageAttr, b.getI64IntegerAttr(stage));
    }
    return success();
  }

  void runOnOperation() override {
    if (stages < 1 || chunks < 1) {
      getOperation().emitError("mt-pipeline-assign: stages and chunks must be positive");
      return signalPassFailure();
    }
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(assign(fn)))
        return signalPassFailure();
  }
};

/// One function of the partition: virtual stage `stage`, forward or backward.
struct Piece {
  func::FuncOp fn;
  IRMapping values;
  Value received; // the activation (forward) or gradient (backward) from a neighbour
  Operation *lastParam = nullptr;
};

struct MtPipelinePartition : impl::MtPipelinePartitionBase<MtPipelinePartition> {
  LogicalResult partition(func::FuncOp step) {
    Block &body = step.getBody().front();
    auto terminator = cast<func::ReturnOp>(body.getTerminator());
    DenseMap<Operation *, int64_t> position;
    const int64_t backwardStart = numberOps(body, position);
    if (backwardStart < 0)
      return step.emitError("mt-pipeline-partition: no backward pass (run mt-autodiff first)");

    // Where each op runs: (virtual stage, backward?).
    DenseMap<Operation *, std::pair<int64_t, bool>> home;
    int64_t stages = 0;
    for (Operation &op : body.without_terminator()) {
      if (isa<ParamOp>(op))
        continue;
      auto stage = op.getAttrOfType<IntegerAttr>(kStageAttr);
      if (!stage)
        return op.emitOpError("mt-pipeline-partition: op has no pipeline stage (mt.stage)");
      home[&op] = {stage.getInt(), position[&op] >= backwardStart};
      stages = std::max(stages, stage.getInt() + 1);
    }
    auto homeOf = [&](Value v) -> std::optional<std::pair<int64_t, bool>> {
      Operation *def = v.getDefiningOp();
      if (!def || isa<ParamOp>(def))
        return std::nullopt; // tokens, targets and parameters are everywhere
      return home.lookup(def);
    };

    // What crosses: the activation into forward v (sent by v − 1), the gradient into
    // backward v (sent by v + 1), and the stash from forward v to backward v — which
    // includes the activation forward v received.
    std::vector<Value> activation(stages), gradient(stages);
    std::vector<llvm::SetVector<Value>> stash(stages);
    for (Operation &op : body.without_terminator()) {
      if (isa<ParamOp>(op))
        continue;
      auto [stage, backward] = home[&op];
      for (Value v : op.getOperands()) {
        auto from = homeOf(v);
        if (!from || *from == std::make_pair(stage, backward))
          continue;
        auto [fromStage, fromBackward] = *from;
        Value *slot = nullptr;
        if (!backward && !fromBackward && fromStage == stage - 1)
          slot = &activation[stage];
        else if (backward && fromBackward && fromStage == stage + 1)
          slot = &gradient[stage];
        else if (backward && !fromBackward && fromStage == stage)
          stash[stage].insert(v);
        else if (backward && !fromBackward && fromStage == stage - 1 &&
                 v == activation[stage])
          stash[stage].insert(v);
        else
          return op.emitOpError("mt-pipeline-partition: reads a value of ")
                 << (fromBackward ? "backward" : "forward") << " stage " << fromStage
                 << " in " << (backward ? "backward" : "forward") << " stage " << stage;
        if (slot && *slot && *slot != v)
          return op.emitOpError("mt-pipeline-partition: more than one tensor crosses into ")
                 << (backward ? "backward" : "forward") << " stage " << stage;
        if (slot)
          *slot = v;
      }
    }
    Value loss = terminator.getOperand(0);

    // The functions, their arguments first.
    OpBuilder builder(step);
    auto tokens = body.getArgument(0), targets = body.getArgument(1);
    std::vector<Piece> pieces(2 * stages);
    auto pieceOf = [&](int64_t stage, bool backward) -> Piece & {
      return pieces[2 * stage + backward];
    };
    for (int64_t stage = 0; stage < stages; ++stage)
      for (bool backward : {false, true}) {
        SmallVector<Type> args{tokens.getType(), targets.getType()};
        Value in = backward ? gradient[stage] : activation[stage];
        if (in)
          args.push_back(in.getType());
        if (backward)
          for (Value v : stash[stage])
            args.push_back(v.getType());
        std::string name = (backward ? "backward_" : "forward_") + std::to_string(stage);
        auto fn = func::FuncOp::create(builder, step.getLoc(), name,
                                       builder.getFunctionType(args, {}));
        Block *entry = fn.addEntryBlock();
        Piece &piece = pieceOf(stage, backward);
        piece.fn = fn;
        piece.values.map(tokens, entry->getArgument(0));
        piece.values.map(targets, entry->getArgument(1));
        unsigned next = 2;
        if (in) {
          piece.received = entry->getArgument(next++);
          piece.values.map(in, piece.received);
        }
        if (backward)
          for (Value v : stash[stage])
            piece.values.map(v, entry->getArgument(next++));
      }

    // The ops, in program order, each into its piece; parameters copied where used.
    for (Operation &op : body.without_terminator()) {
      if (isa<ParamOp>(op))
        continue;
      auto [stage, backward] = home[&op];
      Piece &piece = pieceOf(stage, backward);
      Block &entry = piece.fn.getBody().front();
      for (Value v : op.getOperands())
        if (auto param = v.getDefiningOp<ParamOp>(); param && !piece.values.contains(v)) {
          // Parameters lead the function, in order of first use.
          OpBuilder atParams(&entry, piece.lastParam ? std::next(piece.lastParam->getIterator())
                                                     : entry.begin());
          piece.lastParam = atParams.clone(*param);
          piece.values.map(v, piece.lastParam->getResult(0));
        }
      OpBuilder atEnd(&entry, entry.end());
      atEnd.clone(op, piece.values);
    }

    // The results: what goes to the neighbour (or the loss), then the stash.
    for (int64_t stage = 0; stage < stages; ++stage)
      for (bool backward : {false, true}) {
        Piece &piece = pieceOf(stage, backward);
        SmallVector<Value> results;
        if (!backward) {
          Value out = stage + 1 < stages ? activation[stage + 1] : loss;
          if (out)
            results.push_back(piece.values.lookup(out));
          for (Value v : stash[stage])
            results.push_back(piece.values.lookup(v));
        } else if (stage > 0 && gradient[stage - 1]) {
          results.push_back(piece.values.lookup(gradient[stage - 1]));
        }
        Block &entry = piece.fn.getBody().front();
        OpBuilder atEnd(&entry, entry.end());
        func::ReturnOp::create(atEnd, step.getLoc(), results);
        piece.fn.setFunctionType(FunctionType::get(
            step.getContext(), entry.getArgumentTypes(), ValueRange(results).getTypes()));
      }
    // What the step recorded of itself (recomputation's cost) stays with the module.
    for (NamedAttribute attr : step->getAttrs())
      if (attr.getName().strref().starts_with("mt.recompute"))
        step->getParentOp()->setAttr(attr.getName(), attr.getValue());
    step.erase();
    return success();
  }

  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      getOperation().emitError("mt-pipeline-partition: no @train_step (run mt-autodiff first)");
      return signalPassFailure();
    }
    if (step.getNumArguments() != 2) {
      step.emitError("mt-pipeline-partition: @train_step must take (tokens, targets)");
      return signalPassFailure();
    }
    if (failed(partition(step)))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
