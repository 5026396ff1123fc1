#ifndef MT_DIALECTS_MT_MTDIALECT_H
#define MT_DIALECTS_MT_MTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mt {
/// Sum of the elements of every result: one FLOP per element produced.
int64_t defaultOtherFlops(Operation *op);
/// Bytes of every operand and result, each read or written once.
int64_t defaultBytesMoved(Operation *op);
/// Bytes of a statically shaped tensor type.
int64_t tensorBytes(Type type);
} // namespace mlir::mt

#include "dialects/mt/MtDialect.h.inc"
#include "dialects/mt/MtEnums.h.inc"
#include "dialects/mt/MtInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/mt/MtOps.h.inc"

#endif
