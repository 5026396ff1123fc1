// The mt dialect: shape inference (which is also each op's verifier), costs, and the
// vector-Jacobian rules mt-autodiff composes.
#include "dialects/mt/MtDialect.h"
#include "dialects/mt/OpShapes.h"
#include "dialects/mt/PlanEncoding.h"

#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mt;
using namespace mlir::mt::shapes;

#include "dialects/mt/MtDialect.cpp.inc"
#include "dialects/mt/MtEnums.cpp.inc"
#include "dialects/mt/MtInterfaces.cpp.inc"

void MtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/mt/MtOps.cpp.inc"
      >();
}

LogicalResult mlir::mt::reinferOp(Operation *op) {
  auto infer = dyn_cast<InferTypeOpInterface>(op);
  if (!infer)
    return success();
  SmallVector<Type> types;
  if (failed(infer.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types)))
    return failure();
  for (auto [result, type] : llvm::zip_equal(op->getResults(), types))
    result.setType(type);
  return success();
}


int64_t mlir::mt::tensorBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return 0;
  return t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
}

int64_t mlir::mt::defaultOtherFlops(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getResultTypes())
    if (auto rt = dyn_cast<RankedTensorType>(t); rt && rt.hasStaticShape())
      n += rt.getNumElements();
  return n;
}

int64_t mlir::mt::defaultBytesMoved(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getOperandTypes())
    n += tensorBytes(t);
  for (Value r : op->getResults()) // an accumulated gradient is read, then written
    n += tensorBytes(r.getType()) * (isAccumulated(r) ? 2 : 1);
  return n;
}

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  bool normal = getInit() == InitKind::normal;
  if (normal && !(getStd() && getStd()->convertToDouble() > 0))
    return emitOpError("parameter '") << getName() << "': normal init needs a positive std";
  if (!normal && getStd())
    return emitOpError("parameter '")
           << getName() << "': " << stringifyInitKind(getInit()) << " init takes no std";
  if (getName().empty())
    return emitOpError("parameter name must not be empty");
  if (llvm::any_of(cast<RankedTensorType>(getType()).getShape(),
                   [](int64_t d) { return d <= 0; }))
    return emitOpError("parameter '") << getName() << "' has an empty shape " << getType();
  if (getShardDim().has_value() != getGlobalShape().has_value())
    return emitOpError("parameter '") << getName()
                                      << "': shard_dim and global_shape go together";
  if (auto global = getGlobalShape()) {
    ArrayRef<int64_t> local = cast<RankedTensorType>(getType()).getShape();
    int64_t dim = static_cast<int64_t>(*getShardDim());
    bool ok = global->size() == local.size() && dim >= 0 &&
              dim < static_cast<int64_t>(local.size());
    for (size_t i = 0; ok && i < local.size(); ++i)
      ok = static_cast<int64_t>(i) == dim ? (*global)[i] % local[i] == 0
                                          : (*global)[i] == local[i];
    if (!ok)
      return emitOpError("parameter '") << getName() << "': local shape " << getType()
                                        << " is not a block of global shape along dimension "
                                        << dim;
  }
  if (getVocabRows()) {
    if (cast<RankedTensorType>(getType()).getRank() == 0)
      return emitOpError("parameter '") << getName() << "': vocab_rows marks a table, not a scalar";
    const int64_t rows = static_cast<int64_t>(*getVocabRows());
    const int64_t global = getGlobalShape() ? (*getGlobalShape())[0]
                                            : cast<RankedTensorType>(getType()).getDimSize(0);
    if (rows <= 0 || rows > global)
      return emitOpError("parameter '") << getName() << "': vocab_rows " << rows
                                        << " is not within its " << global << " rows";
  }
  return success();
}

LogicalResult RepeatOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto fn = symbols.lookupNearestSymbolFrom<FunctionOpInterface>(*this, getCalleeAttr());
  if (!fn)
    return emitOpError("block function ") << getCalleeAttr() << " not found";
  ArrayRef<Type> args = fn.getArgumentTypes(), results = fn.getResultTypes();
  if (args.size() != 1 || results.size() != 1)
    return emitOpError("block ") << getCalleeAttr()
                                 << " must take and return one tensor (the residual stream)";
  if (args[0] != results[0])
    return emitOpError("block ") << getCalleeAttr() << " maps " << args[0] << " to "
                                 << results[0] << "; a repeated block must keep its type";
  if (args[0] != getInput().getType() || results[0] != getResult().getType())
    return emitOpError("input ") << getInput().getType() << " and result "
                                 << getResult().getType() << " must match block "
                                 << getCalleeAttr() << " of type " << args[0];
  return success();
}

//===----------------------------------------------------------------------===//
// Forward ops: inference and verification
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto table = ranked(adaptor.getTable()), ids = ranked(adaptor.getIds());
  if (failed(expectRank(loc, "mt.embedding", "table", table, 2, "[V, H]")))
    return failure();
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  types.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

LogicalResult PositionEmbeddingOp::inferReturnTypes(MLIRContext *,
                                                    std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput()), table = ranked(adaptor.getTable());
  StringRef op = "mt.position_embedding";
  if (failed(expectRank(loc, op, "input", input, 3, "[B, S, H]")) ||
      failed(expectRank(loc, op, "table", table, 2, "[positions, H]")))
    return failure();
  if (failed(expectSameElementType(loc, op, "input", input, "table", table)))
    return failure();
  if (!compatible(input.getDimSize(2), table.getDimSize(1)))
    return emitOptionalError(loc, op, ": table ", str(table),
                             " does not match the hidden size of input ", str(input));
  int64_t s = input.getDimSize(1), positions = table.getDimSize(0);
  if (!ShapedType::isDynamic(s) && s > positions)
    return emitOptionalError(loc, op, ": sequence length ", s, " exceeds the ", positions,
                             " positions of table ", str(table));
  types.push_back(input);
  return success();
}

/// A normalisation over the last dimension: its result is its input; the weight (and
/// the bias, if it has one) are feature vectors.
static LogicalResult inferNorm(std::optional<Location> loc, StringRef op, Value x, Value w,
                               Value b, SmallVectorImpl<Type> &types) {
  auto input = ranked(x);
  if (failed(expectFeatures(loc, op, "input", input)) ||
      failed(expectFeatureVector(loc, op, "weight", ranked(w), "input", input)) ||
      (b && failed(expectFeatureVector(loc, op, "bias", ranked(b), "input", input))))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferNorm(loc, "mt.layer_norm", adaptor.getInput(), adaptor.getWeight(),
                   adaptor.getBias(), types);
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferNorm(loc, "mt.rms_norm", adaptor.getInput(), adaptor.getWeight(), Value(), types);
}

/// A linear's result: x [..., K] by W [N, K] (+ b [N]) is [..., N].
static LogicalResult inferLinear(std::optional<Location> loc, StringRef op, Value inputValue,
                                 Value weightValue, Value bias,
                                 SmallVectorImpl<Type> &types) {
  auto input = ranked(inputValue), weight = ranked(weightValue);
  if (failed(expectFeatures(loc, op, "input", input)) ||
      failed(expectRank(loc, op, "weight", weight, 2, "[out, in]")))
    return failure();
  if (!compatible(input.getShape().back(), weight.getDimSize(1)))
    return emitOptionalError(loc, op, ": input ", str(input), " has ",
                             input.getShape().back(), " features but weight ",
                             str(weight), " takes ", weight.getDimSize(1),
                             " (weights are [out, in])");
  if (input.getElementType() != weight.getElementType())
    return emitOptionalError(loc, op, ": input ", str(input), " and weight ", str(weight),
                             " differ in element type");
  RankedTensorType result = withLastDim(input, weight.getDimSize(0));
  if (bias && failed(expectFeatureVector(loc, op, "bias", ranked(bias), "result", result)))
    return failure();
  types.push_back(result);
  return success();
}

