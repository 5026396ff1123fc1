// plan.fbs's tables as flatc describes them (--reflect-names: each table's fields in
// order, with their types and names), which the compiler writes instructions by and the
// plan reader checks them by, so that a field added to the schema needs neither.
#ifndef MT_RUNTIME_PLAN_SCHEMAFIELDS_H
#define MT_RUNTIME_PLAN_SCHEMAFIELDS_H

#include "plan_generated.h"

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

namespace mt::plan {

/// The C++ types of FlatBuffers' scalars, in the order of ElementaryType from ET_BOOL to
/// ET_DOUBLE (a flag is a byte).
using ScalarTypes = std::tuple<uint8_t, int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t,
                               int64_t, uint64_t, float, double>;
static_assert(std::tuple_size_v<ScalarTypes> == flatbuffers::ET_DOUBLE - flatbuffers::ET_BOOL + 1);

/// Calls `f` with a value of the C++ type that holds a scalar of `type` (an enum as its
/// underlying integer); false, without calling it, where `type` is no scalar (a string,
/// vector or table).
template <size_t I = 0, typename F> bool withScalarType(flatbuffers::ElementaryType type, F &&f) {
  if constexpr (I == std::tuple_size_v<ScalarTypes>) {
    return false;
  } else {
    if (type != flatbuffers::ET_BOOL + static_cast<int>(I))
      return withScalarType<I + 1>(type, std::forward<F>(f));
    f(std::tuple_element_t<I, ScalarTypes>{});
    return true;
  }
}

/// The table offset of the schema's field `index` (fields numbered in declaration order,
/// as plan.fbs declares them: no `id` attributes).
inline flatbuffers::voffset_t fieldOffset(size_t index) {
  return flatbuffers::FieldIndexToOffset(static_cast<flatbuffers::voffset_t>(index));
}

} // namespace mt::plan

#endif
