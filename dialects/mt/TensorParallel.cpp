// Tensor-parallel rules of the mt ops (TensorParallelOpInterface) and the rewriter they
// use. Megatron's GPT layout follows from them: a linear feeding attention, GELU, SiLU
// or the loss (an Mt_ColumnParallelConsumer) is column-parallel, the next linear
// row-parallel; the embedding and the loss are vocabulary-parallel; LayerNorm, dropout
// and residual adds stay in the stream, which sequence parallelism splits along the
// sequence.
#include "dialects/mt/TensorParallel.h"
#include "dialects/mt/Collectives.h"
#include "dialects/mt/MtDialect.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::mt;

//===----------------------------------------------------------------------===//
// The rewriter
//===----------------------------------------------------------------------===//

LogicalResult TensorParallelRewriter::setResultLayout(Operation *op, TpLayout layout) {
  for (Value r : op->getResults())
    layouts_[r] = layout;
  return reinferOp(op);
}

LogicalResult TensorParallelRewriter::shardParam(Value v, int64_t dim, Operation *user) {
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
  if (size % tp_ != 0) {
    InFlightDiagnostic diag = user->emitOpError("mt-tensor-parallel: dimension ")
                              << dim << " of parameter '" << param.getName() << "' (" << size
                              << ") is not divisible by tp " << tp_;
    if (isa<EmbeddingOp>(user) || dim == 0)
      diag << "; pad the vocabulary (mt-pad-vocab)";
    return diag;
  }
  SmallVector<int64_t> local(type.getShape());
  local[dim] = size / tp_;
  param.setGlobalShape(type.getShape());
  param.setShardDim(dim);
  param.getResult().setType(RankedTensorType::get(local, type.getElementType()));
  return success();
}

void TensorParallelRewriter::markGradReduce(Value v) {
  if (sp_)
    markPartialGrad(v);
}

void TensorParallelRewriter::markPartialGrad(Value v) {
  if (auto param = v.getDefiningOp<ParamOp>())
    param.setTpGradReduce(true);
}

Value TensorParallelRewriter::allGather(OpBuilder &b, Location loc, Value x, int64_t dim) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] *= tp_;
  return createTpAllGather(b, loc, x, RankedTensorType::get(shape, type.getElementType()),
                           grid_, kTpAxis, dim);
}

Value TensorParallelRewriter::enterRegion(OpBuilder &b, Location loc, Value x) {
  // Once per value: linears that read one input (LLaMA's gate and up projections) share
  // one copy or gather, and so backward one all-reduce or reduce-scatter, as Megatron's
  // fused projection does.
  if (Value done = entered_.lookup(x))
    return done;
  Value entered = layoutOf(x) == TpLayout::Sequence
                      ? allGather(b, loc, x, 1)
                      : TpCopyOp::create(b, loc, x, grid_, b.getI64IntegerAttr(kTpAxis));
  entered_[x] = entered;
  return entered;
}