/// A linear's one product: rows by output features, over the input features.
static SmallVector<GemmShape> linearGemms(Value input, Value weight) {
  auto w = ranked(weight);
  return {{1, leadingElements(ranked(input)), w.getDimSize(0), w.getDimSize(1)}};
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferLinear(loc, "mt.linear", adaptor.getInput(), adaptor.getWeight(),
                     adaptor.getBias(), types);
}

SmallVector<GemmShape> LinearOp::getGemms() { return linearGemms(getInput(), getWeight()); }

/// Its pre-activation and its activation, both of the linear's result type.
LogicalResult LinearGeluOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  if (failed(inferLinear(loc, "mt.linear_gelu", adaptor.getInput(), adaptor.getWeight(),
                         adaptor.getBias(), types)))
    return failure();
  types.push_back(types.back());
  return success();
}

SmallVector<GemmShape> LinearGeluOp::getGemms() { return linearGemms(getInput(), getWeight()); }

LogicalResult AddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                      Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto lhs = ranked(adaptor.getLhs()), rhs = ranked(adaptor.getRhs());
  if (failed(expectSameShape(loc, "mt.add", "lhs", lhs, "rhs", rhs)))
    return failure();
  types.push_back(meetTypes(lhs, rhs));
  return success();
}

/// An activation's result: its input's type.
static LogicalResult inferActivation(Value input, SmallVectorImpl<Type> &types) {
  types.push_back(input.getType());
  return success();
}

LogicalResult GeluOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferActivation(adaptor.getInput(), types);
}

LogicalResult SiluOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferActivation(adaptor.getInput(), types);
}

LogicalResult SwigluOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto gate = ranked(adaptor.getGate()), up = ranked(adaptor.getUp());
  if (failed(expectSameShape(loc, "mt.swiglu", "gate", gate, "up", up)))
    return failure();
  types.push_back(meetTypes(gate, up));
  return success();
}

/// Checks a fused QKV [B, S, (heads + 2·kv_heads)·d], laid out by key/value group,
/// against its head counts; returns d, dynamic where the width is.
static FailureOr<int64_t> qkvHeadDim(std::optional<Location> loc, StringRef op,
                                     RankedTensorType qkv, int64_t heads,
                                     std::optional<uint64_t> kvHeads) {
  if (failed(expectRank(loc, op, "qkv", qkv, 3, "[B, S, (heads + 2·kv_heads)·d]")))
    return failure();
  const int64_t kv = kvHeads ? static_cast<int64_t>(*kvHeads) : heads;
  if (heads <= 0 || kv <= 0 || heads % kv != 0)
    return emitOptionalError(loc, op, ": kv_heads ", kv, " must divide heads ", heads);
  const int64_t width = qkv.getDimSize(2);
  if (ShapedType::isDynamic(width))
    return width;
  if (width % (heads + 2 * kv) != 0)
    return emitOptionalError(loc, op, ": qkv ", str(qkv), " is not ", heads, " query and ", kv,
                             " key and value heads of one head dimension");
  return width / (heads + 2 * kv);
}

LogicalResult RotaryOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto qkv = ranked(adaptor.getQkv());
  FailureOr<int64_t> d = qkvHeadDim(loc, "mt.rotary", qkv, adaptor.getHeads(),
                                    adaptor.getKvHeads());
  if (failed(d))
    return failure();
  if (!ShapedType::isDynamic(*d) && *d % 2 != 0)
    return emitOptionalError(loc, "mt.rotary: qkv ", str(qkv), " has heads of odd dimension ",
                             *d, " (rotary turns pairs of dimensions)");
  types.push_back(qkv);
  return success();
}

LogicalResult RotaryOp::verify() {
  if (!(getTheta().convertToDouble() > 0))
    return emitOpError("theta ") << getTheta().convertToDouble() << " must be positive";
  if (getScalingFactor() &&
      (!(getScalingFactor()->convertToDouble() > 0) || !(getLowFreqFactor().convertToDouble() > 0) ||
       !(getLowFreqFactor().convertToDouble() < getHighFreqFactor().convertToDouble()) ||
       getOriginalPositions() <= 0))
    return emitOpError("frequency scaling needs scaling_factor > 0, 0 < low_freq_factor < "
                       "high_freq_factor and original_positions > 0");
  return success();
}

/// qk_norm's (and its gradient's) weights: each [d] of the qkv's heads, of its element type.
static LogicalResult checkQkNormWeights(std::optional<Location> loc, StringRef op,
                                        RankedTensorType qkv, int64_t d, Value query, Value key) {
  for (auto [name, weight] :
       {std::pair<StringRef, Value>{"query_weight", query}, {"key_weight", key}}) {
    auto w = ranked(weight);
    if (w.getRank() != 1 || w.getElementType() != qkv.getElementType() ||
        !compatible(w.getDimSize(0), d))
      return emitOptionalError(loc, op, ": ", name, " ", str(w), " must be [",
                               ShapedType::isDynamic(d) ? std::string("d") : std::to_string(d),
                               "], a head of qkv ", str(qkv), ", of its element type");
  }
  return success();
}

LogicalResult QkNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto qkv = ranked(adaptor.getQkv());
  FailureOr<int64_t> d =
      qkvHeadDim(loc, "mt.qk_norm", qkv, adaptor.getHeads(), adaptor.getKvHeads());
  if (failed(d) || failed(checkQkNormWeights(loc, "mt.qk_norm", qkv, *d, adaptor.getQueryWeight(),
                                             adaptor.getKeyWeight())))
    return failure();
  types.push_back(qkv);
  return success();
}

LogicalResult QkNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), qkv = ranked(adaptor.getQkv());
  FailureOr<int64_t> d =
      qkvHeadDim(loc, "mt.qk_norm_grad", qkv, adaptor.getHeads(), adaptor.getKvHeads());
  if (failed(d) || failed(expectSameShape(loc, "mt.qk_norm_grad", "grad", grad, "qkv", qkv)) ||
      failed(checkQkNormWeights(loc, "mt.qk_norm_grad", qkv, *d, adaptor.getQueryWeight(),
                                adaptor.getKeyWeight())))
    return failure();
  types.push_back(meetTypes(grad, qkv));
  for (Value weight : {adaptor.getQueryWeight(), adaptor.getKeyWeight()})
    types.push_back(weightGradientType(ranked(weight), adaptor.getAccumulate()));
  return success();
}

unsigned QkNormGradOp::getFirstWeightGradient() { return 1; }

/// Checks attention's fused QKV against its head counts; returns the width of its output,
/// heads·d.
static FailureOr<int64_t> attentionHidden(std::optional<Location> loc, StringRef op,
                                          RankedTensorType qkv, int64_t heads,
                                          std::optional<uint64_t> kvHeads) {
  FailureOr<int64_t> d = qkvHeadDim(loc, op, qkv, heads, kvHeads);
  if (failed(d))
    return failure();
  if (ShapedType::isDynamic(*d))
    return emitOptionalError(loc, op, ": qkv ", str(qkv), " needs a static last dimension");
  return heads * *d;
}

