// Element types of plan buffers: their sizes, the accumulator type of a precision, and
// the most dimensions a buffer has. Header-only, over the schema alone, so that the
// plan library, the runtime core and the communicators share it without depending on
// each other; the plan emitter takes the accumulator type from here too (the dialect
// states the same rule over MLIR types, in MtOps.cpp's accumulatorType).
#ifndef MT_RUNTIME_CORE_DTYPE_H
#define MT_RUNTIME_CORE_DTYPE_H

#include "plan_generated.h"

#include <cstddef>

namespace mt {

/// Bytes of one element of `dtype`.
inline size_t dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F64:
  case plan::DType::I64:
    return 8;
  case plan::DType::F32:
  case plan::DType::I32:
    return 4;
  case plan::DType::BF16:
  case plan::DType::F16:
    return 2;
  case plan::DType::I8:
    return 1;
  }
  return 0;
}

/// What a plan of `precision` keeps parameters (master weights, gradients, optimizer
/// state), losses and softmax statistics in: f32 under bf16 and f16, else `precision`.
inline plan::DType accumulatorType(plan::DType precision) {
  return precision == plan::DType::BF16 || precision == plan::DType::F16 ? plan::DType::F32
                                                                         : precision;
}

/// The most dimensions a plan buffer (and so a TensorView) has.
inline constexpr int kMaxRank = 8;

} // namespace mt

#endif
