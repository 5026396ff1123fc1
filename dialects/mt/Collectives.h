// Builders of the tensor-parallel collectives (upstream shard dialect ops on one grid
// axis), and the registration of their gradient rules.
#ifndef MT_DIALECTS_MT_COLLECTIVES_H
#define MT_DIALECTS_MT_COLLECTIVES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectRegistry.h"

namespace mlir::mt {

Value createTpAllReduce(OpBuilder &b, Location loc, Value input, FlatSymbolRefAttr grid,
                        int64_t axis);
Value createTpAllGather(OpBuilder &b, Location loc, Value input, Type resultType,
                        FlatSymbolRefAttr grid, int64_t axis, int64_t dim);
Value createTpReduceScatter(OpBuilder &b, Location loc, Value input, Type resultType,
                            FlatSymbolRefAttr grid, int64_t axis, int64_t dim);

void registerCollectiveGradients(DialectRegistry &registry);

} // namespace mlir::mt

#endif
