// Shape helpers of the mt dialect's type inference: the checks every op's
// inferReturnTypes (which is also its verifier) composes, and their messages.
#ifndef MT_DIALECTS_MT_OPSHAPES_H
#define MT_DIALECTS_MT_OPSHAPES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Value.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace mlir::mt::shapes {


inline std::string str(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

inline RankedTensorType ranked(Value v) { return cast<RankedTensorType>(v.getType()); }

inline bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// The better-known of two compatible dimensions.
inline int64_t meet(int64_t a, int64_t b) { return ShapedType::isDynamic(a) ? b : a; }

/// Number of elements in all dimensions but the last; 0 when any is dynamic.
inline int64_t leadingElements(RankedTensorType t) {
  int64_t n = 1;
  for (int64_t d : t.getShape().drop_back()) {
    if (ShapedType::isDynamic(d))
      return 0;
    n *= d;
  }
  return n;
}

/// Requires `what` to have `rank` dimensions.
inline LogicalResult expectRank(std::optional<Location> loc, StringRef op, StringRef what,
                         RankedTensorType t, int64_t rank, StringRef layout) {
  if (t.getRank() == rank)
    return success();
  return emitOptionalError(loc, op, ": ", what, " must be ", layout, ", got ", str(t));
}

/// Requires two tensors to have compatible shapes and the same element type.
inline LogicalResult expectSameShape(std::optional<Location> loc, StringRef op, StringRef a,
                              RankedTensorType ta, StringRef b, RankedTensorType tb) {
  bool ok = ta.getRank() == tb.getRank() && ta.getElementType() == tb.getElementType();
  for (int64_t i = 0; ok && i < ta.getRank(); ++i)
    ok = compatible(ta.getDimSize(i), tb.getDimSize(i));
  if (ok)
    return success();
  return emitOptionalError(loc, op, ": ", a, " ", str(ta), " and ", b, " ", str(tb),
                           " must have the same shape and element type");
}

inline RankedTensorType meetTypes(RankedTensorType a, RankedTensorType b) {
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < a.getRank(); ++i)
    shape.push_back(meet(a.getDimSize(i), b.getDimSize(i)));
  return RankedTensorType::get(shape, a.getElementType());
}

/// Requires a [H] vector that matches the last dimension of `of` (named `ofName`).
inline LogicalResult expectFeatureVector(std::optional<Location> loc, StringRef op,
                                  StringRef what, RankedTensorType vec, StringRef ofName,
                                  RankedTensorType of) {
  if (vec.getRank() == 1 && vec.getElementType() == of.getElementType() &&
      compatible(vec.getDimSize(0), of.getShape().back()))
    return success();
  return emitOptionalError(loc, op, ": ", what, " ", str(vec), " must be [",
                           of.getShape().back(), "] of the element type of ", ofName, " ",
                           str(of));
}

/// Requires two tensors to share an element type.
inline LogicalResult expectSameElementType(std::optional<Location> loc, StringRef op, StringRef a,
                                    RankedTensorType ta, StringRef b, RankedTensorType tb) {
  if (ta.getElementType() == tb.getElementType())
    return success();
  return emitOptionalError(loc, op, ": ", a, " ", str(ta), " and ", b, " ", str(tb),
                           " differ in element type");
}

/// Requires at least one (feature) dimension.
inline LogicalResult expectFeatures(std::optional<Location> loc, StringRef op, StringRef what,
                             RankedTensorType t) {
  if (t.getRank() >= 1)
    return success();
  return emitOptionalError(loc, op, ": ", what, " ", str(t),
                           " must have a feature dimension");
}

/// What losses and softmax statistics are kept in: f32 for 16-bit and f32 logits (as
/// Megatron computes cross-entropy), f64 for f64 logits.
inline Type accumulatorType(RankedTensorType logits) {
  Type element = logits.getElementType();
  return element.isF64() ? element : Float32Type::get(element.getContext());
}

/// A weight gradient: in the weight's type, or in the accumulator type where its op adds
/// it into the parameter's gradient.
inline RankedTensorType weightGradientType(RankedTensorType t, bool accumulate) {
  return accumulate ? t.clone(accumulatorType(t)) : t;
}

inline RankedTensorType withLastDim(RankedTensorType t, int64_t last) {
  SmallVector<int64_t> shape(t.getShape());
  shape.back() = last;
  return RankedTensorType::get(shape, t.getElementType());
}


} // namespace mlir::mt::shapes

#endif // MT_DIALECTS_MT_OPSHAPES_H
