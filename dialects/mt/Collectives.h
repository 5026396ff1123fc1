// Builders of the tensor-parallel collectives (upstream shard dialect ops on one grid
// axis), and the registration of their gradient rules.
#ifndef MT_DIALECTS_MT_COLLECTIVES_H
#define MT_DIALECTS_MT_COLLECTIVES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace mlir::mt {

/// The rank grid `shard.grid @grid(shape = dp x cp x tp)`: its axes, tensor parallel
/// fastest in rank order as in Megatron's (then context, then data parallel).
constexpr int64_t kDpAxis = 0, kCpAxis = 1, kTpAxis = 2;
/// The grid of `module`, made with these sizes where it has none; null (with an error)
/// where it has a grid of another shape.
FlatSymbolRefAttr getOrCreateGrid(ModuleOp module, int64_t dp, int64_t cp, int64_t tp);

Value createTpAllReduce(OpBuilder &b, Location loc, Value input, FlatSymbolRefAttr grid,
                        int64_t axis);
Value createTpAllGather(OpBuilder &b, Location loc, Value input, Type resultType,
                        FlatSymbolRefAttr grid, int64_t axis, int64_t dim);
Value createTpReduceScatter(OpBuilder &b, Location loc, Value input, Type resultType,
                            FlatSymbolRefAttr grid, int64_t axis, int64_t dim);

class MoeRouterOp;
/// Where each rank holds a share of the micro-batch's tokens along grid `axis`, the
/// load-balancing loss of `router` (none: nothing to do) counts every share's tokens:
/// its slots per expert (mt.moe_count, before any capacity drops), all-reduced over
/// `axis`, are the `load` of a second router that follows it, routes again and carries
/// the loss, and whose gates and experts every user reads (the given one only routes
/// for the count); a router with a load already gets it all-reduced over `axis` too. `weight`
/// scales the loss's coefficient: a context-parallel group's loss is the mean of its shares'
/// losses, so each share's loss weighs cp times.
LogicalResult shareRouterLoad(MoeRouterOp router, FlatSymbolRefAttr grid, int64_t axis,
                              int64_t weight = 1);

void registerCollectiveGradients(DialectRegistry &registry);

} // namespace mlir::mt

#endif