/// The rows' statistics of attention whose output is `out` ([B, rows, heads·d]) with
/// `heads` query heads: [B, heads, rows] in the loss's type.
static RankedTensorType attentionStatsType(RankedTensorType out, int64_t heads) {
  return RankedTensorType::get({out.getDimSize(0), heads, out.getDimSize(1)}, accumulatorType(out));
}

/// Attention's output over `qkv` ([B, S, width]): [B, S, hidden], or, under context
/// parallelism `cp`, this rank's share of the rows, S/cp (S cut into 2·cp chunks).
static FailureOr<RankedTensorType> attentionResultType(std::optional<Location> loc, StringRef op,
                                                       RankedTensorType qkv, int64_t hidden,
                                                       std::optional<uint64_t> cp, bool ring) {
  RankedTensorType out = withLastDim(qkv, hidden);
  if (ring && !cp)
    return emitOptionalError(loc, op, ": ring attention needs context_parallel");
  if (!cp)
    return out;
  const int64_t s = qkv.getDimSize(1), parts = static_cast<int64_t>(*cp);
  if (ring) { // qkv is this rank's share: two whole chunks
    if (ShapedType::isDynamic(s) || s % 2 != 0)
      return emitOptionalError(loc, op, ": the share of the sequence in qkv ", str(qkv),
                               " is not two chunks");
    return out;
  }
  if (ShapedType::isDynamic(s) || s % (2 * parts) != 0)
    return emitOptionalError(loc, op, ": the sequence of qkv ", str(qkv),
                             " is not cut into 2·context_parallel = ", 2 * parts, " chunks");
  SmallVector<int64_t> shape(out.getShape());
  shape[1] = s / parts;
  return RankedTensorType::get(shape, out.getElementType());
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto qkv = ranked(adaptor.getQkv());
  FailureOr<int64_t> hidden =
      attentionHidden(loc, "mt.attention", qkv, adaptor.getHeads(), adaptor.getKvHeads());
  if (failed(hidden))
    return failure();
  FailureOr<RankedTensorType> out = attentionResultType(
      loc, "mt.attention", qkv, *hidden, adaptor.getContextParallel(), adaptor.getRing());
  if (failed(out))
    return failure();
  types.push_back(*out);
  if (adaptor.getKeepStats())
    types.push_back(attentionStatsType(*out, adaptor.getHeads()));
  return success();
}

/// The products of attention with output `out` ([B, R, heads·d]) over `keys` positions
/// per (sequence, head): QKᵀ (R x d by d x keys), and those of the same shape as P·V (R x
/// keys by keys x d). R = keys but under context parallelism, where R is a rank's share
/// of the keys (all of them gathered, or coming round the ring). Counted in full for
/// causal attention, as the model-FLOPs formula does.
static GemmShape attentionScores(int64_t keys, RankedTensorType out, int64_t heads) {
  if (!out.hasStaticShape() || ShapedType::isDynamic(keys) || heads <= 0)
    return {0, 0, 0, 0};
  return {out.getDimSize(0) * heads, out.getDimSize(1), keys, out.getDimSize(2) / heads};
}
static GemmShape attentionValues(int64_t keys, RankedTensorType out, int64_t heads) {
  GemmShape g = attentionScores(keys, out, heads);
  return {g.batch, g.m, g.k, g.n};
}
/// The keys of attention over `qkv`: its sequence, or under ring attention the whole
/// sequence of which qkv is one of `cp` shares.
static int64_t attentionKeys(RankedTensorType qkv, std::optional<uint64_t> cp, bool ring) {
  const int64_t s = qkv.getDimSize(1);
  return ring && cp && !ShapedType::isDynamic(s) ? s * static_cast<int64_t>(*cp) : s;
}

/// The same for the unfused ops, whose queries are all of qkv's sequence.
static GemmShape attentionScores(RankedTensorType out, int64_t heads) {
  return attentionScores(out.getDimSize(1), out, heads);
}
static GemmShape attentionValues(RankedTensorType out, int64_t heads) {
  return attentionValues(out.getDimSize(1), out, heads);
}

SmallVector<GemmShape> AttentionOp::getGemms() {
  const int64_t keys = attentionKeys(ranked(getQkv()), getContextParallel(), getRing());
  auto out = ranked(getResult());
  return {attentionScores(keys, out, getHeads()), attentionValues(keys, out, getHeads())};
}

/// A dropout rate in [0, 1) and a non-negative stream, where given.
static LogicalResult verifyRandom(Operation *op, FloatAttr rate, IntegerAttr stream) {
  if (rate && !(rate.getValueAsDouble() >= 0.0 && rate.getValueAsDouble() < 1.0))
    return op->emitOpError("rate ") << rate.getValueAsDouble() << " must lie in [0, 1)";
  if (stream && stream.getInt() < 0)
    return op->emitOpError("stream ") << stream.getInt() << " must not be negative";
  return success();
}

/// A rotary embedding feeding attention lays the QKV out as attention reads it: the same
/// query and key/value heads.
static LogicalResult verifyRotaryInput(Operation *op, Value qkv, int64_t heads, int64_t kv) {
  auto rotary = qkv.getDefiningOp<RotaryOp>();
  if (!rotary ||
      (rotary.getHeads() == static_cast<uint64_t>(heads) && rotary.getKeyValueHeads() == kv))
    return success();
  return op->emitOpError("reads a qkv that mt.rotary turned as ")
         << rotary.getHeads() << " query and " << rotary.getKeyValueHeads()
         << " key/value heads, but attends with " << heads << " query and " << kv
         << " key/value heads";
}

/// A sliding window masks keys behind a query: only a causal mask has a behind.
static LogicalResult verifyWindow(Operation *op, bool causal, std::optional<uint64_t> window) {
  if (window && !causal)
    return op->emitOpError("has a window of ")
           << *window << " but no causal mask (a window keeps a query's last keys)";
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyRotaryInput(*this, getQkv(), getHeads(), getKeyValueHeads())) ||
      failed(verifyWindow(*this, getCausal(), getWindow())))
    return failure();
  return verifyRandom(*this, getDropoutAttr(), getStreamAttr());
}
LogicalResult AttentionProbsOp::verify() {
  if (failed(verifyWindow(*this, getCausal(), getWindow())))
    return failure();
  return verifyRotaryInput(*this, getQkv(), getHeads(), getKeyValueHeads());
}
LogicalResult AttentionGradOp::verify() { return verifyWindow(*this, getCausal(), getWindow()); }

/// Checks probabilities [B, heads, S, S] against a fused QKV; returns attention's output
/// width, heads·d.
static FailureOr<int64_t> checkProbs(std::optional<Location> loc, StringRef op,
                                     RankedTensorType probs, RankedTensorType qkv,
                                     std::optional<uint64_t> kvHeads) {
  if (failed(expectRank(loc, op, "probs", probs, 4, "[B, heads, S, S]")))
    return failure();
  int64_t heads = probs.getDimSize(1);
  if (ShapedType::isDynamic(heads))
    return emitOptionalError(loc, op, ": probs ", str(probs), " needs static heads");
  FailureOr<int64_t> hidden = attentionHidden(loc, op, qkv, heads, kvHeads);
  if (failed(hidden))
    return failure();
  if (!compatible(probs.getDimSize(0), qkv.getDimSize(0)) ||
      !compatible(probs.getDimSize(2), qkv.getDimSize(1)) ||
      !compatible(probs.getDimSize(3), qkv.getDimSize(1)) ||
      probs.getElementType() != qkv.getElementType())
    return emitOptionalError(loc, op, ": probs ", str(probs), " are not [B, heads, S, S] of qkv ",
                             str(qkv));
  return hidden;
}

