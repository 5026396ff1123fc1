// mt-tensor-parallel: Megatron's tensor- and sequence-parallel layout.
//
// Upstream's sharding propagation and shard-partition are not used for this step: the
// layout is Megatron's fixed recipe rather than a propagated choice, the fused
// head-major attention and the vocabulary-parallel cross-entropy (statistics gathered,
// logits never whole) have no equivalent upstream, and shard-partition reshards only
// 1-D grids. The collectives it inserts are upstream's shard dialect ops on the
// tensor-parallel axis of one `shard.grid`, so later passes and the plan see standard
// IR.
#include "dialects/mt/Collectives.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTTENSORPARALLEL
#include "passes/Passes.h.inc"

namespace {

/// How a value is laid out across the tensor-parallel group.
enum class Layout {
  Replicated, // every rank holds all of it
  Sequence,   // each rank holds its block of dimension 1 (sequence parallelism)
  Split,      // each rank holds its block of the last dimension (features, heads, vocab)
};

constexpr int64_t kTpAxis = 1; // the grid is dp x tp

class Partitioner {
public:
  Partitioner(int64_t tp, bool sequenceParallel, FlatSymbolRefAttr grid)
      : tp(tp), sp(sequenceParallel), grid(grid) {}

  LogicalResult run(FunctionOpInterface fn);

private:
  Layout layoutOf(Value v) const { return layouts.lookup(v); }
  /// The layout of the residual stream between parallel regions.
  Layout stream() const { return sp ? Layout::Sequence : Layout::Replicated; }

  LogicalResult shardParam(Value v, int64_t dim, Operation *user);
  void markGradReduce(Value v);
  Value enterRegion(OpBuilder &b, Location loc, Value x);
  Value leaveRegion(OpBuilder &b, Location loc, Value partial);
  LogicalResult partitionLinear(LinearOp op);
  LogicalResult partitionEmbedding(EmbeddingOp op);
  LogicalResult partitionCrossEntropy(CrossEntropyOp op);
  LogicalResult visit(Operation *op);

  int64_t tp;
  bool sp;
  FlatSymbolRefAttr grid;
  DenseMap<Value, Layout> layouts;
};

/// Keeps block `rank` of `v` (an mt.param) along `dim` on each rank.
LogicalResult Partitioner::shardParam(Value v, int64_t dim, Operation *user) {
  auto param = v.getDefiningOp<ParamOp>();
  if (!param)
    return user->emitOpError("mt-tensor-parallel: operand to split along dimension ")
           << dim << " must be an mt.param";
  if (auto existing = param.getShardDim()) {
    if (static_cast<int64_t>(*existing) != dim)
      return user->emitOpError("mt-tensor-parallel: parameter '")
             << param.getName() << "' is split along dimension " << *existing
             << " by another use, and along " << dim << " by this one";
    return success();
  }
  auto type = cast<RankedTensorType>(param.getType());
  int64_t size = type.getDimSize(dim);
  if (size % tp != 0) {
    InFlightDiagnostic diag = user->emitOpError("mt-tensor-parallel: dimension ")
                              << dim << " of parameter '" << param.getName() << "' (" << size
                              << ") is not divisible by tp " << tp;
    if (isa<EmbeddingOp>(user) || dim == 0)
      diag << "; pad the vocabulary with --make-vocab-size-divisible-by";
    return diag;
  }
  SmallVector<int64_t> local(type.getShape());
  local[dim] = size / tp;
  param.setGlobalShape(type.getShape());
  param.setShardDim(dim);
  param.getResult().setType(RankedTensorType::get(local, type.getElementType()));
  return success();
}

/// A replicated parameter used where each rank sees only part of the sequence gets
/// only part of its gradient.
void Partitioner::markGradReduce(Value v) {
  if (auto param = v.getDefiningOp<ParamOp>(); param && sp)
    param.setTpGradReduce(true);
}

/// Ops a layer's partitioning inserts belong to that layer (mt.layer).
void tagLike(Operation *original, Value inserted) {
  if (auto layer = original->getAttr(kLayerAttr))
    if (Operation *def = inserted.getDefiningOp())
      def->setAttr(kLayerAttr, layer);
}

/// Megatron's f: every rank needs the whole input (all-gathered under SP).
Value Partitioner::enterRegion(OpBuilder &b, Location loc, Value x) {
  if (layoutOf(x) == Layout::Sequence) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[1] *= tp;
    return createTpAllGather(b, loc, x, RankedTensorType::get(shape, type.getElementType()),
                             grid, kTpAxis, 1);
  }
  return TpCopyOp::create(b, loc, x, grid, b.getI64IntegerAttr(kTpAxis));
}

