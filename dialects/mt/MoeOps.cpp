// The mixture-of-experts ops of the mt dialect (MtOps.td): their shapes, costs and
// vector-Jacobian rules. Tokens are the rows of [B, S, ...]; experts [B, S, k] lists each
// token's k experts; the dispatched rows [B·S·k, ...] are sorted by expert.
#include "dialects/mt/MtDialect.h"
#include "dialects/mt/OpShapes.h"
#include "dialects/mt/PlanEncoding.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mt;
using namespace mlir::mt::shapes;

namespace {

/// Requires tokens [B, S, F] and their experts [B, S, k] (k static) of the same tokens.
LogicalResult expectRouted(std::optional<Location> loc, StringRef op, StringRef what,
                           RankedTensorType tokens, RankedTensorType experts) {
  if (tokens.getRank() == 3 && experts.getRank() == 3 &&
      compatible(tokens.getDimSize(0), experts.getDimSize(0)) &&
      compatible(tokens.getDimSize(1), experts.getDimSize(1)) &&
      !ShapedType::isDynamic(experts.getDimSize(2)))
    return success();
  return emitOptionalError(loc, op, ": ", what, " ", str(tokens), " and experts ", str(experts),
                           " must be [B, S, ...] and [B, S, k] of the same tokens");
}

/// Requires k slots of at most `experts` experts, and a [B, S, k] `of` shaped as them.
LogicalResult expectSlots(std::optional<Location> loc, StringRef op, RankedTensorType experts,
                          int64_t count, StringRef what, RankedTensorType of) {
  if (experts.getDimSize(2) > count)
    return emitOptionalError(loc, op, ": ", experts.getDimSize(2), " experts a token among ",
                             count);
  bool same = of.getRank() == 3;
  for (int64_t i = 0; same && i < 3; ++i)
    same = compatible(of.getDimSize(i), experts.getDimSize(i));
  if (same)
    return success();
  return emitOptionalError(loc, op, ": ", what, " ", str(of), " and experts ", str(experts),
                           " must have the same shape");
}

/// Requires the load-balancing loss's coefficient to be finite and not negative.
LogicalResult expectCoefficient(std::optional<Location> loc, StringRef op, APFloat coeff) {
  const double c = coeff.convertToDouble();
  if (std::isfinite(c) && c >= 0)
    return success();
  return emitOptionalError(loc, op, ": aux_loss_coeff ", c, " is not a finite number >= 0");
}

/// Requires a router's `load`, where it has one, to be one i32 count per expert.
LogicalResult expectLoad(std::optional<Location> loc, StringRef op, Value load, int64_t experts) {
  if (!load)
    return success();
  auto type = ranked(load);
  if (type.getRank() == 1 && compatible(type.getDimSize(0), experts) &&
      type.getElementType().isInteger(32))
    return success();
  return emitOptionalError(loc, op, ": load ", str(type), " must be [", experts, "] i32");
}

/// Requires a capacity factor, where there is one, to be finite and positive.
LogicalResult expectCapacityFactor(std::optional<Location> loc, StringRef op,
                                   std::optional<APFloat> factor) {
  if (!factor || (std::isfinite(factor->convertToDouble()) && factor->convertToDouble() > 0))
    return success();
  return emitOptionalError(loc, op, ": capacity_factor ", factor->convertToDouble(),
                           " is not a finite number > 0");
}

/// The plan encoding by name, and the capacity (0: every slot).
template <typename Op> LogicalResult encodeWithCapacity(Op op, PlanInstruction &inst) {
  if (failed(encodeInstructionByName(op, inst)))
    return failure();
  if (const int64_t capacity = op.getCapacity())
    inst.set("capacity", IntegerAttr::get(IntegerType::get(op.getContext(), 64), capacity));
  return success();
}

/// The dispatched rows of experts [B, S, k]: B·S·k, dynamic where B or S is.
int64_t dispatchedRows(RankedTensorType experts) {
  int64_t n = 1;
  for (int64_t d : experts.getShape()) {
    if (ShapedType::isDynamic(d))
      return ShapedType::kDynamic;
    n *= d;
  }
  return n;
}

/// Requires rows [N, F] with N the dispatched rows of `experts`.
LogicalResult expectDispatched(std::optional<Location> loc, StringRef op, StringRef what,
                               RankedTensorType rows, RankedTensorType experts) {
  if (rows.getRank() == 2 && compatible(rows.getDimSize(0), dispatchedRows(experts)))
    return success();
  return emitOptionalError(loc, op, ": ", what, " ", str(rows),
                           " must be [B·S·k, features] for experts ", str(experts));
}

/// The tokens [B, S, F] of experts [B, S, k], in `element`.
RankedTensorType tokensOf(RankedTensorType experts, int64_t features, Type element) {
  return RankedTensorType::get({experts.getDimSize(0), experts.getDimSize(1), features}, element);
}

/// Checks a grouped linear's rows [N, in], counts [E] and weight [E, out, in] (`input`
/// false: rows are [N, out], a gradient of the output).
LogicalResult expectGrouped(std::optional<Location> loc, StringRef op, RankedTensorType rows,
                            RankedTensorType counts, RankedTensorType weight, bool input) {
  // counts [E], or [sources, E] after an expert exchange (an expert's rows their sum).
  const bool ok = rows.getRank() == 2 && (counts.getRank() == 1 || counts.getRank() == 2) &&
                  weight.getRank() == 3 && counts.hasStaticShape() &&
                  compatible(counts.getShape().back(), weight.getDimSize(0)) &&
                  compatible(rows.getDimSize(1), weight.getDimSize(input ? 2 : 1)) &&
                  rows.getElementType() == weight.getElementType();
  if (ok)
    return success();
  return emitOptionalError(loc, op, ": rows ", str(rows), ", counts ", str(counts), " and weight ",
                           str(weight), " must be [N, ", input ? "in" : "out",
                           "], [E] (or [sources, E]) and [E, out, in] of one float type");
}

} // namespace

