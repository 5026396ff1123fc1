// mt-expert-parallel: Megatron-Core's expert parallelism as a rewrite of a specialized
// step (Passes.td says what it writes). Each mixture of experts' weights are cut along
// their experts over the expert-parallel group; the rows mt.moe_dispatch sorts by expert
// go to the ranks of their experts before the experts' GEMMs and come back before the
// combine. Everything else is as it was: routing, dispatch and combine stay per token.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::mt {
#define GEN_PASS_DEF_MTEXPERTPARALLEL
#include "passes/Passes.h.inc"

namespace {

/// Cuts a mixture of experts' weight [E, ...] into ep blocks of E/ep experts.
LogicalResult shardExperts(Value weight, int64_t ep, Operation *user) {
  auto param = weight.getDefiningOp<ParamOp>();
  if (!param)
    return user->emitOpError("mt-expert-parallel: the experts' weight must be an mt.param");
  if (param.getExpertParallel())
    return success();
  if (param.getShardDim())
    return user->emitOpError("mt-expert-parallel: parameter '")
           << param.getName() << "' is cut along dimension " << *param.getShardDim()
           << " already";
  auto type = cast<RankedTensorType>(param.getType());
  if (type.getDimSize(0) % ep != 0)
    return user->emitOpError("mt-expert-parallel: ")
           << type.getDimSize(0) << " experts of '" << param.getName()
           << "' are not divisible by ep " << ep;
  SmallVector<int64_t> local(type.getShape());
  local[0] /= ep;
  param.setGlobalShape(type.getShape());
  param.setShardDim(0);
  param.setExpertParallel(true);
  param.getResult().setType(RankedTensorType::get(local, type.getElementType()));
  return success();
}

/// After each dispatch, its rows to the ranks of their experts (the experts' GEMMs read
/// them by the routing); before each combine of its tokens, the results back.
LogicalResult exchange(MoeDispatchOp dispatch, int64_t ep) {
  if (dispatch.getNumExperts() % ep != 0)
    return dispatch.emitOpError("mt-expert-parallel: ")
           << dispatch.getNumExperts() << " experts are not divisible by ep " << ep;
  OpBuilder b(dispatch->getBlock(), std::next(dispatch->getIterator()));
  IntegerAttr size = b.getI64IntegerAttr(ep);
  auto sent = MoeExchangeOp::create(b, dispatch.getLoc(), dispatch.getRows(),
                                    dispatch.getCounts(), size);
  // Each in its layer (mt-expand's marks), as the ops it stands between.
  sent->setDiscardableAttrs(dispatch->getDiscardableAttrDictionary());
  dispatch.getRows().replaceAllUsesExcept(sent.getResult(), sent);
  // The experts' GEMMs read the exchanged rows by the routing; a router's load (the
  // token counts) stays local.
  dispatch.getCounts().replaceUsesWithIf(
      sent.getRouting(), [&](OpOperand &use) { return isa<GroupedLinearOp>(use.getOwner()); });
  for (Operation *user : llvm::to_vector(dispatch.getExperts().getUsers()))
    if (auto combine = dyn_cast<MoeCombineOp>(user)) {
      OpBuilder before(combine);
      auto back = MoeExchangeBackOp::create(before, combine.getLoc(), combine.getRows(),
                                            dispatch.getCounts(), sent.getRouting(), size);
      back->setDiscardableAttrs(combine->getDiscardableAttrDictionary());
      combine.getRowsMutable().assign(back.getResult());
    }
  return success();
}

LogicalResult partition(FunctionOpInterface fn, int64_t ep) {
  SmallVector<MoeDispatchOp> dispatches;
  SmallVector<GroupedLinearOp> experts;
  fn.walk([&](Operation *op) {
    if (auto dispatch = dyn_cast<MoeDispatchOp>(op))
      dispatches.push_back(dispatch);
    else if (auto grouped = dyn_cast<GroupedLinearOp>(op))
      experts.push_back(grouped);
  });
  for (GroupedLinearOp grouped : experts)
    if (failed(shardExperts(grouped.getWeight(), ep, grouped)))
      return failure();
  for (MoeDispatchOp dispatch : dispatches)
    if (failed(exchange(dispatch, ep)))
      return failure();
  return reinferTypes(fn);
}

struct MtExpertParallel : impl::MtExpertParallelBase<MtExpertParallel> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (ep < 1 || dp < 1 || dp % ep != 0) {
      module.emitError("mt-expert-parallel: ep ")
          << static_cast<int64_t>(ep) << " must divide the data-parallel ranks ("
          << static_cast<int64_t>(dp) << ")";
      return signalPassFailure();
    }
    if (ep == 1)
      return;
    for (auto fn : module.getOps<FunctionOpInterface>())
      if (!fn.isExternal() && !fn.isPrivate() && failed(partition(fn, ep)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mt
