// Element types of plan buffers: their sizes. Header-only, so the communicators and
// the plan reader share it without depending on each other.
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

} // namespace mt

#endif