/// Megatron's g: partial sums become the stream (reduce-scattered under SP).
Value Partitioner::leaveRegion(OpBuilder &b, Location loc, Value partial) {
  Value out;
  if (sp) {
    auto type = cast<RankedTensorType>(partial.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[1] /= tp;
    out = createTpReduceScatter(b, loc, partial,
                                RankedTensorType::get(shape, type.getElementType()), grid,
                                kTpAxis, 1);
  } else {
    out = createTpAllReduce(b, loc, partial, grid, kTpAxis);
  }
  layouts[out] = stream();
  return out;
}

LogicalResult Partitioner::partitionLinear(LinearOp op) {
  OpBuilder b(op);
  Value x = op.getInput();
  if (layoutOf(x) == Layout::Split) {
    // Row-parallel: each rank multiplies its block of features by its block of W's
    // columns; the partial sums are reduced, then the bias is added once.
    if (failed(shardParam(op.getWeight(), 1, op)))
      return failure();
    Value partial = LinearOp::create(b, op.getLoc(), x, op.getWeight(), Value());
    tagLike(op, partial);
    Value out = leaveRegion(b, op.getLoc(), partial);
    tagLike(op, out);
    if (Value bias = op.getBias()) {
      markGradReduce(bias);
      out = BiasAddOp::create(b, op.getLoc(), out, bias);
      tagLike(op, out);
      layouts[out] = stream();
    }
    op.replaceAllUsesWith(out);
    op.erase();
    return success();
  }
  // Column-parallel when the result enters attention or GELU, or is the logits.
  bool column = llvm::any_of(op->getUsers(), [](Operation *user) {
    return isa<AttentionOp, GeluOp, CrossEntropyOp>(user);
  });
  if (!column) {
    // A replicated linear: every rank applies all of W to its rows (under SP, its block
    // of the sequence, so its gradients are partial).
    markGradReduce(op.getWeight());
    if (op.getBias())
      markGradReduce(op.getBias());
    layouts[op.getResult()] = layoutOf(x);
    return reinferOp(op);
  }
  if (failed(shardParam(op.getWeight(), 0, op)) ||
      (op.getBias() && failed(shardParam(op.getBias(), 0, op))))
    return failure();
  Value entered = enterRegion(b, op.getLoc(), x);
  tagLike(op, entered);
  op.getInputMutable().assign(entered);
  layouts[op.getResult()] = Layout::Split;
  return reinferOp(op);
}

LogicalResult Partitioner::partitionEmbedding(EmbeddingOp op) {
  if (failed(shardParam(op.getTable(), 0, op)))
    return failure();
  op.setVocabParallel(true);
  if (failed(reinferOp(op)))
    return failure();
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(op);
  Value out = leaveRegion(b, op.getLoc(), op.getResult());
  op.getResult().replaceAllUsesExcept(out, out.getDefiningOp());
  return success();
}

LogicalResult Partitioner::partitionCrossEntropy(CrossEntropyOp op) {
  if (layoutOf(op.getLogits()) != Layout::Split)
    return success(); // replicated logits: the serial loss on every rank
  OpBuilder b(op);
  auto logits = cast<RankedTensorType>(op.getLogits().getType());
  IntegerAttr classes = op.getNumClassesAttr();
  if (!classes)
    classes = b.getI64IntegerAttr(logits.getShape().back() * tp);
  Value stats = CrossEntropyStatsOp::create(b, op.getLoc(), op.getLogits(), op.getTargets(),
                                            classes);
  auto statsType = cast<RankedTensorType>(stats.getType());
  Value all = createTpAllGather(
      b, op.getLoc(), stats,
      RankedTensorType::get({3 * tp, statsType.getDimSize(1)}, statsType.getElementType()),
      grid, kTpAxis, 0);
  Value loss = CrossEntropyMergeOp::create(b, op.getLoc(), all, op.getLogits(),
                                           op.getTargets(), classes);
  op.replaceAllUsesWith(loss);
  op.erase();
  return success();
}

LogicalResult Partitioner::visit(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp) { return success(); })
      .Case([&](EmbeddingOp e) { return partitionEmbedding(e); })
      .Case([&](LinearOp l) { return partitionLinear(l); })
      .Case([&](CrossEntropyOp c) { return partitionCrossEntropy(c); })
      .Case([&](AttentionOp a) -> LogicalResult {
        if (layoutOf(a.getQkv()) != Layout::Split)
          return a.emitOpError("mt-tensor-parallel: qkv must come from a column-parallel "
                               "linear");
        if (a.getHeads() % tp != 0)
          return a.emitOpError("mt-tensor-parallel: ")
                 << a.getHeads() << " attention heads are not divisible by tp " << tp;
        a.setHeads(a.getHeads() / tp);
        a.setHeadParallel(true);
        layouts[a.getResult()] = Layout::Split;
        return reinferOp(a);
      })
      .Case([&](PositionEmbeddingOp p) -> LogicalResult {
        if (layoutOf(p.getInput()) == Layout::Sequence) {
          p.setSequenceParallel(true);
          markGradReduce(p.getTable());
        }
        layouts[p.getResult()] = layoutOf(p.getInput());
        return reinferOp(p);
      })
      .Case([&](LayerNormOp n) -> LogicalResult {
        if (layoutOf(n.getInput()) == Layout::Split)
          return n.emitOpError("mt-tensor-parallel: layer_norm of a split tensor");
        markGradReduce(n.getWeight());
        markGradReduce(n.getBias());
        layouts[n.getResult()] = layoutOf(n.getInput());
        return reinferOp(n);
      })
      .Case([&](DropoutOp d) -> LogicalResult {
        if (layoutOf(d.getInput()) == Layout::Sequence)
          d.setSequenceParallel(true);
        if (layoutOf(d.getInput()) == Layout::Split)
          d.setFeatureParallel(true);
        layouts[d.getResult()] = layoutOf(d.getInput());
        return reinferOp(d);
      })
      .Case([&](GeluOp g) -> LogicalResult {
        layouts[g.getResult()] = layoutOf(g.getInput());
        return reinferOp(g);
      })
      .Case([&](AddOp a) -> LogicalResult {
        if (layoutOf(a.getLhs()) != layoutOf(a.getRhs()))
          return a.emitOpError("mt-tensor-parallel: the two operands are laid out "
                               "differently across the tensor-parallel group");
        layouts[a.getResult()] = layoutOf(a.getLhs());
        return reinferOp(a);
      })
      .Case([&](func::ReturnOp r) -> LogicalResult {
        for (Value v : r.getOperands())
          if (layoutOf(v) != Layout::Replicated)
            return r.emitOpError("mt-tensor-parallel: returns a value that is split across "
                                 "the tensor-parallel group");
        return success();
      })
      .Default([](Operation *other) {
        return other->emitOpError("mt-tensor-parallel: no tensor-parallel layout for this op");
      });
}

LogicalResult Partitioner::run(FunctionOpInterface fn) {
  if (sp) {
    for (BlockArgument arg : fn.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (type && type.getRank() >= 2 && type.getDimSize(1) % tp != 0)
        return fn.emitError("mt-tensor-parallel: sequence length ")
               << type.getDimSize(1) << " is not divisible by tp " << tp
               << " (sequence parallelism splits it)";
    }
  }
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getFunctionBody().front())
    ops.push_back(&op);
  for (Operation *op : ops)
    if (failed(visit(op)))
      return failure();
  return success();
}

struct MtTensorParallel : impl::MtTensorParallelBase<MtTensorParallel> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1 || dp < 1) {
      module.emitError("mt-tensor-parallel: tp ") << tp << " and dp " << dp
                                                  << " must be positive";
      return signalPassFailure();
    }
    OpBuilder b(module.getBodyRegion());
    if (!module.lookupSymbol("grid"))
      shard::GridOp::create(b, module.getLoc(), "grid", ArrayRef<int64_t>{dp, tp});
    if (tp == 1)
      return;
    Partitioner partitioner(tp, sequenceParallel, FlatSymbolRefAttr::get(&getContext(), "grid"));
    for (auto fn : module.getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(partitioner.run(fn)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