LogicalResult AttentionProbsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto qkv = ranked(adaptor.getQkv());
  if (failed(attentionHidden(loc, "mt.attention_probs", qkv, adaptor.getHeads(),
                             adaptor.getKvHeads())))
    return failure();
  int64_t b = qkv.getDimSize(0), seq = qkv.getDimSize(1);
  types.push_back(RankedTensorType::get({b, static_cast<int64_t>(adaptor.getHeads()), seq, seq},
                                        qkv.getElementType()));
  return success();
}

/// Attention's output [B, S, heads·d] for the FLOPs of the ops that do not make it.
static RankedTensorType attentionOutput(Value qkv, int64_t heads, int64_t kv) {
  auto type = ranked(qkv);
  return withLastDim(type, heads * (type.getDimSize(2) / (heads + 2 * kv)));
}

/// QKᵀ.
SmallVector<GemmShape> AttentionProbsOp::getGemms() {
  return {attentionScores(attentionOutput(getQkv(), getHeads(), getKeyValueHeads()),
                          getHeads())};
}

LogicalResult AttentionContextOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &types) {
  auto probs = ranked(adaptor.getProbs()), qkv = ranked(adaptor.getQkv());
  FailureOr<int64_t> hidden =
      checkProbs(loc, "mt.attention_context", probs, qkv, adaptor.getKvHeads());
  if (failed(hidden))
    return failure();
  types.push_back(withLastDim(qkv, *hidden));
  return success();
}

/// P·V.
SmallVector<GemmShape> AttentionContextOp::getGemms() {
  return {attentionValues(ranked(getResult()), ranked(getProbs()).getDimSize(1))};
}

LogicalResult AttentionProbsGradOp::inferReturnTypes(MLIRContext *,
                                                     std::optional<Location> loc,
                                                     Adaptor adaptor,
                                                     SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), probs = ranked(adaptor.getProbs());
  auto qkv = ranked(adaptor.getQkv());
  StringRef op = "mt.attention_probs_grad";
  if (failed(checkProbs(loc, op, probs, qkv, adaptor.getKvHeads())) ||
      failed(expectSameShape(loc, op, "grad", grad, "probs", probs)))
    return failure();
  types.push_back(qkv);
  return success();
}

/// dQ = dS·K and dK = dSᵀ·Q.
SmallVector<GemmShape> AttentionProbsGradOp::getGemms() {
  const int64_t heads = ranked(getProbs()).getDimSize(1);
  GemmShape g = attentionValues(attentionOutput(getQkv(), heads, getKeyValueHeads()), heads);
  return {g, g};
}

LogicalResult AttentionContextGradOp::inferReturnTypes(MLIRContext *,
                                                       std::optional<Location> loc,
                                                       Adaptor adaptor,
                                                       SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), probs = ranked(adaptor.getProbs());
  auto qkv = ranked(adaptor.getQkv());
  StringRef op = "mt.attention_context_grad";
  FailureOr<int64_t> hidden = checkProbs(loc, op, probs, qkv, adaptor.getKvHeads());
  if (failed(hidden) || failed(expectSameShape(loc, op, "grad", grad, "attention of qkv",
                                               withLastDim(qkv, *hidden))))
    return failure();
  types.push_back(probs);
  types.push_back(qkv);
  return success();
}

/// dP = dO·Vᵀ and dV = Pᵀ·dO.
SmallVector<GemmShape> AttentionContextGradOp::getGemms() {
  const int64_t heads = ranked(getProbs()).getDimSize(1);
  auto out = ranked(getGrad());
  return {attentionScores(out, heads), attentionValues(out, heads)};
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput());
  types.push_back(input);
  if (adaptor.getKeepMask())
    types.push_back(RankedTensorType::get(input.getShape(),
                                          IntegerType::get(input.getContext(), 8)));
  return success();
}

LogicalResult DropoutOp::verify() {
  return verifyRandom(*this, getRateAttr(), getStreamAttr());
}

LogicalResult BiasDropoutAddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  StringRef op = "mt.bias_dropout_add";
  auto input = ranked(adaptor.getInput()), residual = ranked(adaptor.getResidual());
  if (failed(expectSameShape(loc, op, "input", input, "residual", residual)) ||
      (adaptor.getBias() &&
       (failed(expectFeatures(loc, op, "input", input)) ||
        failed(expectFeatureVector(loc, op, "bias", ranked(adaptor.getBias()), "input",
                                   input)))))
    return failure();
  types.push_back(meetTypes(input, residual));
  if (adaptor.getKeepMask())
    types.push_back(RankedTensorType::get(input.getShape(),
                                          IntegerType::get(input.getContext(), 8)));
  return success();
}

LogicalResult BiasDropoutAddOp::verify() {
  return verifyRandom(*this, getRateAttr(), getStreamAttr());
}

/// As the unfused ops count them: the bias add's and the add's element each, beside the
/// dropout's result and mask.
int64_t BiasDropoutAddOp::getOtherFlops() {
  auto result = ranked(getResult());
  const int64_t n = result.hasStaticShape() ? result.getNumElements() : 0;
  return defaultOtherFlops(getOperation()) + n * (getBias() ? 2 : 1);
}

LogicalResult DropoutGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad());
  if (Value m = adaptor.getMask()) {
    auto mask = ranked(m);
    if (failed(verifyCompatibleShape(grad.getShape(), mask.getShape())))
      return emitOptionalError(loc, "mt.dropout_grad: grad ", str(grad), " and mask ",
                               str(mask), " differ in shape");
  }
  types.push_back(grad);
  return success();
}

LogicalResult DropoutGradOp::verify() {
  if (!getMask() && !getStreamAttr())
    return emitOpError("needs its mask or the stream to draw it from");
  return verifyRandom(*this, getRateAttr(), getStreamAttr());
}

LogicalResult ParamGradOp::verify() {
  if (getName().empty())
    return emitOpError("parameter name must not be empty");
  return success();
}

LogicalResult mlir::mt::verifyGradAccumulating(Operation *op) {
  auto accumulating = cast<GradAccumulatingOpInterface>(op);
  if (!accumulating.accumulates())
    return success();
  for (OpResult r : op->getResults().drop_front(accumulating.getFirstWeightGradient()))
    if (!r.hasOneUse() || !isa<ParamGradOp>(*r.getUsers().begin()))
      return op->emitOpError("accumulates, so its weight gradient #")
             << r.getResultNumber() << " must be read by one mt.param_grad alone";
  return success();
}

bool mlir::mt::isAccumulated(Value v) {
  auto r = dyn_cast<OpResult>(v);
  auto accumulating = r ? dyn_cast<GradAccumulatingOpInterface>(r.getOwner())
                        : GradAccumulatingOpInterface();
  return accumulating && accumulating.accumulates() &&
         r.getResultNumber() >= accumulating.getFirstWeightGradient();
}