Value TensorParallelRewriter::leaveRegion(OpBuilder &b, Location loc, Value partial) {
  Value out;
  if (sp_) {
    auto type = cast<RankedTensorType>(partial.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[1] /= tp_;
    out = createTpReduceScatter(b, loc, partial,
                                RankedTensorType::get(shape, type.getElementType()), grid_,
                                kTpAxis, 1);
  } else {
    out = createTpAllReduce(b, loc, partial, grid_, kTpAxis);
  }
  layouts_[out] = stream();
  return out;
}

LogicalResult TensorParallelRewriter::partitionPointwise(Operation *op) {
  std::optional<TpLayout> layout;
  for (Value operand : op->getOperands()) {
    if (!isa<RankedTensorType>(operand.getType()))
      continue;
    if (layout && *layout != layoutOf(operand))
      return op->emitOpError("mt-tensor-parallel: the ")
             << (op->getNumOperands() == 2 ? "two " : "")
             << "operands are laid out differently across the tensor-parallel group";
    layout = layoutOf(operand);
  }
  return setResultLayout(op, layout.value_or(TpLayout::Replicated));
}

LogicalResult TensorParallelRewriter::partitionContextCollective(Operation *op) {
  if (auto reduce = dyn_cast<shard::AllReduceOp>(op)) {
    if (reduce.getGridAxes().size() != 1 || reduce.getGridAxes()[0] != kCpAxis)
      return reduce.emitOpError("mt-tensor-parallel: only mt-context-parallel's all-reduce "
                                "(over the context-parallel axis) may precede it");
    layouts_[reduce.getResult()] = layoutOf(reduce.getInput());
    return success();
  }
  auto gather = cast<shard::AllGatherOp>(op);
  if (gather.getGridAxes().size() != 1 || gather.getGridAxes()[0] != kCpAxis ||
      gather.getGatherAxis().getSExtValue() != 0)
    return gather.emitOpError("mt-tensor-parallel: only mt-context-parallel's gather (along "
                              "dimension 0, over the context-parallel axis) may precede it");
  auto in = cast<RankedTensorType>(gather.getInput().getType());
  auto out = cast<RankedTensorType>(gather.getResult().getType());
  SmallVector<int64_t> shape(in.getShape());
  shape[0] = out.getDimSize(0);
  gather.getResult().setType(RankedTensorType::get(shape, in.getElementType()));
  layouts_[gather.getResult()] = layoutOf(gather.getInput());
  return success();
}

LogicalResult TensorParallelRewriter::partitionPerToken(Operation *op) {
  TpLayout tokens = layoutOf(op->getOperand(0));
  for (Value operand : op->getOperands()) {
    if (operand.getDefiningOp<ParamOp>())
      markGradReduce(operand); // under SP each rank's tokens give part of its gradient
    else if (layoutOf(operand) == TpLayout::Split)
      return op->emitOpError("mt-tensor-parallel: a mixture of experts over a tensor split "
                             "along its features");
  }
  return setResultLayout(op, tokens);
}

//===----------------------------------------------------------------------===//
// The rules
//===----------------------------------------------------------------------===//

/// Whether `v` reaches an Mt_ColumnParallelConsumer: directly, or through
/// mt-context-parallel's gather and order in front of attention.
static bool feedsColumnConsumer(Value v) {
  return llvm::any_of(v.getUsers(), [](Operation *user) {
    if (user->hasTrait<ColumnParallelConsumer>())
      return true;
    return isa<shard::AllGatherOp, ContextOrderOp>(user) && feedsColumnConsumer(user->getResult(0));
  });
}

/// Ops a layer's partitioning inserts belong to that layer (mt.layer).
static void tagLike(Operation *original, Value inserted) {
  if (auto layer = original->getAttr(kLayerAttr))
    if (Operation *def = inserted.getDefiningOp())
      def->setAttr(kLayerAttr, layer);
}

LogicalResult LinearOp::partition(TensorParallelRewriter &tp) {
  OpBuilder b(*this);
  Value x = getInput();
  if (tp.layoutOf(x) == TpLayout::Split) {
    // RowParallelLinear: each rank multiplies its block of features by its block of
    // W's columns; the partial sums are reduced, then the bias is added once.
    if (failed(tp.shardParam(getWeight(), 1, *this)))
      return failure();
    Value partial = LinearOp::create(b, getLoc(), x, getWeight(), Value());
    tagLike(*this, partial);
    Value out = tp.leaveRegion(b, getLoc(), partial);
    tagLike(*this, out);
    if (Value bias = getBias()) {
      tp.markGradReduce(bias);
      out = BiasAddOp::create(b, getLoc(), out, bias);
      tagLike(*this, out);
      tp.setLayout(out, tp.stream());
    }
    replaceAllUsesWith(out);
    erase();
    return success();
  }
  if (!feedsColumnConsumer(getResult())) {
    // A replicated linear: every rank applies all of W to its rows (under SP, its block
    // of the sequence, so its gradients are partial).
    tp.markGradReduce(getWeight());
    if (getBias())
      tp.markGradReduce(getBias());
    return tp.setResultLayout(*this, tp.layoutOf(x));
  }
  // ColumnParallelLinear: W's rows (output features) and the bias split.
  if (failed(tp.shardParam(getWeight(), 0, *this)) ||
      (getBias() && failed(tp.shardParam(getBias(), 0, *this))))
    return failure();
  Value entered = tp.enterRegion(b, getLoc(), x);
  tagLike(*this, entered);
  getInputMutable().assign(entered);
  return tp.setResultLayout(*this, TpLayout::Split);
}

// VocabParallelEmbedding: each rank holds a block of the rows; the group sums the
// lookups, in which ids outside a rank's block give zeros.
LogicalResult EmbeddingOp::partition(TensorParallelRewriter &tp) {
  if (failed(tp.shardParam(getTable(), 0, *this)))
    return failure();
  setVocabParallel(true);
  if (failed(reinferOp(*this)))
    return failure();
  OpBuilder b(getContext());
  b.setInsertionPointAfter(*this);
  Value out = tp.leaveRegion(b, getLoc(), getResult());
  getResult().replaceAllUsesExcept(out, out.getDefiningOp());
  return success();
}

// Vocabulary-parallel cross-entropy: each rank's statistics of its shard of the logits
// are gathered, so the full logits never exist on one rank.
LogicalResult CrossEntropyOp::partition(TensorParallelRewriter &tp) {
  if (tp.layoutOf(getLogits()) != TpLayout::Split)
    return tp.setResultLayout(*this, TpLayout::Replicated); // the serial loss on every rank
  OpBuilder b(*this);
  auto logits = cast<RankedTensorType>(getLogits().getType());
  IntegerAttr classes = getNumClassesAttr();
  if (!classes)
    classes = b.getI64IntegerAttr(logits.getShape().back() * tp.size());
  Value stats = CrossEntropyStatsOp::create(b, getLoc(), getLogits(), getTargets(), classes);
  Value all = tp.allGather(b, getLoc(), stats, 0);
  Value loss = CrossEntropyMergeOp::create(b, getLoc(), all, getLogits(), getTargets(), classes);
  replaceAllUsesWith(loss);
  erase();
  return success();
}

/// Whole key/value groups per rank: the column-parallel linear before an op over a fused
/// QKV split its last dimension, laid out by group, into tp blocks.
template <typename Op> static LogicalResult splitGroups(Op op, TensorParallelRewriter &tp) {
  if (tp.layoutOf(op.getQkv()) != TpLayout::Split)
    return op.emitOpError("mt-tensor-parallel: qkv must come from a column-parallel linear");
  const int64_t kv = op.getKeyValueHeads();
  if (kv % tp.size() != 0) {
    const bool grouped = kv != static_cast<int64_t>(op.getHeads());
    return op.emitOpError("mt-tensor-parallel: ")
           << kv << (grouped ? " key/value" : " attention") << " heads are not divisible by tp "
           << tp.size() << " (tensor parallelism splits whole "
           << (grouped ? "groups of query heads" : "heads") << "; use a tp that divides " << kv
           << ")";
  }
  op.setHeads(op.getHeads() / tp.size());
  if (op.getKvHeads())
    op.setKvHeads(kv / tp.size());
  return tp.setResultLayout(op, TpLayout::Split);
}

LogicalResult AttentionOp::partition(TensorParallelRewriter &tp) {
  setHeadParallel(true);
  return splitGroups(*this, tp);
}

LogicalResult RotaryOp::partition(TensorParallelRewriter &tp) { return splitGroups(*this, tp); }

// Whole groups per rank; each rank's weight gradients are sums over its own heads, so
// the weights must be parameters no other op reads (whose gradient would be whole).
LogicalResult QkNormOp::partition(TensorParallelRewriter &tp) {
  for (Value weight : {getQueryWeight(), getKeyWeight()}) {
    if (!weight.getDefiningOp<ParamOp>() ||
        !llvm::all_of(weight.getUsers(), [](Operation *user) { return isa<QkNormOp>(user); }))
      return emitOpError("mt-tensor-parallel: qk_norm's weights must be parameters only "
                         "qk_norm reads (each rank sums its own heads' part of their gradient)");
    tp.markPartialGrad(weight);
  }
  return splitGroups(*this, tp);
}

// In the stream: under SP, this rank's block of the sequence takes its positions.
LogicalResult PositionEmbeddingOp::partition(TensorParallelRewriter &tp) {
  if (tp.layoutOf(getInput()) == TpLayout::Sequence) {
    setSequenceParallel(true);
    tp.markGradReduce(getTable());
  }
  return tp.setResultLayout(*this, tp.layoutOf(getInput()));
}

// In the stream, over whole rows: never of a split hidden dimension.
LogicalResult LayerNormOp::partition(TensorParallelRewriter &tp) {
  if (tp.layoutOf(getInput()) == TpLayout::Split)
    return emitOpError("mt-tensor-parallel: layer_norm of a split tensor");
  tp.markGradReduce(getWeight());
  tp.markGradReduce(getBias());
  return tp.setResultLayout(*this, tp.layoutOf(getInput()));
}

// As layer_norm.
LogicalResult RmsNormOp::partition(TensorParallelRewriter &tp) {
  if (tp.layoutOf(getInput()) == TpLayout::Split)
    return emitOpError("mt-tensor-parallel: rms_norm of a split tensor");
  tp.markGradReduce(getWeight());
  return tp.setResultLayout(*this, tp.layoutOf(getInput()));
}

// Pointwise, but the mask is drawn at global indices: the op says which block it holds.
LogicalResult DropoutOp::partition(TensorParallelRewriter &tp) {
  TpLayout layout = tp.layoutOf(getInput());
  if (layout == TpLayout::Sequence)
    setSequenceParallel(true);
  if (layout == TpLayout::Split) {
    if (getContextParallel())
      return emitOpError("mt-tensor-parallel: dropout of a tensor split along both its "
                         "sequence (context parallelism) and its features (tensor "
                         "parallelism)");
    setFeatureParallel(true);
  }
  return tp.setResultLayout(*this, layout);
}

// A mixture of experts is per token (as Megatron-Core's with expert tensor parallelism
// 1; the ops after the router are Mt_PerToken): the router's linear is replicated (it
// feeds no column-parallel consumer), and under SP each rank routes, and computes the
// experts of, its block of the sequence.
LogicalResult MoeRouterOp::partition(TensorParallelRewriter &tp) {
  if (failed(tp.partitionPerToken(*this)))
    return failure();
  // Each rank routes its block of the sequence: the loss counts the whole sequence's.
  if (tp.layoutOf(getLogits()) != TpLayout::Sequence)
    return success();
  return shareRouterLoad(*this, tp.grid(), kTpAxis);
}

// The shares of a context-parallel group put in order: whole rows, in any layout of their
// features, but never split along the sequence it orders.
LogicalResult ContextOrderOp::partition(TensorParallelRewriter &tp) {
  if (tp.layoutOf(getInput()) == TpLayout::Sequence)
    return emitOpError("mt-tensor-parallel: context_order of a sequence-parallel tensor");
  return tp.setResultLayout(*this, tp.layoutOf(getInput()));
}
