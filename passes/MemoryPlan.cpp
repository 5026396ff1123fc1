// mt-memory-plan: static offsets for every activation in one arena.
#include "passes/Passes.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTMEMORYPLAN
#include "passes/Passes.h.inc"

namespace {

/// One tensor's lifetime [first, last] in program positions, and its placement.
struct Interval {
  Value value;
  int64_t first, last;
  int64_t bytes;    // footprint, rounded up to the alignment
  int64_t rawBytes; // what the tensor occupies
  int64_t offset = -1;
};

/// Greedy by size (largest first, lowest free offset over the whole lifetime): the
/// planner of TFLite's arena and of most static-graph runtimes. Returns the peak: the
/// highest byte any tensor occupies, which is what the runtime's arena reaches.
int64_t place(MutableArrayRef<Interval> intervals) {
  SmallVector<Interval *> order;
  for (Interval &i : intervals)
    order.push_back(&i);
  llvm::stable_sort(order, [](Interval *a, Interval *b) { return a->bytes > b->bytes; });

  int64_t peak = 0;
  SmallVector<Interval *> placed;
  SmallVector<std::pair<int64_t, int64_t>> busy; // [offset, end) overlapping in time
  for (Interval *cur : order) {
    busy.clear();
    for (Interval *p : placed)
      if (p->first <= cur->last && cur->first <= p->last)
        busy.push_back({p->offset, p->offset + p->bytes});
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [start, end] : busy) {
      if (start >= offset + cur->bytes)
        break;
      offset = std::max(offset, end);
    }
    cur->offset = offset;
    peak = std::max(peak, offset + cur->rawBytes);
    placed.push_back(cur);
  }
  return peak;
}

struct MtMemoryPlan : impl::MtMemoryPlanBase<MtMemoryPlan> {
  using Base::Base;

  LogicalResult plan(FunctionOpInterface fn) {
    Block &body = fn.getFunctionBody().front();
    DenseMap<Operation *, int64_t> position;
    int64_t n = 0;
    for (Operation &op : body)
      position[&op] = n++;

    auto rawBytes = [&](Value v) -> FailureOr<int64_t> {
      auto type = dyn_cast<RankedTensorType>(v.getType());
      if (!type || !type.hasStaticShape())
        return failure();
      return std::max<int64_t>(tensorBytes(type), 1);
    };
    auto aligned = [&](int64_t bytes) { return (bytes + alignment - 1) / alignment * alignment; };
    auto lastUse = [&](Value v, int64_t def) {
      int64_t last = def;
      for (Operation *user : v.getUsers()) // a user in a nested region: its op in the body
        last = std::max(last, position.lookup(body.findAncestorOpInBlock(*user)));
      return last;
    };

    SmallVector<Interval> intervals;
    for (BlockArgument arg : body.getArguments()) {
      FailureOr<int64_t> bytes = rawBytes(arg);
      if (failed(bytes))
        return fn.emitError("mt-memory-plan: argument ")
               << arg.getArgNumber() << " of type " << arg.getType()
               << " needs a static shape (run mt-specialize first)";
      intervals.push_back({arg, -1, lastUse(arg, -1), aligned(*bytes), *bytes});
    }
    // A result that may overwrite an operand (InPlaceOpInterface) which nothing reads
    // after the op takes the operand's buffer: one interval, from the operand's
    // definition to the result's last use. `takes` maps it to the value that owns the
    // buffer. An argument's buffer is the caller's, never taken.
    DenseMap<Value, size_t> intervalOf;
    DenseMap<Value, Value> takes;
    auto owner = [&](Value v) { return takes.count(v) ? takes.lookup(v) : v; };
    for (Operation &op : body) {
      if (isa<ParamOp>(op))
        continue; // persistent weights, not arena
      auto inPlace = dyn_cast<InPlaceOpInterface>(op);
      SmallPtrSet<void *, 2> takenHere; // one result per buffer
      for (OpResult r : op.getResults()) {
        if (isAccumulated(r))
          continue; // the parameter's gradient buffer, outside the arena
        FailureOr<int64_t> bytes = rawBytes(r);
        if (failed(bytes))
          return op.emitOpError("result of type ")
                 << r.getType() << " needs a static shape (run mt-specialize first)";
        Value operand = inPlace ? inPlace.getOverwritable(r) : Value();
        if (operand && operand.getDefiningOp() && operand.getType() == r.getType() &&
            intervalOf.count(owner(operand)) && lastUse(operand, -1) == position[&op] &&
            takenHere.insert(owner(operand).getAsOpaquePointer()).second) {
          Interval &shared = intervals[intervalOf[owner(operand)]];
          shared.last = std::max(shared.last, lastUse(r, position[&op]));
          takes[r] = owner(operand);
          continue;
        }
        intervalOf[r] = intervals.size();
        intervals.push_back(
            {r, position[&op], lastUse(r, position[&op]), aligned(*bytes), *bytes});
      }
    }
    int64_t arena = place(intervals);

    DenseMap<Value, int64_t> offsetOf;
    for (const Interval &i : intervals)
      offsetOf[i.value] = i.offset;
    for (auto [result, buffer] : takes)
      offsetOf[result] = offsetOf.lookup(buffer);
    Builder b(fn->getContext());
    SmallVector<int64_t> argOffsets;
    for (BlockArgument arg : body.getArguments())
      argOffsets.push_back(offsetOf[arg]);
    fn->setAttr(kArgOffsetsAttr, b.getDenseI64ArrayAttr(argOffsets));
    for (Operation &op : body) {
      if (op.getNumResults() == 0 || isa<ParamOp>(op))
        continue;
      SmallVector<int64_t> offsets;
      for (Value r : op.getResults())
        offsets.push_back(isAccumulated(r) ? -1 : offsetOf[r]);
      op.setAttr(kOffsetsAttr, b.getDenseI64ArrayAttr(offsets));
    }
    fn->setAttr(kArenaBytesAttr, b.getI64IntegerAttr(arena));
    return success();
  }

  void runOnOperation() override {
    if (alignment <= 0) {
      getOperation().emitError("mt-memory-plan: alignment must be positive");
      return signalPassFailure();
    }
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(plan(fn)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