template <typename LayerNormLike> static LogicalResult verifyEpsilon(LayerNormLike op) {
  double epsilon = op.getEpsilon().convertToDouble();
  if (!(epsilon > 0.0))
    return op.emitOpError("epsilon ") << epsilon << " must be positive";
  return success();
}
LogicalResult LayerNormOp::verify() { return verifyEpsilon(*this); }
LogicalResult LayerNormGradOp::verify() { return verifyEpsilon(*this); }
LogicalResult RmsNormOp::verify() { return verifyEpsilon(*this); }
LogicalResult RmsNormGradOp::verify() { return verifyEpsilon(*this); }
LogicalResult QkNormOp::verify() { return verifyEpsilon(*this); }
LogicalResult QkNormGradOp::verify() { return verifyEpsilon(*this); }

/// Logits [..., V] and targets [...] agree on every leading dimension.
static LogicalResult checkLogitRows(std::optional<Location> loc, StringRef op,
                                    RankedTensorType logits, RankedTensorType targets) {
  bool ok = logits.getRank() == targets.getRank() + 1 && targets.getRank() >= 1;
  for (int64_t i = 0; ok && i < targets.getRank(); ++i)
    ok = compatible(logits.getDimSize(i), targets.getDimSize(i));
  if (ok)
    return success();
  return emitOptionalError(loc, op, ": logits ", str(logits), " and targets ", str(targets),
                           " must be [..., V] and [...]");
}

/// Checks logits [..., V] against targets [...] and num_classes.
static LogicalResult checkLogits(std::optional<Location> loc, StringRef op,
                                 RankedTensorType logits, RankedTensorType targets,
                                 std::optional<uint64_t> numClasses) {
  if (failed(checkLogitRows(loc, op, logits, targets)))
    return failure();
  int64_t v = logits.getShape().back();
  if (numClasses && !ShapedType::isDynamic(v) && static_cast<int64_t>(*numClasses) > v)
    return emitOptionalError(loc, op, ": num_classes ", *numClasses, " exceeds the ", v,
                             " logits of ", str(logits));
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  auto logits = ranked(adaptor.getLogits());
  if (failed(checkLogits(loc, "mt.cross_entropy", logits, ranked(adaptor.getTargets()),
                         adaptor.getNumClasses())))
    return failure();
  types.push_back(RankedTensorType::get({}, accumulatorType(logits)));
  return success();
}

LogicalResult BiasAddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput());
  if (failed(expectFeatures(loc, "mt.bias_add", "input", input)) ||
      failed(expectFeatureVector(loc, "mt.bias_add", "bias", ranked(adaptor.getBias()),
                                 "input", input)))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult TpCopyOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getInput().getType());
  return success();
}

/// Rows of a logits tensor: every dimension but the last; 0 when any is dynamic.
static int64_t logitRows(RankedTensorType logits) {
  int64_t n = leadingElements(logits);
  return n ? n : ShapedType::kDynamic;
}

// [cp·B, S/cp, F] -> [B, S, F], or back; S cut into 2·cp whole chunks.
LogicalResult ContextOrderOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = ranked(adaptor.getInput());
  const int64_t cp = adaptor.getContextParallel();
  StringRef op = "mt.context_order";
  if (failed(expectRank(loc, op, "input", input, 3,
                        adaptor.getInverse() ? "[B, S, F]" : "[cp·B, S/cp, F]")))
    return failure();
  SmallVector<int64_t> shape(input.getShape());
  if (!input.hasStaticShape())
    return emitOptionalError(loc, op, ": input ", str(input), " needs a static shape");
  if (adaptor.getInverse()) {
    if (shape[1] % (2 * cp) != 0)
      return emitOptionalError(loc, op, ": the sequence of ", str(input),
                               " is not cut into 2·context_parallel = ", 2 * cp, " chunks");
    shape[0] *= cp;
    shape[1] /= cp;
  } else {
    if (shape[0] % cp != 0 || shape[1] % 2 != 0)
      return emitOptionalError(loc, op, ": input ", str(input), " is not ", cp,
                               " shares of two chunks each, stacked along dimension 0");
    shape[0] /= cp;
    shape[1] *= cp;
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult CrossEntropyStatsOp::inferReturnTypes(MLIRContext *,
                                                    std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    SmallVectorImpl<Type> &types) {
  auto logits = ranked(adaptor.getLogits());
  if (failed(checkLogitRows(loc, "mt.cross_entropy_stats", logits,
                            ranked(adaptor.getTargets()))))
    return failure();
  types.push_back(RankedTensorType::get({3, logitRows(logits)}, accumulatorType(logits)));
  return success();
}

LogicalResult CrossEntropyMergeOp::inferReturnTypes(MLIRContext *,
                                                    std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    SmallVectorImpl<Type> &types) {
  auto stats = ranked(adaptor.getStats()), logits = ranked(adaptor.getLogits());
  StringRef op = "mt.cross_entropy_merge";
  if (failed(checkLogitRows(loc, op, logits, ranked(adaptor.getTargets()))))
    return failure();
  if (stats.getRank() != 2 || ShapedType::isDynamic(stats.getDimSize(0)) ||
      stats.getDimSize(0) % 3 != 0 || !compatible(stats.getDimSize(1), logitRows(logits)) ||
      stats.getElementType() != accumulatorType(logits))
    return emitOptionalError(loc, op, ": stats ", str(stats),
                             " must be [3 x ranks, rows of logits ", str(logits),
                             "] in the loss's type");
  types.push_back(RankedTensorType::get({}, accumulatorType(logits)));
  return success();
}

LogicalResult VocabParallelCrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  auto logits = ranked(adaptor.getLogits());
  StringRef op = "mt.vocab_parallel_cross_entropy_grad";
  if (failed(checkLogitRows(loc, op, logits, ranked(adaptor.getTargets()))))
    return failure();
  auto lossGrad = ranked(adaptor.getLossGrad()), stats = ranked(adaptor.getStats());
  if (lossGrad.getElementType() != accumulatorType(logits) ||
      stats.getElementType() != accumulatorType(logits))
    return emitOptionalError(loc, op, ": loss_grad ", str(lossGrad), " and stats ", str(stats),
                             " must be in the loss's type for logits ", str(logits));
  types.push_back(logits);
  return success();
}

Value VocabParallelCrossEntropyGradOp::getOverwritable(OpResult) { return getLogits(); }

// The statistics and the gradient of the vocabulary-parallel loss always read a shard
// of the vocabulary: the runtime offsets the targets by this rank's block.
LogicalResult CrossEntropyStatsOp::encodeInstruction(PlanInstruction &inst) {
  inst.set("vocab_parallel", UnitAttr::get(getContext()));
  return encodeInstructionByName(*this, inst);
}

LogicalResult VocabParallelCrossEntropyGradOp::encodeInstruction(PlanInstruction &inst) {
  inst.set("vocab_parallel", UnitAttr::get(getContext()));
  return encodeInstructionByName(*this, inst);
}

// Ring attention is its own pair of opcodes: the executor runs them with the
// communicator, a step of the ring at a time.
LogicalResult AttentionOp::encodeInstruction(PlanInstruction &inst) {
  if (failed(encodeInstructionByName(*this, inst)))
    return failure();
  if (getRing())
    inst.opcode = ::mt::plan::Opcode::RingAttention;
  return success();
}

LogicalResult AttentionGradOp::encodeInstruction(PlanInstruction &inst) {
  if (failed(encodeInstructionByName(*this, inst)))
    return failure();
  if (getRing())
    inst.opcode = ::mt::plan::Opcode::RingAttentionGrad;
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops: inference
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), ids = ranked(adaptor.getIds());
  bool ok = grad.getRank() == ids.getRank() + 1;
  for (int64_t i = 0; ok && i < ids.getRank(); ++i)
    ok = compatible(grad.getDimSize(i), ids.getDimSize(i));
  if (!ok)
    return emitOptionalError(loc, "mt.embedding_grad: grad ", str(grad), " and ids ",
                             str(ids), " must be [..., H] and [...]");
  types.push_back(RankedTensorType::get(
      {static_cast<int64_t>(adaptor.getNumEmbeddings()), grad.getShape().back()},
      grad.getElementType()));
  return success();
}

