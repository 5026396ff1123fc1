// Dialects and passes every mtc tool registers.
#ifndef MT_COMPILER_REGISTRATION_H
#define MT_COMPILER_REGISTRATION_H

#include "dialects/mt/Collectives.h"
#include "dialects/mt/MtDialect.h"
#include "dialects/mt/PlanEncoding.h"
#include "passes/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/DialectRegistry.h"

namespace mtc {
inline void registerAll(mlir::DialectRegistry &registry) {
  registry.insert<mlir::mt::MtDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::shard::ShardDialect>();
  mlir::mt::registerCollectiveGradients(registry);
  mlir::mt::registerPlanEncodings(registry);
  mlir::mt::registerMtPasses();
}
} // namespace mtc

#endif