LogicalResult MoeRouterOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto logits = ranked(adaptor.getLogits());
  const int64_t k = static_cast<int64_t>(adaptor.getTopk());
  if (failed(expectRank(loc, "mt.moe_router", "logits", logits, 3, "[B, S, experts]")) ||
      failed(expectCoefficient(loc, "mt.moe_router", adaptor.getAuxLossCoeff())) ||
      failed(expectLoad(loc, "mt.moe_router", adaptor.getLoad(), logits.getDimSize(2))))
    return failure();
  if (ShapedType::isDynamic(logits.getDimSize(2)) || k > logits.getDimSize(2))
    return emitOptionalError(loc, "mt.moe_router: topk ", k, " of the experts of ", str(logits));
  SmallVector<int64_t> shape{logits.getDimSize(0), logits.getDimSize(1), k};
  types.push_back(RankedTensorType::get(shape, logits.getElementType()));
  types.push_back(RankedTensorType::get(shape, IntegerType::get(logits.getContext(), 32)));
  return success();
}

LogicalResult MoeRouterGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), logits = ranked(adaptor.getLogits());
  auto experts = ranked(adaptor.getExperts());
  StringRef op = "mt.moe_router_grad";
  if (failed(expectRouted(loc, op, "logits", logits, experts)) ||
      failed(expectSlots(loc, op, experts, logits.getDimSize(2), "grad", grad)) ||
      failed(expectSameElementType(loc, op, "grad", grad, "logits", logits)) ||
      failed(expectCoefficient(loc, op, adaptor.getAuxLossCoeff())) ||
      failed(expectLoad(loc, op, adaptor.getLoad(), logits.getDimSize(2))))
    return failure();
  if (static_cast<int64_t>(adaptor.getTopk()) != experts.getDimSize(2))
    return emitOptionalError(loc, op, ": topk ", adaptor.getTopk(), " but ",
                             experts.getDimSize(2), " experts a token");
  types.push_back(logits);
  return success();
}

int64_t mlir::mt::expertCapacity(Value experts, int64_t numExperts, std::optional<APFloat> factor) {
  auto type = cast<RankedTensorType>(experts.getType());
  if (!factor || !type.hasStaticShape() || numExperts <= 0)
    return 0;
  const double perExpert = static_cast<double>(type.getNumElements()) / numExperts;
  return static_cast<int64_t>(std::ceil(perExpert * factor->convertToDouble()));
}

LogicalResult MoeDispatchOp::encodeInstruction(PlanInstruction &inst) {
  return encodeWithCapacity(*this, inst);
}
LogicalResult MoeDispatchGradOp::encodeInstruction(PlanInstruction &inst) {
  return encodeWithCapacity(*this, inst);
}
LogicalResult MoeCombineOp::encodeInstruction(PlanInstruction &inst) {
  return encodeWithCapacity(*this, inst);
}
LogicalResult MoeCombineGradOp::encodeInstruction(PlanInstruction &inst) {
  return encodeWithCapacity(*this, inst);
}