LogicalResult PositionEmbeddingGradOp::inferReturnTypes(MLIRContext *,
                                                        std::optional<Location> loc,
                                                        Adaptor adaptor,
                                                        SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad());
  StringRef op = "mt.position_embedding_grad";
  if (failed(expectRank(loc, op, "grad", grad, 3, "[B, S, H]")))
    return failure();
  int64_t s = grad.getDimSize(1), positions = adaptor.getNumPositions();
  if (!ShapedType::isDynamic(s) && s > positions)
    return emitOptionalError(loc, op, ": sequence length ", s, " of grad ", str(grad),
                             " exceeds num_positions ", positions);
  types.push_back(RankedTensorType::get({positions, grad.getDimSize(2)},
                                        grad.getElementType()));
  return success();
}

/// A normalisation's gradients: dx like the input, then `vectors` feature vectors like
/// the weight (its gradient, and the bias's).
static LogicalResult inferNormGrad(std::optional<Location> loc, StringRef op, Value dy, Value x,
                                   Value w, Value residualGrad, int vectors, bool accumulate,
                                   SmallVectorImpl<Type> &types) {
  auto grad = ranked(dy), input = ranked(x), weight = ranked(w);
  if (failed(expectSameShape(loc, op, "grad", grad, "input", input)) ||
      failed(expectFeatureVector(loc, op, "weight", weight, "input", input)) ||
      (residualGrad && failed(expectSameShape(loc, op, "residual_grad", ranked(residualGrad),
                                              "grad", grad))))
    return failure();
  types.push_back(residualGrad ? meetTypes(meetTypes(grad, input), ranked(residualGrad))
                               : meetTypes(grad, input));
  types.append(vectors, weightGradientType(weight, accumulate));
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  return inferNormGrad(loc, "mt.layer_norm_grad", adaptor.getGrad(), adaptor.getInput(),
                       adaptor.getWeight(), adaptor.getResidualGrad(), 2,
                       adaptor.getAccumulate(), types);
}

unsigned LayerNormGradOp::getFirstWeightGradient() { return 1; }

/// The add of the residual stream's gradient counted as the unfused add counts it.
static int64_t normGradOtherFlops(Operation *op, Value residualGrad) {
  auto residual = residualGrad ? ranked(residualGrad) : RankedTensorType();
  return defaultOtherFlops(op) +
         (residual && residual.hasStaticShape() ? residual.getNumElements() : 0);
}

int64_t LayerNormGradOp::getOtherFlops() {
  return normGradOtherFlops(getOperation(), getResidualGrad());
}

int64_t RmsNormGradOp::getOtherFlops() {
  return normGradOtherFlops(getOperation(), getResidualGrad());
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferNormGrad(loc, "mt.rms_norm_grad", adaptor.getGrad(), adaptor.getInput(),
                       adaptor.getWeight(), adaptor.getResidualGrad(), 1,
                       adaptor.getAccumulate(), types);
}

unsigned RmsNormGradOp::getFirstWeightGradient() { return 1; }

LogicalResult SwigluGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), gate = ranked(adaptor.getGate());
  auto up = ranked(adaptor.getUp());
  StringRef op = "mt.swiglu_grad";
  if (failed(expectSameShape(loc, op, "grad", grad, "gate", gate)) ||
      failed(expectSameShape(loc, op, "gate", gate, "up", up)))
    return failure();
  types.append({meetTypes(grad, gate), meetTypes(grad, up)});
  return success();
}

/// An input gradient: dy [..., N] by W [N, K] is [..., K].
static LogicalResult inferLinearGradInput(std::optional<Location> loc, StringRef op,
                                          Value gradValue, Value weightValue,
                                          SmallVectorImpl<Type> &types) {
  auto grad = ranked(gradValue), weight = ranked(weightValue);
  if (failed(expectFeatures(loc, op, "grad", grad)) ||
      failed(expectRank(loc, op, "weight", weight, 2, "[out, in]")) ||
      failed(expectSameElementType(loc, op, "grad", grad, "weight", weight)))
    return failure();
  if (!compatible(grad.getShape().back(), weight.getDimSize(0)))
    return emitOptionalError(loc, op, ": grad ", str(grad), " has ", grad.getShape().back(),
                             " features but weight ", str(weight), " produces ",
                             weight.getDimSize(0));
  types.push_back(withLastDim(grad, weight.getDimSize(1)));
  return success();
}

/// dX = dY·W: rows by the input features, over the output features.
static SmallVector<GemmShape> linearGradInputGemms(Value grad, Value weight) {
  auto w = ranked(weight);
  return {{1, leadingElements(ranked(grad)), w.getDimSize(1), w.getDimSize(0)}};
}

LogicalResult LinearGradInputOp::inferReturnTypes(MLIRContext *,
                                                  std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &types) {
  return inferLinearGradInput(loc, "mt.linear_grad_input", adaptor.getGrad(),
                              adaptor.getWeight(), types);
}

SmallVector<GemmShape> LinearGradInputOp::getGemms() {
  return linearGradInputGemms(getGrad(), getWeight());
}

/// dy·W, of the shape of the pre-activation it multiplies by GELU's derivative.
LogicalResult LinearGradInputGeluOp::inferReturnTypes(MLIRContext *,
                                                      std::optional<Location> loc,
                                                      Adaptor adaptor,
                                                      SmallVectorImpl<Type> &types) {
  StringRef op = "mt.linear_grad_input_gelu";
  if (failed(inferLinearGradInput(loc, op, adaptor.getGrad(), adaptor.getWeight(), types)))
    return failure();
  auto product = cast<RankedTensorType>(types.back()), pre = ranked(adaptor.getPre());
  if (failed(expectSameShape(loc, op, "dy·W", product, "pre", pre)))
    return failure();
  types.back() = meetTypes(product, pre);
  return success();
}

SmallVector<GemmShape> LinearGradInputGeluOp::getGemms() {
  return linearGradInputGemms(getGrad(), getWeight());
}

/// The product's epilogue and GELU's gradient, as the unfused pair counts them.
int64_t LinearGradInputGeluOp::getOtherFlops() { return 2 * defaultOtherFlops(getOperation()); }

/// dW = dyᵀ·x's type: dy [..., N] and x [..., K] agree in all but the last dimension.
static LogicalResult inferWeightGradient(std::optional<Location> loc, StringRef op,
                                         RankedTensorType grad, RankedTensorType input,
                                         bool accumulate, SmallVectorImpl<Type> &types) {
  if (failed(expectSameElementType(loc, op, "grad", grad, "input", input)))
    return failure();
  bool ok = grad.getRank() == input.getRank() && grad.getRank() >= 1;
  for (int64_t i = 0; ok && i + 1 < grad.getRank(); ++i)
    ok = compatible(grad.getDimSize(i), input.getDimSize(i));
  if (!ok)
    return emitOptionalError(loc, op, ": grad ", str(grad), " and input ", str(input),
                             " must agree in all but the last dimension");
  types.push_back(
      weightGradientType(RankedTensorType::get({grad.getShape().back(), input.getShape().back()},
                                               grad.getElementType()),
                         accumulate));
  return success();
}

