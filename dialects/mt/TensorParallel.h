// Tensor parallelism as the ops state it (TensorParallelOpInterface): the layouts values
// take across the tensor-parallel group, and the rewrites an op's rule may use —
// Megatron's column- and row-parallel building blocks (Shoeybi et al. 2019) and, with
// sequence parallelism, their all-gather / reduce-scatter forms (Korthikanti et al.
// 2022). mt-tensor-parallel walks a function and asks each op's rule; an op without one
// is pointwise if it is Mt_Pointwise, and refused otherwise.
#ifndef MT_DIALECTS_MT_TENSORPARALLEL_H
#define MT_DIALECTS_MT_TENSORPARALLEL_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::mt {

/// How a value is laid out across the tensor-parallel group.
enum class TpLayout {
  Replicated, // every rank holds all of it
  Sequence,   // each rank holds its block of dimension 1 (sequence parallelism)
  Split,      // each rank holds its block of the last dimension (features, heads, vocab)
};

class TensorParallelRewriter {
public:
  TensorParallelRewriter(int64_t tp, bool sequenceParallel, FlatSymbolRefAttr grid)
      : tp_(tp), sp_(sequenceParallel), grid_(grid) {}

  int64_t size() const { return tp_; }
  bool sequenceParallel() const { return sp_; }
  FlatSymbolRefAttr grid() const { return grid_; }
  TpLayout layoutOf(Value v) const { return layouts_.lookup(v); }
  /// The layout of the residual stream between parallel regions.
  TpLayout stream() const { return sp_ ? TpLayout::Sequence : TpLayout::Replicated; }

  /// Gives every result of `op` `layout`, then infers its types again (a rule that
  /// changed operands or attributes ends with this).
  LogicalResult setResultLayout(Operation *op, TpLayout layout);
  void setLayout(Value v, TpLayout layout) { layouts_[v] = layout; }

  /// Keeps block `rank` of `v`, which must be an mt.param, along `dim` on each rank.
  LogicalResult shardParam(Value v, int64_t dim, Operation *user);
  /// Marks `v`, if it is a parameter and sequence parallelism is on, as a replicated
  /// parameter whose gradient each rank computes only in part.
  void markGradReduce(Value v);
  /// Marks `v`, if it is a parameter, so whatever the layout (a weight of every head,
  /// which each rank computes over its own heads).
  void markPartialGrad(Value v);

  /// Megatron's f: every rank needs the whole input (all-gathered under SP); once per
  /// value, placed where it is first needed.
  Value enterRegion(OpBuilder &b, Location loc, Value x);
  /// Megatron's g: partial sums become the stream (reduce-scattered under SP).
  Value leaveRegion(OpBuilder &b, Location loc, Value partial);
  /// The group's blocks of `x`, concatenated along `dim`.
  Value allGather(OpBuilder &b, Location loc, Value x, int64_t dim);

  /// The default for an Mt_Pointwise op: its tensor operands share one layout, and so
  /// do its results.
  LogicalResult partitionPointwise(Operation *op);
  /// mt-context-parallel's collectives over the cp axis: the gather of the group's
  /// shares (along dimension 0) and the all-reduce of a router's load; in their input's
  /// layout, their types again.
  LogicalResult partitionContextCollective(Operation *collective);
  /// The rule of the mixture-of-experts ops: per token, in the layout of the tokens (the
  /// stream; never split along the features); an expert's weight is whole on every rank.
  LogicalResult partitionPerToken(Operation *op);

private:
  int64_t tp_;
  bool sp_;
  FlatSymbolRefAttr grid_;
  llvm::DenseMap<Value, TpLayout> layouts_;
  llvm::DenseMap<Value, Value> entered_; // enterRegion's result for each value entered
};

} // namespace mlir::mt

#endif