LogicalResult MoeDropOp::encodeInstruction(PlanInstruction &inst) {
  return encodeWithCapacity(*this, inst);
}

LogicalResult MoeDropOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto gates = ranked(adaptor.getGates()), experts = ranked(adaptor.getExperts());
  StringRef op = "mt.moe_drop";
  if (failed(expectRouted(loc, op, "gates", gates, experts)) ||
      failed(expectSlots(loc, op, experts, static_cast<int64_t>(adaptor.getNumExperts()), "gates",
                         gates)) ||
      failed(expectCapacityFactor(loc, op, adaptor.getCapacityFactor())))
    return failure();
  types.push_back(experts);
  return success();
}

LogicalResult MoeCountOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto experts = ranked(adaptor.getExperts());
  const int64_t count = static_cast<int64_t>(adaptor.getNumExperts());
  if (failed(expectRouted(loc, "mt.moe_count", "experts", experts, experts)) ||
      failed(expectSlots(loc, "mt.moe_count", experts, count, "experts", experts)))
    return failure();
  types.push_back(RankedTensorType::get({count}, experts.getElementType()));
  return success();
}

LogicalResult MoeDispatchOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput()), experts = ranked(adaptor.getExperts());
  const int64_t count = static_cast<int64_t>(adaptor.getNumExperts());
  StringRef op = "mt.moe_dispatch";
  if (failed(expectRouted(loc, op, "input", input, experts)) ||
      failed(expectSlots(loc, op, experts, count, "experts", experts)) ||
      failed(expectCapacityFactor(loc, op, adaptor.getCapacityFactor())))
    return failure();
  types.push_back(RankedTensorType::get({dispatchedRows(experts), input.getDimSize(2)},
                                        input.getElementType()));
  types.push_back(RankedTensorType::get({count}, experts.getElementType()));
  return success();
}

LogicalResult MoeDispatchGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), experts = ranked(adaptor.getExperts());
  StringRef op = "mt.moe_dispatch_grad";
  if (failed(expectRouted(loc, op, "experts", experts, experts)) ||
      failed(expectSlots(loc, op, experts, static_cast<int64_t>(adaptor.getNumExperts()), "experts",
                         experts)) ||
      failed(expectDispatched(loc, op, "grad", grad, experts)) ||
      failed(expectCapacityFactor(loc, op, adaptor.getCapacityFactor())))
    return failure();
  types.push_back(tokensOf(experts, grad.getDimSize(1), grad.getElementType()));
  return success();
}

LogicalResult GroupedLinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput()), weight = ranked(adaptor.getWeight());
  if (failed(expectGrouped(loc, "mt.grouped_linear", input, ranked(adaptor.getCounts()), weight,
                           true)))
    return failure();
  types.push_back(withLastDim(input, weight.getDimSize(1)));
  return success();
}

/// The rows a grouped linear computes: after an expert exchange its rows are room for
/// every source's (counts [sources, E]), of which one source's worth arrive on average,
/// so that the FLOPs summed over the ranks are those of the dispatched rows, exactly
/// (with a capacity, the dropless bound).
static int64_t computedRows(Value rows, Value counts) {
  auto c = ranked(counts);
  return leadingElements(ranked(rows)) / (c.getRank() == 2 ? c.getDimSize(0) : 1);
}

SmallVector<GemmShape> GroupedLinearOp::getGemms() {
  auto w = ranked(getWeight());
  return {{1, computedRows(getInput(), getCounts()), w.getDimSize(1), w.getDimSize(2)}};
}

LogicalResult GroupedLinearGradInputOp::inferReturnTypes(MLIRContext *,
                                                         std::optional<Location> loc,
                                                         Adaptor adaptor,
                                                         SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), weight = ranked(adaptor.getWeight());
  if (failed(expectGrouped(loc, "mt.grouped_linear_grad_input", grad,
                           ranked(adaptor.getCounts()), weight, false)))
    return failure();
  types.push_back(withLastDim(grad, weight.getDimSize(2)));
  return success();
}

SmallVector<GemmShape> GroupedLinearGradInputOp::getGemms() {
  auto w = ranked(getWeight());
  return {{1, computedRows(getGrad(), getCounts()), w.getDimSize(2), w.getDimSize(1)}};
}