/// db = dy summed over all but the last dimension's type.
static LogicalResult inferBiasGradient(std::optional<Location> loc, StringRef op,
                                       RankedTensorType grad, bool accumulate,
                                       SmallVectorImpl<Type> &types) {
  if (failed(expectFeatures(loc, op, "grad", grad)))
    return failure();
  types.push_back(weightGradientType(
      RankedTensorType::get({grad.getShape().back()}, grad.getElementType()), accumulate));
  return success();
}

/// dW = dyᵀ·x: output by input features, over the rows.
static SmallVector<GemmShape> weightGradientGemms(Value gradValue, Value inputValue) {
  auto grad = ranked(gradValue), input = ranked(inputValue);
  return {{1, grad.getShape().back(), input.getShape().back(), leadingElements(grad)}};
}

LogicalResult LinearGradWeightOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferWeightGradient(loc, "mt.linear_grad_weight", ranked(adaptor.getGrad()),
                             ranked(adaptor.getInput()), adaptor.getAccumulate(), types);
}

SmallVector<GemmShape> LinearGradWeightOp::getGemms() {
  return weightGradientGemms(getGrad(), getInput());
}

LogicalResult BiasGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferBiasGradient(loc, "mt.bias_grad", ranked(adaptor.getGrad()), adaptor.getAccumulate(),
                           types);
}

LogicalResult LinearGradWeightBiasOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                       Adaptor adaptor,
                                                       SmallVectorImpl<Type> &types) {
  const StringRef op = "mt.linear_grad_weight_bias";
  auto grad = ranked(adaptor.getGrad());
  if (failed(inferWeightGradient(loc, op, grad, ranked(adaptor.getInput()), adaptor.getAccumulate(),
                                 types)))
    return failure();
  return inferBiasGradient(loc, op, grad, adaptor.getAccumulate(), types);
}

SmallVector<GemmShape> LinearGradWeightBiasOp::getGemms() {
  return weightGradientGemms(getGrad(), getInput());
}

/// An activation's gradient: dy and x of one shape, dx of it too.
static LogicalResult inferActivationGrad(std::optional<Location> loc, StringRef op, Value grad,
                                         Value input, SmallVectorImpl<Type> &types) {
  if (failed(expectSameShape(loc, op, "grad", ranked(grad), "input", ranked(input))))
    return failure();
  types.push_back(meetTypes(ranked(grad), ranked(input)));
  return success();
}

LogicalResult GeluGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferActivationGrad(loc, "mt.gelu_grad", adaptor.getGrad(), adaptor.getInput(), types);
}

LogicalResult SiluGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferActivationGrad(loc, "mt.silu_grad", adaptor.getGrad(), adaptor.getInput(), types);
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto grad = ranked(adaptor.getGrad()), qkv = ranked(adaptor.getQkv());
  auto output = ranked(adaptor.getOutput());
  StringRef op = "mt.attention_grad";
  FailureOr<int64_t> hidden =
      attentionHidden(loc, op, qkv, adaptor.getHeads(), adaptor.getKvHeads());
  if (failed(hidden))
    return failure();
  FailureOr<RankedTensorType> expectedOut =
      attentionResultType(loc, op, qkv, *hidden, adaptor.getContextParallel(), adaptor.getRing());
  if (failed(expectedOut) || failed(expectSameShape(loc, op, "grad", grad, "output", output)) ||
      failed(expectSameShape(loc, op, "output", output, "attention of qkv", *expectedOut)))
    return failure();
  if (Value statsValue = adaptor.getStats()) {
    auto stats = ranked(statsValue);
    auto expected = attentionStatsType(*expectedOut, adaptor.getHeads());
    if (!stats || stats.getShape() != expected.getShape() ||
        stats.getElementType() != expected.getElementType())
      return emitOptionalError(loc, op, ": stats ", str(stats), " must be ", str(expected),
                               ", the rows' statistics of attention over qkv ", str(qkv));
  }
  types.push_back(qkv);
  return success();
}

/// dV, dP, dQ and dK: twice the forward's GEMM work.
SmallVector<GemmShape> AttentionGradOp::getGemms() {
  auto qkv = ranked(getQkv()), out = ranked(getOutput());
  const int64_t keys = attentionKeys(qkv, getContextParallel(), getRing());
  GemmShape scores = attentionScores(keys, out, getHeads()),
            values = attentionValues(keys, out, getHeads());
  return {scores, values, values, values};
}

/// dlogits of `logits` (their type) from a scalar loss gradient in the loss's type.
static LogicalResult inferCrossEntropyGrad(std::optional<Location> loc, StringRef op,
                                           Value lossGradValue, Value logitsValue,
                                           Value targets, std::optional<uint64_t> numClasses,
                                           SmallVectorImpl<Type> &types) {
  auto lossGrad = ranked(lossGradValue), logits = ranked(logitsValue);
  if (lossGrad.getRank() != 0)
    return emitOptionalError(loc, op, ": loss_grad ", str(lossGrad), " must be a scalar");
  if (lossGrad.getElementType() != accumulatorType(logits))
    return emitOptionalError(loc, op, ": loss_grad ", str(lossGrad),
                             " must be in the loss's type for logits ", str(logits));
  if (failed(checkLogits(loc, op, logits, ranked(targets), numClasses)))
    return failure();
  types.push_back(logits);
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *,
                                                   std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &types) {
  return inferCrossEntropyGrad(loc, "mt.cross_entropy_grad", adaptor.getLossGrad(),
                               adaptor.getLogits(), adaptor.getTargets(),
                               adaptor.getNumClasses(), types);
}

Value CrossEntropyGradOp::getOverwritable(OpResult) { return getLogits(); }

/// The loss and the gradient of the pair it fuses: a scalar and the logits' type.
LogicalResult CrossEntropyWithGradOp::inferReturnTypes(MLIRContext *,
                                                       std::optional<Location> loc,
                                                       Adaptor adaptor,
                                                       SmallVectorImpl<Type> &types) {
  if (failed(inferCrossEntropyGrad(loc, "mt.cross_entropy_with_grad", adaptor.getLossGrad(),
                                   adaptor.getLogits(), adaptor.getTargets(),
                                   adaptor.getNumClasses(), types)))
    return failure();
  types.insert(types.begin(),
               RankedTensorType::get({}, accumulatorType(ranked(adaptor.getLogits()))));
  return success();
}

/// Each tensor once, and the logits twice: once for the statistics, once for the gradient.
int64_t CrossEntropyWithGradOp::getBytesMoved() {
  return defaultBytesMoved(getOperation()) + tensorBytes(getLogits().getType());
}

