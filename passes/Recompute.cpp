// mt-recompute: selective and full activation recomputation.
#include "passes/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/IRMapping.h"

#include <map>

namespace mlir::mt {
#define GEN_PASS_DEF_MTRECOMPUTE
#include "passes/Passes.h.inc"

namespace {

/// What the copies cost per micro-batch.
struct CopyCost {
  int64_t gemm = 0, other = 0;
};

struct MtRecompute : impl::MtRecomputeBase<MtRecompute> {
  using Base::Base;

  /// Copies `unit` (forward ops, in program order) in front of the first backward op
  /// that reads one of its results, and makes the backward read the copies. With
  /// `keepOutputs`, results that forward ops outside the unit read (the next layer's
  /// input) are kept rather than recomputed. Adds the FLOPs of the copies that remain
  /// in use to `cost`.
  void recompute(ArrayRef<Operation *> unit, const DenseMap<Operation *, int64_t> &position,
                 int64_t backwardStart, bool keepOutputs, CopyCost &cost) {
    DenseSet<Operation *> members(unit.begin(), unit.end());
    auto backward = [&](Operation *user) {
      auto it = position.find(user);
      return it == position.end() || it->second >= backwardStart;
    };
    DenseSet<Value> recomputed;
    for (Operation *op : unit)
      for (Value v : op->getResults()) {
        bool output = llvm::any_of(v.getUsers(), [&](Operation *user) {
          return !backward(user) && !members.contains(user);
        });
        if (!(keepOutputs && output))
          recomputed.insert(v);
      }
    Operation *first = nullptr;
    for (Value v : recomputed)
      for (Operation *user : v.getUsers())
        if (backward(user) && position.count(user) &&
            (!first || position.lookup(user) < position.lookup(first)))
          first = user;
    if (!first)
      return;
    OpBuilder b(first);
    IRMapping copies;
    SmallVector<Operation *> clones;
    for (Operation *op : unit)
      clones.push_back(b.clone(*op, copies));
    DenseSet<Operation *> copiesOf(clones.begin(), clones.end());
    for (Operation *op : unit)
      for (auto [original, copy] : llvm::zip_equal(op->getResults(),
                                                   copies.lookup(op)->getResults()))
        if (recomputed.contains(original))
          original.replaceUsesWithIf(copy, [&](OpOperand &use) {
            return backward(use.getOwner()) && !copiesOf.contains(use.getOwner());
          });
    // Copies nothing reads (results only the forward needed) are dropped. A dropout
    // copy that backward reads only for its mask is not worth its input's recomputation:
    // its gradients draw the mask again from the stream instead.
    for (Operation *clone : llvm::reverse(clones)) {
      if (auto d = dyn_cast<DropoutOp>(clone); d && d.getMask() && d.getResult().use_empty())
        for (OpOperand &use : llvm::make_early_inc_range(d.getMask().getUses()))
          if (auto grad = dyn_cast<DropoutGradOp>(use.getOwner())) {
            grad->eraseOperand(use.getOperandNumber());
            grad.setStreamAttr(d.getStreamAttr());
            grad.setSequenceParallel(d.getSequenceParallel());
            grad.setFeatureParallel(d.getFeatureParallel());
            grad.setContextParallelAttr(d.getContextParallelAttr());
          }
      if (clone->use_empty()) {
        clone->erase();
        continue;
      }
      clone->setAttr(kRecomputedAttr, UnitAttr::get(clone->getContext()));
      if (auto op = dyn_cast<CostOpInterface>(clone)) {
        cost.gemm += op.getGemmFlops();
        cost.other += op.getOtherFlops();
      }
    }
  }