LogicalResult GroupedLinearGradWeightOp::inferReturnTypes(MLIRContext *,
                                                          std::optional<Location> loc,
                                                          Adaptor adaptor,
                                                          SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), input = ranked(adaptor.getInput());
  auto counts = ranked(adaptor.getCounts());
  StringRef op = "mt.grouped_linear_grad_weight";
  if (grad.getRank() != 2 || input.getRank() != 2 ||
      (counts.getRank() != 1 && counts.getRank() != 2) || !counts.hasStaticShape() ||
      !compatible(grad.getDimSize(0), input.getDimSize(0)))
    return emitOptionalError(loc, op, ": grad ", str(grad), ", input ", str(input), " and counts ",
                             str(counts), " must be [N, out], [N, in] and [E] (or [sources, E])");
  if (failed(expectSameElementType(loc, op, "grad", grad, "input", input)))
    return failure();
  types.push_back(RankedTensorType::get(
      {counts.getShape().back(), grad.getDimSize(1), input.getDimSize(1)}, grad.getElementType()));
  return success();
}

SmallVector<GemmShape> GroupedLinearGradWeightOp::getGemms() {
  auto grad = ranked(getGrad()), input = ranked(getInput());
  return {{1, grad.getDimSize(1), input.getDimSize(1), computedRows(getGrad(), getCounts())}};
}

/// Checks an expert exchange's rows [N, H] of this rank, counts [E] (E a multiple of
/// ep) and, where given, the routing [ep, E/ep].
static LogicalResult expectExchange(std::optional<Location> loc, StringRef op,
                                    RankedTensorType rows, RankedTensorType counts, int64_t ep,
                                    RankedTensorType *routing = nullptr) {
  if (rows.getRank() == 2 && counts.getRank() == 1 && counts.hasStaticShape() &&
      counts.getDimSize(0) % ep == 0 &&
      (!routing || (routing->getRank() == 2 && routing->getDimSize(0) == ep &&
                    routing->getDimSize(1) * ep == counts.getDimSize(0))))
    return success();
  return emitOptionalError(loc, op, ": rows ", str(rows), " and counts ", str(counts),
                           routing ? ", routing " + str(*routing) : std::string(),
                           " must be [N, H], [E] and [", ep, ", E/", ep, "] with ", ep,
                           " dividing E");
}

/// The rows of every rank of the expert group: ep·N of them.
static RankedTensorType exchanged(RankedTensorType rows, int64_t ep) {
  const int64_t n = rows.getDimSize(0);
  return RankedTensorType::get({ShapedType::isDynamic(n) ? n : ep * n, rows.getDimSize(1)},
                               rows.getElementType());
}

LogicalResult MoeExchangeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto rows = ranked(adaptor.getRows()), counts = ranked(adaptor.getCounts());
  const int64_t ep = static_cast<int64_t>(adaptor.getExpertParallel());
  if (failed(expectExchange(loc, "mt.moe_exchange", rows, counts, ep)))
    return failure();
  types.push_back(exchanged(rows, ep));
  types.push_back(RankedTensorType::get({ep, counts.getDimSize(0) / ep}, counts.getElementType()));
  return success();
}

LogicalResult MoeExchangeBackOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                  Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto rows = ranked(adaptor.getRows()), counts = ranked(adaptor.getCounts());
  auto routing = ranked(adaptor.getRouting());
  const int64_t ep = static_cast<int64_t>(adaptor.getExpertParallel());
  if (failed(expectExchange(loc, "mt.moe_exchange_back", rows, counts, ep, &routing)))
    return failure();
  const int64_t n = rows.getDimSize(0);
  if (!ShapedType::isDynamic(n) && n % ep != 0)
    return emitOptionalError(loc, "mt.moe_exchange_back: rows ", str(rows), " are not ep = ", ep,
                             " ranks' worth");
  types.push_back(RankedTensorType::get({ShapedType::isDynamic(n) ? n : n / ep, rows.getDimSize(1)},
                                        rows.getElementType()));
  return success();
}

// Each exchange's gradient is the other, by the same counts.
FailureOr<SmallVector<Value>> MoeExchangeOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  if (!resultGrads[0])
    return SmallVector<Value>{Value(), Value()};
  return SmallVector<Value>{MoeExchangeBackOp::create(b, getLoc(), resultGrads[0], getCounts(),
                                                      getRouting(), getExpertParallelAttr()),
                            Value()};
}