Value CrossEntropyWithGradOp::getOverwritable(OpResult result) {
  return result == getDlogits() ? getLogits() : Value();
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian rules
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<Value>> EmbeddingOp::buildGradients(OpBuilder &b,
                                                         ValueRange resultGrads) {
  Value table = EmbeddingGradOp::create(
      b, getLoc(), resultGrads[0], getIds(),
      b.getI64IntegerAttr(ranked(getTable()).getDimSize(0)), getVocabParallelAttr());
  return SmallVector<Value>{table, Value()};
}

FailureOr<SmallVector<Value>> PositionEmbeddingOp::buildGradients(OpBuilder &b,
                                                                 ValueRange resultGrads) {
  Value table = PositionEmbeddingGradOp::create(
      b, getLoc(), resultGrads[0], b.getI64IntegerAttr(ranked(getTable()).getDimSize(0)),
      getSequenceParallelAttr(), getContextParallelAttr());
  return SmallVector<Value>{resultGrads[0], table};
}

FailureOr<SmallVector<Value>> BiasAddOp::buildGradients(OpBuilder &b,
                                                       ValueRange resultGrads) {
  return SmallVector<Value>{resultGrads[0],
                            BiasGradOp::create(b, getLoc(), resultGrads[0]).getResult()};
}

FailureOr<SmallVector<Value>> CrossEntropyMergeOp::buildGradients(OpBuilder &b,
                                                                 ValueRange resultGrads) {
  Value logits = VocabParallelCrossEntropyGradOp::create(
      b, getLoc(), resultGrads[0], getLogits(), getTargets(), getStats(),
      getNumClassesAttr());
  return SmallVector<Value>{Value(), logits, Value()};
}

FailureOr<SmallVector<Value>> LayerNormOp::buildGradients(OpBuilder &b,
                                                         ValueRange resultGrads) {
  auto grad = LayerNormGradOp::create(b, getLoc(), resultGrads[0], getInput(), getWeight(),
                                      /*residual_grad=*/Value(), getEpsilonAttr(),
                                      /*accumulate=*/nullptr);
  return SmallVector<Value>(grad->getResults());
}

FailureOr<SmallVector<Value>> RmsNormOp::buildGradients(OpBuilder &b,
                                                       ValueRange resultGrads) {
  auto grad = RmsNormGradOp::create(b, getLoc(), resultGrads[0], getInput(), getWeight(),
                                    /*residual_grad=*/Value(), getEpsilonAttr(),
                                    /*accumulate=*/nullptr);
  return SmallVector<Value>(grad->getResults());
}

FailureOr<SmallVector<Value>> SwigluOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  auto grad = SwigluGradOp::create(b, getLoc(), resultGrads[0], getGate(), getUp());
  return SmallVector<Value>(grad->getResults());
}

FailureOr<SmallVector<Value>> QkNormOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  auto grad = QkNormGradOp::create(b, getLoc(), resultGrads[0], getQkv(), getQueryWeight(),
                                   getKeyWeight(), getHeadsAttr(), getKvHeadsAttr(),
                                   getEpsilonAttr(), /*accumulate=*/nullptr);
  return SmallVector<Value>(grad->getResults());
}

// A rotation's inverse is its transpose: the gradient turns back.
FailureOr<SmallVector<Value>> RotaryOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  auto grad =
      RotaryOp::create(b, getLoc(), resultGrads[0], getHeadsAttr(), getKvHeadsAttr(),
                       getThetaAttr(), getScalingFactorAttr(), getLowFreqFactorAttr(),
                       getHighFreqFactorAttr(), getOriginalPositionsAttr(),
                       getInverse() ? UnitAttr() : b.getUnitAttr(), getContextParallelAttr());
  return SmallVector<Value>{grad.getResult()};
}

FailureOr<SmallVector<Value>> LinearOp::buildGradients(OpBuilder &b,
                                                      ValueRange resultGrads) {
  Value dy = resultGrads[0];
  SmallVector<Value> grads{LinearGradInputOp::create(b, getLoc(), dy, getWeight()),
                           LinearGradWeightOp::create(b, getLoc(), dy, getInput())};
  if (getBias())
    grads.push_back(BiasGradOp::create(b, getLoc(), dy));
  return grads;
}

FailureOr<SmallVector<Value>> AddOp::buildGradients(OpBuilder &, ValueRange resultGrads) {
  return SmallVector<Value>{resultGrads[0], resultGrads[0]};
}

/// dx = GradOp(dy, x) of activation `op`, with `op`'s attributes: the gradient of an
/// activation reads them as its value does (GELU's `approximate`).
template <typename GradOp>
FailureOr<SmallVector<Value>> activationGradient(OpBuilder &b, Operation *op, Value dy) {
  SmallVector<NamedAttribute> attributes;
  for (StringAttr name : op->getName().getAttributeNames()) {
    std::optional<Attribute> value = op->getInherentAttr(name);
    if (!value || !*value)
      continue;
    if (!llvm::is_contained(GradOp::getAttributeNames(), name.getValue()))
      return op->emitOpError("its gradient ")
             << GradOp::getOperationName() << " has no attribute '" << name.getValue() << "'";
    attributes.emplace_back(name, *value);
  }
  return SmallVector<Value>{
      GradOp::create(b, op->getLoc(), ValueRange{dy, op->getOperand(0)}, attributes)};
}

FailureOr<SmallVector<Value>> GeluOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  return activationGradient<GeluGradOp>(b, *this, resultGrads[0]);
}

FailureOr<SmallVector<Value>> SiluOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  return activationGradient<SiluGradOp>(b, *this, resultGrads[0]);
}

FailureOr<SmallVector<Value>> AttentionOp::buildGradients(OpBuilder &b,
                                                         ValueRange resultGrads) {
  return SmallVector<Value>{AttentionGradOp::create(
      b, getLoc(), resultGrads[0], getQkv(), getResult(), getStats(), getHeadsAttr(),
      getKvHeadsAttr(), getCausalAttr(), getDropoutAttr(), getStreamAttr(), getHeadParallelAttr(),
      getContextParallelAttr(), getRingAttr(), getWindowAttr())};
}

// A permutation's gradient is its inverse.
FailureOr<SmallVector<Value>> ContextOrderOp::buildGradients(OpBuilder &b, ValueRange resultGrads) {
  return SmallVector<Value>{ContextOrderOp::create(b, getLoc(), resultGrads[0],
                                                   getContextParallelAttr(),
                                                   getInverse() ? UnitAttr() : b.getUnitAttr())};
}

FailureOr<SmallVector<Value>> AttentionProbsOp::buildGradients(OpBuilder &b,
                                                              ValueRange resultGrads) {
  return SmallVector<Value>{
      AttentionProbsGradOp::create(b, getLoc(), resultGrads[0], getResult(), getQkv(),
                                   getKvHeadsAttr())};
}

FailureOr<SmallVector<Value>> AttentionContextOp::buildGradients(OpBuilder &b,
                                                                ValueRange resultGrads) {
  auto grads = AttentionContextGradOp::create(b, getLoc(), resultGrads[0], getProbs(), getQkv(),
                                              getKvHeadsAttr());
  return SmallVector<Value>{grads.getProbsGrad(), grads.getQkvGrad()};
}

FailureOr<SmallVector<Value>> DropoutOp::buildGradients(OpBuilder &b,
                                                       ValueRange resultGrads) {
  if (!getMask())
    return emitOpError("keeps no mask to differentiate with (mt-autodiff asks for one)");
  return SmallVector<Value>{DropoutGradOp::create(b, getLoc(), resultGrads[0], getMask(),
                                                  getRateAttr(), IntegerAttr(), UnitAttr(),
                                                  UnitAttr(), IntegerAttr())};
}

FailureOr<SmallVector<Value>> CrossEntropyOp::buildGradients(OpBuilder &b,
                                                            ValueRange resultGrads) {
  Value logits = CrossEntropyGradOp::create(b, getLoc(), resultGrads[0], getLogits(),
                                            getTargets(), getNumClassesAttr());
  return SmallVector<Value>{logits, Value()};
}

#define GET_OP_CLASSES
#include "dialects/mt/MtOps.cpp.inc"