  LogicalResult run(FunctionOpInterface fn) {
    Block &body = fn.getFunctionBody().front();
    DenseMap<Operation *, int64_t> position;
    const int64_t backwardStart = numberOps(body, position);
    if (backwardStart < 0)
      return fn.emitError("mt-recompute: no backward pass (run mt-autodiff first)");

    // The forward ops of each layer, by pipeline stage (mt.stage, when assigned) and
    // mt.layer ordinal (passes that insert ops into a layer, such as
    // mt-tensor-parallel, give them the layer's ordinal). Groups count layers within a
    // stage, as Megatron's do: a group never straddles two stages.
    std::map<std::pair<int64_t, int64_t>, SmallVector<Operation *>> byLayer;
    for (Operation &op : body) {
      if (position[&op] >= backwardStart)
        break;
      auto layer = op.getAttrOfType<IntegerAttr>(kLayerAttr);
      if (!layer || isa<ParamOp>(op))
        continue;
      auto stage = op.getAttrOfType<IntegerAttr>(kStageAttr);
      byLayer[{stage ? stage.getInt() : 0, layer.getInt()}].push_back(&op);
    }

    CopyCost cost;
    // Under sequence parallelism, backward needs the all-gathered (whole-sequence)
    // inputs of the column-parallel linears; gathering them again is cheaper in memory
    // than keeping them, as Megatron does (Korthikanti et al. 2022, §4.2.2).
    // (Full recomputation gathers again within each layer's copy anyway.)
    if (granularity != "full") {
      SmallVector<Operation *> gathers;
      for (Operation &op : body)
        if (auto gather = dyn_cast<shard::AllGatherOp>(op);
            gather && position[&op] < backwardStart && gather.getGatherAxis() == 1)
          gathers.push_back(&op);
      for (Operation *gather : gathers)
        recompute({gather}, position, backwardStart, /*keepOutputs=*/false, cost);
    }
    if (granularity == "selective") {
      // Core attention (Korthikanti et al. 2022): the probabilities, their dropout and
      // the product with V run again in backward; the attention's output, which the
      // projection after it keeps anyway, is kept.
      SmallVector<SmallVector<Operation *>> chains;
      for (Operation &op : body) {
        if (position[&op] >= backwardStart)
          break;
        if (isa<AttentionOp>(op))
          return op.emitOpError("mt-recompute: selective recomputation re-runs unfused "
                                "attention (run mt-unfuse-attention first)");
        auto context = dyn_cast<AttentionContextOp>(op);
        if (!context)
          continue;
        SmallVector<Operation *> chain;
        Value probs = context.getProbs();
        if (auto dropout = probs.getDefiningOp<DropoutOp>()) {
          chain.push_back(dropout);
          probs = dropout.getInput();
        }
        if (auto producer = probs.getDefiningOp<AttentionProbsOp>())
          chain.insert(chain.begin(), producer);
        chain.push_back(context);
        chains.push_back(chain);
      }
      for (ArrayRef<Operation *> chain : chains)
        recompute(chain, position, backwardStart, /*keepOutputs=*/true, cost);
    } else if (granularity == "full") {
      if (byLayer.empty())
        return fn.emitError("mt-recompute: full recomputation needs layers (mt.repeat "
                            "blocks unrolled by mt-expand)");
      if (layers > static_cast<int64_t>(byLayer.size()))
        return fn.emitError("mt-recompute: ")
               << static_cast<int64_t>(layers) << " layers asked for, the model has "
               << byLayer.size();
      SmallVector<Operation *> group;
      int64_t inGroup = 0, index = 0, current = -1;
      for (auto &[key, ops] : byLayer) {
        if (key.first != current) {
          if (!group.empty())
            recompute(group, position, backwardStart, /*keepOutputs=*/true, cost);
          group.clear();
          inGroup = index = 0;
          current = key.first;
        }
        if (method == "block" && index++ >= layers)
          continue;
        group.append(ops.begin(), ops.end());
        if (method == "block" || ++inGroup == layers) {
          recompute(group, position, backwardStart, /*keepOutputs=*/true, cost);
          group.clear();
          inGroup = 0;
        }
      }
      if (!group.empty())
        recompute(group, position, backwardStart, /*keepOutputs=*/true, cost);
    }
    Builder b(fn->getContext());
    fn->setAttr(kRecomputeFlopsAttr, b.getI64IntegerAttr(cost.gemm));
    fn->setAttr(kRecomputeOtherFlopsAttr, b.getI64IntegerAttr(cost.other));
    return success();
  }

  void runOnOperation() override {
    if (granularity != "none" && granularity != "selective" && granularity != "full") {
      getOperation().emitError("mt-recompute: granularity '")
          << granularity << "' is not none, selective or full";
      return signalPassFailure();
    }
    if (method != "uniform" && method != "block") {
      getOperation().emitError("mt-recompute: method '") << method
                                                         << "' is not uniform or block";
      return signalPassFailure();
    }
    if (layers < 1) {
      getOperation().emitError("mt-recompute: layers ")
          << static_cast<int64_t>(layers) << " must be positive";
      return signalPassFailure();
    }
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(run(fn)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