FailureOr<SmallVector<Value>> MoeExchangeBackOp::buildGradients(OpBuilder &b,
                                                                ValueRange resultGrads) {
  if (!resultGrads[0])
    return SmallVector<Value>{Value(), Value(), Value()};
  auto exchange =
      MoeExchangeOp::create(b, getLoc(), resultGrads[0], getCounts(), getExpertParallelAttr());
  return SmallVector<Value>{exchange.getResult(), Value(), Value()};
}

LogicalResult MoeCombineOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto rows = ranked(adaptor.getRows()), gates = ranked(adaptor.getGates());
  auto experts = ranked(adaptor.getExperts());
  StringRef op = "mt.moe_combine";
  if (failed(expectRouted(loc, op, "gates", gates, experts)) ||
      failed(expectSlots(loc, op, experts, static_cast<int64_t>(adaptor.getNumExperts()), "gates",
                         gates)) ||
      failed(expectDispatched(loc, op, "rows", rows, experts)) ||
      failed(expectSameElementType(loc, op, "rows", rows, "gates", gates)) ||
      failed(expectCapacityFactor(loc, op, adaptor.getCapacityFactor())))
    return failure();
  types.push_back(tokensOf(experts, rows.getDimSize(1), rows.getElementType()));
  return success();
}

// A combine finds its tokens' rows as the dispatch of the same experts placed them: with
// the same capacity.
LogicalResult MoeCombineOp::verify() {
  for (Operation *user : getExperts().getUsers())
    if (auto dispatch = dyn_cast<MoeDispatchOp>(user);
        dispatch && dispatch.getCapacityFactor() != getCapacityFactor())
      return emitOpError("its capacity_factor differs from that of the mt.moe_dispatch of the "
                         "same experts, which placed the rows it reads");
  return success();
}

LogicalResult MoeCombineGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), rows = ranked(adaptor.getRows());
  auto gates = ranked(adaptor.getGates()), experts = ranked(adaptor.getExperts());
  StringRef op = "mt.moe_combine_grad";
  if (failed(expectRouted(loc, op, "gates", gates, experts)) ||
      failed(expectSlots(loc, op, experts, static_cast<int64_t>(adaptor.getNumExperts()), "gates",
                         gates)) ||
      failed(expectDispatched(loc, op, "rows", rows, experts)) ||
      failed(expectSameShape(loc, op, "grad", grad, "tokens",
                             tokensOf(experts, rows.getDimSize(1), rows.getElementType()))) ||
      failed(expectCapacityFactor(loc, op, adaptor.getCapacityFactor())))
    return failure();
  types.append({rows, gates});
  return success();
}

FailureOr<SmallVector<Value>> MoeRouterOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  SmallVector<Value> grads(getNumOperands()); // none for the load
  if (resultGrads[0])
    grads[0] =
        MoeRouterGradOp::create(b, getLoc(), resultGrads[0], getLogits(), getExperts(), getLoad(),
                                getTopkAttr(), getPreSoftmaxAttr(), getAuxLossCoeffAttr());
  return grads;
}

FailureOr<SmallVector<Value>> MoeDispatchOp::buildGradients(OpBuilder &b,
                                                           ValueRange resultGrads) {
  if (!resultGrads[0])
    return SmallVector<Value>{Value(), Value()};
  return SmallVector<Value>{MoeDispatchGradOp::create(b, getLoc(), resultGrads[0], getExperts(),
                                                      getNumExpertsAttr(), getCapacityFactorAttr()),
                            Value()};
}

FailureOr<SmallVector<Value>> GroupedLinearOp::buildGradients(OpBuilder &b,
                                                             ValueRange resultGrads) {
  Value dy = resultGrads[0];
  return SmallVector<Value>{
      GroupedLinearGradInputOp::create(b, getLoc(), dy, getCounts(), getWeight()), Value(),
      GroupedLinearGradWeightOp::create(b, getLoc(), dy, getInput(), getCounts())};
}

FailureOr<SmallVector<Value>> MoeCombineOp::buildGradients(OpBuilder &b,
                                                          ValueRange resultGrads) {
  auto grad = MoeCombineGradOp::create(b, getLoc(), resultGrads[0], getRows(), getGates(),
                                       getExperts(), getNumExpertsAttr(), getCapacityFactorAttr());
  return SmallVector<Value>{grad.getRowsGrad(), grad.getGatesGrad(), Value()};
}
