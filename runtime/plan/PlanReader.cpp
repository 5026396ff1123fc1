#include "plan/PlanReader.h"
#include "core/InputFile.h"
#include "plan/Opcodes.h"
#include "plan/PlanFormat.h"
#include "plan/Schedule.h"
#include "plan/SchemaFields.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <tuple>
#include <iterator>
#include <sstream>

namespace mt {

namespace {

/// Elements × element size, or 0 when a dimension is not positive or it overflows.
uint64_t shapeBytes(const flatbuffers::Vector<int64_t> *shape, plan::DType dtype) {
  if (!shape)
    return 0;
  uint64_t bytes = dtypeBytes(dtype);
  for (int64_t d : *shape) {
    if (d <= 0 || bytes > (uint64_t{1} << 62) / static_cast<uint64_t>(d))
      return 0;
    bytes *= static_cast<uint64_t>(d);
  }
  return bytes;
}

bool sameShape(const flatbuffers::Vector<int64_t> *a, const flatbuffers::Vector<int64_t> *b) {
  if (!a || !b || a->size() != b->size())
    return false;
  for (flatbuffers::uoffset_t i = 0; i < a->size(); ++i)
    if (a->Get(i) != b->Get(i))
      return false;
  return true;
}

/// A buffer's shape as the kernels will see it.
struct Dims {
  std::vector<int64_t> d;
  plan::DType dtype;
  explicit Dims(const plan::Buffer &b) : d(b.shape()->begin(), b.shape()->end()), dtype(b.dtype()) {}
  int64_t rank() const { return static_cast<int64_t>(d.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t x : d)
      n *= x;
    return n;
  }
  int64_t last() const { return d.empty() ? 1 : d.back(); }
  int64_t rows() const { return numel() / last(); }
  bool isIndex() const { return dtype == plan::DType::I32 || dtype == plan::DType::I64; }
};

/// What an instruction's operand checks see.
struct Operands {
  const plan::Instruction &inst;
  const std::vector<Dims> &in, &out;
  int64_t tp;         // the tensor-parallel group's size
  int64_t cp;         // the context-parallel group's size
  int64_t ep;         // the expert-parallel group's size
  plan::DType accumulator; // the plan's accumulator type (losses, softmax statistics)
};

/// How many of an instruction's rows hold the rows of its tensor of the whole sequence:
/// the context-parallel group's size where the tensor is one rank's share of it (not for
/// ring attention, whose qkv is a share too).
int64_t contextParts(const plan::Instruction &inst) {
  const bool ring = inst.opcode() == plan::Opcode::RingAttention ||
                    inst.opcode() == plan::Opcode::RingAttentionGrad;
  return inst.context_parallel() > 0 && !ring ? inst.context_parallel() : 1;
}

bool same(const Dims &a, const Dims &b) { return a.numel() == b.numel() && a.dtype == b.dtype; }

/// A fused QKV [B, S, (heads + 2·kv)·d] of `heads` query heads and the instruction's
/// kv_heads key/value heads (one per head without it), laid out by key/value group.
/// The instruction's key/value heads: kv_heads, or one per query head without it.
int64_t kvHeads(const plan::Instruction &inst, int64_t heads) {
  return inst.kv_heads() != 0 ? inst.kv_heads() : heads;
}
bool qkvOf(const Dims &qkv, int64_t heads, const plan::Instruction &inst) {
  const int64_t kv = kvHeads(inst, heads);
  return heads > 0 && kv > 0 && heads % kv == 0 && qkv.rank() == 3 &&
         qkv.d[2] % (heads + 2 * kv) == 0;
}
/// Probabilities [B, heads, S, S] of a fused QKV.
bool probsOf(const Dims &probs, const Dims &qkv, const plan::Instruction &inst) {
  return probs.rank() == 4 && qkvOf(qkv, probs.d[1], inst) && probs.d[0] == qkv.d[0] &&
         probs.d[2] == qkv.d[1] && probs.d[3] == qkv.d[1];
}
/// Attention's output [B, S, heads·d] of a fused QKV (qkvOf holds); under context
/// parallelism, of this rank's share of its sequence.
bool contextOf(const Dims &o, const Dims &qkv, int64_t heads, const plan::Instruction &inst) {
  return o.rank() == 3 && o.d[0] == qkv.d[0] && o.d[1] * contextParts(inst) == qkv.d[1] &&
         o.d[2] == heads * qkv.d[2] / (heads + 2 * kvHeads(inst, heads));
}
bool rateOk(const plan::Instruction &inst) { return inst.rate() >= 0 && inst.rate() < 1; }

// The shape rules of Opcodes.def, each checked the way its kernels index the operands:
// a plan that passes can be executed without reading or writing outside a buffer. Each
// returns why the operands disagree, or "".

std::string checkNone(const Operands &) { return ""; }

std::string checkPointwise(const Operands &o) {
  for (const std::vector<Dims> *list : {&o.in, &o.out})
    for (const Dims &t : *list)
      if (!same(t, o.in[0]))
        return "operands of a pointwise op differ in size or type";
  return "";
}

std::string checkEmbedding(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[0].rank() == 2 && out[0].numel() == in[1].numel() * in[0].d[1]
             ? ""
             : "embedding operands disagree";
}

std::string checkEmbeddingGrad(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return out[0].rank() == 2 && in[0].last() == out[0].d[1] && in[0].rows() == in[1].numel()
             ? ""
             : "embedding gradient operands disagree";
}

// PositionEmbedding (x, table) -> out and PositionEmbeddingGrad (dy) -> dtable.
std::string checkPositionEmbedding(const Operands &o) {
  const bool forward = o.inst.opcode() == plan::Opcode::PositionEmbedding;
  const Dims &x = o.in[0], &table = forward ? o.in[1] : o.out[0];
  int64_t sequence =
      x.rank() == 3 ? x.d[1] * (o.inst.sequence_parallel() ? o.tp : 1) * contextParts(o.inst) : 0;
  return x.rank() == 3 && table.rank() == 2 && table.d[1] == x.d[2] && sequence <= table.d[0] &&
                 (!forward || same(o.out[0], x))
             ? ""
             : "position embedding operands disagree";
}

/// A norm's weight gradients, the outputs from `first` on: `n` elements each, of the
/// input's type, or the accumulator's where the instruction adds them into a parameter's
/// gradient (its kernels write them so: another type would be read or written past its
/// end).
bool weightGradients(const Operands &o, size_t first, int64_t n, plan::DType input) {
  const plan::DType type = o.inst.accumulate() ? o.accumulator : input;
  for (size_t i = first; i < o.out.size(); ++i)
    if (o.out[i].numel() != n || o.out[i].dtype != type)
      return false;
  return true;
}

// LayerNorm (x, w, b) -> y and RmsNorm (x, w) -> y, and their gradients
// (dy, x, w[, residual dx]) -> (dx, dw[, db]); every weight of x's type.
std::string checkNorm(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  const plan::Opcode opcode = o.inst.opcode();
  const bool forward = opcode == plan::Opcode::LayerNorm || opcode == plan::Opcode::RmsNorm;
  const std::string name = plan::EnumNameOpcode(opcode);
  const Dims &x = forward ? in[0] : in[1], &w = forward ? in[1] : in[2];
  if (!(o.inst.epsilon() > 0) || w.numel() != x.last() || w.dtype != x.dtype || !same(out[0], x))
    return name + " operands disagree";
  if (forward)
    return in.size() < 3 || (in[2].numel() == x.last() && in[2].dtype == x.dtype)
               ? ""
               : name + " bias disagrees";
  // A gradient's fourth operand, the residual stream's gradient, is added to dx.
  const bool ok = same(in[0], x) && (in.size() < 4 || same(in[3], out[0])) &&
                  weightGradients(o, 1, x.last(), x.dtype);
  return ok ? "" : name + " operands disagree";
}

// Rotary qkv [B, S, (heads + 2·kv_heads)·d] -> the same, d even; frequencies that are
// finite.
std::string checkRotary(const Operands &o) {
  const plan::Instruction &inst = o.inst;
  const Dims &qkv = o.in[0];
  const int64_t heads = inst.heads(), kv = kvHeads(inst, heads);
  if (!(qkvOf(qkv, heads, inst) && qkv.d[2] / (heads + 2 * kv) % 2 == 0 && same(o.out[0], qkv)))
    return "rotary operands disagree";
  if (!(inst.theta() > 0) ||
      (inst.scaling_factor() > 0 &&
       !(inst.low_freq_factor() > 0 && inst.high_freq_factor() > inst.low_freq_factor() &&
         inst.original_positions() > 0)))
    return "rotary frequencies are not well defined";
  return "";
}

// QkNorm (qkv, wq, wk) -> qkv and QkNormGrad (dy, qkv, wq, wk) -> (dqkv, dwq, dwk): qkv
// [B, S, (heads + 2·kv_heads)·d], each weight and its gradient [d].
std::string checkQkNorm(const Operands &o) {
  const plan::Instruction &inst = o.inst;
  const bool forward = inst.opcode() == plan::Opcode::QkNorm;
  const Dims &qkv = o.in[forward ? 0 : 1];
  const int64_t heads = inst.heads();
  if (!(inst.epsilon() > 0) || !qkvOf(qkv, heads, inst) || !same(o.out[0], qkv) ||
      (!forward && !same(o.in[0], qkv)))
    return "qk_norm operands disagree";
  const int64_t d = qkv.d[2] / (heads + 2 * kvHeads(inst, heads));
  for (size_t i = forward ? 1 : 2; i < o.in.size(); ++i)
    if (o.in[i].numel() != d || o.in[i].dtype != qkv.dtype)
      return "qk_norm weights are not one head of qkv";
  if (!weightGradients(o, 1, d, qkv.dtype))
    return "qk_norm weight gradients are not one head of qkv";
  return "";
}

// Linear (x, W[, b]) -> y and LinearGelu (x, W[, b]) -> (pre, y), pre shaped as y.
std::string checkLinear(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[1].rank() == 2 && in[0].last() == in[1].d[1] && out[0].rows() == in[0].rows() &&
                 out[0].last() == in[1].d[0] &&
                 (in.size() == 2 || in[2].numel() == in[1].d[0]) &&
                 (out.size() == 1 || same(out[1], out[0]))
             ? ""
             : "linear operands disagree";
}

// LinearGradInput (dy, W) -> dx and LinearGradInputGelu (dy, W, pre) -> dx, pre shaped as
// dx.
std::string checkLinearGradInput(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[1].rank() == 2 && in[0].last() == in[1].d[0] && out[0].rows() == in[0].rows() &&
                 out[0].last() == in[1].d[1] && (in.size() == 2 || same(in[2], out[0]))
             ? ""
             : "linear input-gradient operands disagree";
}

std::string checkLinearGradWeight(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return out[0].rank() == 2 && in[0].rows() == in[1].rows() && out[0].d[0] == in[0].last() &&
                 out[0].d[1] == in[1].last()
             ? ""
             : "linear weight-gradient operands disagree";
}

std::string checkBiasGrad(const Operands &o) {
  return o.out[0].numel() == o.in[0].last() ? "" : "bias gradient disagrees";
}

// LinearGradWeightBias (dy, x) -> (dW, db): LinearGradWeight's rule and BiasGrad's, db
// a vector of dW's type.
std::string checkLinearGradWeightBias(const Operands &o) {
  if (std::string error = checkLinearGradWeight(o); !error.empty())
    return error;
  return o.out[1].rank() == 1 && o.out[1].numel() == o.in[0].last() &&
                 o.out[1].dtype == o.out[0].dtype
             ? ""
             : "bias gradient disagrees";
}

std::string checkBiasAdd(const Operands &o) {
  return o.in[1].numel() == o.in[0].last() && o.in[1].dtype == o.in[0].dtype &&
                 same(o.out[0], o.in[0])
             ? ""
             : "bias add operands disagree";
}

std::string checkDropout(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return rateOk(o.inst) && o.inst.stream() >= 0 && same(out[0], in[0]) &&
                 !(o.inst.sequence_parallel() && in[0].rank() < 2) &&
                 (out.size() == 1 || out[1].numel() == in[0].numel())
             ? ""
             : "dropout operands or rate disagree";
}

// (x, residual[, bias]) -> (sum[, mask]): a dropout's rule, with the residual as x and the
// bias a vector of x's features.
std::string checkBiasDropoutAdd(const Operands &o) {
  const std::vector<Dims> &in = o.in;
  const bool bias = in.size() == 3;
  return checkDropout(o).empty() && same(in[1], in[0]) &&
                 (!bias || (in[2].numel() == in[0].last() && in[2].dtype == in[0].dtype))
             ? ""
             : "bias-dropout-add operands or rate disagree";
}

// With the mask, or drawing it again from `stream`.
std::string checkDropoutGrad(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return rateOk(o.inst) && same(out[0], in[0]) &&
                 (in.size() == 2 ? in[1].numel() == in[0].numel()
                                 : o.inst.stream() >= 0 &&
                                       !(o.inst.sequence_parallel() && in[0].rank() < 2))
             ? ""
             : "dropout gradient operands or rate disagree";
}

/// A sliding window masks under the causal mask only (mt.attention's verifier).
std::string checkWindow(const plan::Instruction &inst) {
  if (inst.window() < 0)
    return cat("attention window ", inst.window(), " is negative");
  return inst.window() > 0 && !inst.causal() ? "an attention window without the causal mask" : "";
}

std::string checkAttentionProbs(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  if (std::string window = checkWindow(o.inst); !window.empty())
    return window;
  return probsOf(out[0], in[0], o.inst) && out[0].d[1] == o.inst.heads() &&
                 out[0].dtype == in[0].dtype
             ? ""
             : "attention probabilities operands or heads disagree";
}

std::string checkAttentionContext(const Operands &o) {
  const std::vector<Dims> &in = o.in;
  return probsOf(in[0], in[1], o.inst) && contextOf(o.out[0], in[1], in[0].d[1], o.inst)
             ? ""
             : "attention context operands disagree";
}

std::string checkAttentionProbsGrad(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return probsOf(in[1], in[2], o.inst) && same(in[0], in[1]) && same(out[0], in[2])
             ? ""
             : "attention probabilities gradient operands disagree";
}

std::string checkAttentionContextGrad(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return probsOf(in[1], in[2], o.inst) && contextOf(in[0], in[2], in[1].d[1], o.inst) &&
                 same(out[0], in[1]) &&
                 same(out[1], in[2])
             ? ""
             : "attention context gradient operands disagree";
}

// Attention (qkv) -> (out[, stats]) and AttentionGrad (dy, qkv, out[, stats]) -> dqkv;
// stats [B, heads, S] in the accumulator type.
std::string checkAttention(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  const plan::Instruction &inst = o.inst;
  const bool forward =
      inst.opcode() == plan::Opcode::Attention || inst.opcode() == plan::Opcode::RingAttention;
  const bool ring = inst.opcode() == plan::Opcode::RingAttention ||
                    inst.opcode() == plan::Opcode::RingAttentionGrad;
  if (ring && inst.context_parallel() < 2)
    return "ring attention without a context-parallel group";
  if (std::string window = checkWindow(inst); !window.empty())
    return window;
  // The executor adds a step's share in flight to the operands, which backends run as
  // they are: in f32 or f64, every operand of one type.
  if (ring) {
    for (const std::vector<Dims> *list : {&in, &out})
      for (const Dims &t : *list)
        if (t.dtype != o.accumulator)
          return "ring attention runs in fp32 or fp64, every operand of the plan's precision";
  }
  const Dims &qkv = forward ? in[0] : in[1], &y = forward ? out[0] : in[2];
  if (!qkvOf(qkv, inst.heads(), inst) || !contextOf(y, qkv, inst.heads(), inst) ||
      !rateOk(inst) || (inst.rate() > 0 && inst.stream() < 0))
    return "attention operands or heads disagree";
  const Dims *stats = forward ? (out.size() > 1 ? &out[1] : nullptr)
                              : (in.size() > 3 ? &in[3] : nullptr);
  if (stats && (stats->d != std::vector<int64_t>{qkv.d[0], inst.heads(), y.d[1]} ||
                stats->dtype != o.accumulator))
    return "attention statistics are not [batch, heads, sequence] in the accumulator type";
  return forward || (same(in[0], y) && same(out[0], qkv)) ? ""
                                                          : "attention gradient operands disagree";
}

// ContextOrder [cp·B, S/cp, F] -> [B, S, F], or back (`inverse`).
std::string checkContextOrder(const Operands &o) {
  const bool inverse = o.inst.inverse();
  const Dims &shares = inverse ? o.out[0] : o.in[0], &whole = inverse ? o.in[0] : o.out[0];
  const int64_t cp = o.inst.context_parallel();
  return cp > 0 && shares.rank() == 3 && whole.rank() == 3 && shares.dtype == whole.dtype &&
                 shares.d[0] == cp * whole.d[0] && shares.d[1] * cp == whole.d[1] &&
                 shares.d[2] == whole.d[2] && whole.d[1] % (2 * cp) == 0
             ? ""
             : "context order operands disagree";
}

// CrossEntropy (logits, targets) -> loss, CrossEntropyGrad (dloss, logits, targets) ->
// dlogits, and CrossEntropyWithGrad (dloss, logits, targets) -> (loss, dlogits).
std::string checkCrossEntropy(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  const plan::Opcode opcode = o.inst.opcode();
  const bool forward = opcode == plan::Opcode::CrossEntropy;
  const Dims &logits = forward ? in[0] : in[1], &targets = forward ? in[1] : in[2];
  const bool results =
      opcode == plan::Opcode::CrossEntropyGrad ? same(out[0], logits)
      : forward                                ? out[0].numel() == 1
                                               : out[0].numel() == 1 && same(out[1], logits);
  return logits.rows() == targets.numel() && o.inst.num_classes() >= 0 &&
                 o.inst.num_classes() <= logits.last() && (forward || in[0].numel() == 1) &&
                 results
             ? ""
             : "cross-entropy operands disagree";
}

// The statistics are [3, rows] per rank and [3·tp, rows] gathered: the kernels index
// them by that shape.
std::string checkCrossEntropyStats(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[0].rows() == in[1].numel() && out[0].d == std::vector<int64_t>{3, in[0].rows()} &&
                 o.inst.num_classes() >= 0 && o.inst.num_classes() <= in[0].last() * o.tp
             ? ""
             : "cross-entropy statistics operands disagree";
}

std::string checkCrossEntropyMerge(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[0].d == std::vector<int64_t>{3 * o.tp, in[1].rows()} &&
                 in[1].rows() == in[2].numel() && out[0].numel() == 1
             ? ""
             : "cross-entropy merge operands disagree";
}

std::string checkVocabParallelCrossEntropyGrad(const Operands &o) {
  const std::vector<Dims> &in = o.in, &out = o.out;
  return in[0].numel() == 1 && in[1].rows() == in[2].numel() &&
                 in[3].d == std::vector<int64_t>{3 * o.tp, in[1].rows()} &&
                 same(out[0], in[1]) && o.inst.num_classes() >= 0 &&
                 o.inst.num_classes() <= in[1].last() * o.tp
             ? ""
             : "vocabulary-parallel cross-entropy gradient operands disagree";
}

std::string checkParamGrad(const Operands &o) {
  return o.in[0].d == o.out[0].d ? "" : "gradient does not match its parameter";
}

// AllGather (block) -> whole and ReduceScatter (whole) -> block, along `axis`.
std::string checkBlocks(const Operands &o) {
  const bool gather = o.inst.opcode() == plan::Opcode::AllGather;
  const Dims &block = gather ? o.in[0] : o.out[0], &whole = gather ? o.out[0] : o.in[0];
  const int64_t axis = o.inst.axis();
  const int64_t parts = o.inst.group() == plan::CommGroup::Context ? o.cp : o.tp;
  bool ok = axis >= 0 && axis < block.rank() && block.rank() == whole.rank() &&
            block.dtype == whole.dtype;
  for (int64_t i = 0; ok && i < block.rank(); ++i)
    ok = whole.d[i] == block.d[i] * (i == axis ? parts : 1);
  return ok ? "" : "collective operands disagree";
}

// Mixture of experts: tokens [B, S, ...] of k slots each (experts [B, S, k]), among e
// experts; N = B·S·k dispatched rows.
bool routes(const Dims &tokens, const Dims &experts, int64_t e) {
  return tokens.rank() == 3 && experts.rank() == 3 && experts.d[2] >= 1 && e >= experts.d[2] &&
         e <= (1 << 24) && experts.d[0] == tokens.d[0] && experts.d[1] == tokens.d[1];
}

// MoeRouter (logits[, load]) -> (gates, experts); MoeRouterGrad (dgates, logits, experts[,
// load]) -> dlogits.
std::string checkMoeRouter(const Operands &o) {
  const bool forward = o.inst.opcode() == plan::Opcode::MoeRouter;
  const Dims &logits = o.in[forward ? 0 : 1], &experts = forward ? o.out[1] : o.in[2];
  const Dims &gates = forward ? o.out[0] : o.in[0];
  const size_t load = forward ? 1 : 3; // the whole group's counts, where it has them
  if (o.in.size() > load &&
      (o.in[load].d != std::vector<int64_t>{logits.last()} || o.in[load].dtype != plan::DType::I32))
    return "a router's load must be one i32 count per expert";
  return routes(logits, experts, logits.rank() == 3 ? logits.d[2] : 0) &&
                 experts.d[2] == o.inst.topk() && gates.d == experts.d &&
                 (forward || o.out[0].d == logits.d) &&
                 std::isfinite(o.inst.aux_loss_coeff()) && o.inst.aux_loss_coeff() >= 0
             ? ""
             : "router operands disagree";
}

// MoeCount experts [B, S, k] -> counts [num_experts].
std::string checkMoeCount(const Operands &o) {
  return routes(o.in[0], o.in[0], o.inst.num_experts()) &&
                 o.out[0].d == std::vector<int64_t>{o.inst.num_experts()}
             ? ""
             : "expert count operands disagree";
}

// MoeDrop (gates, experts) -> experts [B, S, k], with a positive capacity.
std::string checkMoeDrop(const Operands &o) {
  return routes(o.in[0], o.in[1], o.inst.num_experts()) && o.in[0].d == o.in[1].d &&
                 o.out[0].d == o.in[1].d && o.out[0].dtype == o.in[1].dtype && o.inst.capacity() > 0
             ? ""
             : "expert drop operands disagree";
}

// MoeDispatch (x, experts) -> (rows, counts); MoeDispatchGrad (drows, experts) -> dx.
std::string checkMoeDispatch(const Operands &o) {
  const bool forward = o.inst.opcode() == plan::Opcode::MoeDispatch;
  const Dims &x = forward ? o.in[0] : o.out[0], &rows = forward ? o.out[0] : o.in[0];
  return routes(x, o.in[1], o.inst.num_experts()) && o.inst.capacity() >= 0 && rows.rank() == 2 &&
                 rows.d[0] == o.in[1].numel() && rows.d[1] == x.d[2] &&
                 (!forward || o.out[1].d == std::vector<int64_t>{o.inst.num_experts()})
             ? ""
             : "dispatch operands disagree";
}

// GroupedLinear (rows [N, I], counts [E], w [E, O, I]) -> [N, O]; GradInput (dy, counts,
// w) -> [N, I]; GradWeight (dy, rows, counts) -> dw.
std::string checkGroupedLinear(const Operands &o) {
  const plan::Opcode op = o.inst.opcode();
  const bool weights = op == plan::Opcode::GroupedLinearGradWeight;
  const Dims &w = weights ? o.out[0] : o.in[2], &counts = o.in[weights ? 2 : 1];
  const Dims &x = op == plan::Opcode::GroupedLinear ? o.in[0]
                  : weights                         ? o.in[1]
                                                    : o.out[0];
  const Dims &y = op == plan::Opcode::GroupedLinear ? o.out[0] : o.in[0];
  // counts [E], or [sources, E] under expert parallelism (an expert's rows their sum).
  return w.rank() == 3 && x.rank() == 2 && y.rank() == 2 &&
                 (counts.rank() == 1 || counts.rank() == 2) && counts.last() == w.d[0] &&
                 x.d[0] == y.d[0] && x.d[1] == w.d[2] && y.d[1] == w.d[1]
             ? ""
             : "grouped linear operands disagree";
}

// MoeCombine (rows, gates, experts) -> y; MoeCombineGrad (dy, rows, gates, experts) ->
// (drows, dgates).
std::string checkMoeCombine(const Operands &o) {
  const bool forward = o.inst.opcode() == plan::Opcode::MoeCombine;
  const size_t at = forward ? 0 : 1; // rows
  const Dims &y = forward ? o.out[0] : o.in[0], &rows = o.in[at], &gates = o.in[at + 1];
  const Dims &experts = o.in[at + 2];
  return routes(y, experts, o.inst.num_experts()) && o.inst.capacity() >= 0 &&
                 gates.d == experts.d && rows.rank() == 2 && rows.d[0] == experts.numel() &&
                 rows.d[1] == y.d[2] && (forward || (o.out[0].d == rows.d && o.out[1].d == gates.d))
             ? ""
             : "combine operands disagree";
}

// MoeExchange (rows [N, H], counts [E]) -> (rows [ep·N, H], routing [ep, E/ep]);
// MoeExchangeBack (rows [ep·N, H], counts [E], routing) -> rows [N, H].
std::string checkMoeExchange(const Operands &o) {
  const bool forward = o.inst.opcode() == plan::Opcode::MoeExchange;
  const int64_t ep = o.inst.expert_parallel();
  const Dims &mine = forward ? o.in[0] : o.out[0], &gathered = forward ? o.out[0] : o.in[0];
  const Dims &counts = o.in[1], &routing = forward ? o.out[1] : o.in[2];
  return ep == o.ep && ep >= 2 && mine.rank() == 2 && gathered.rank() == 2 && counts.rank() == 1 &&
                 counts.d[0] % ep == 0 && routing.rank() == 2 && routing.d[0] == ep &&
                 routing.d[1] * ep == counts.d[0] && gathered.d[0] == ep * mine.d[0] &&
                 gathered.d[1] == mine.d[1] && gathered.dtype == mine.dtype &&
                 routing.dtype == counts.dtype
             ? ""
             : "expert exchange operands disagree";
}

using OperandCheck = std::string (*)(const Operands &);
constexpr OperandCheck kShapeChecks[] = {
#define MT_OPCODE(name, minIn, maxIn, minOut, maxOut, index, indexOut, mask, maskOut, grad,     \
                  runsOn, shapes)                                                          \
  &check##shapes,
#include "plan/Opcodes.def"
#undef MT_OPCODE
};

/// The first of the instruction's enum fields (the opcode, and any plan.fbs adds) that
/// holds a value its enum lacks, as "field value"; empty where none does. Read by the
/// schema's own table of fields, so that no new enum field goes unchecked.
std::string unknownEnumValue(const plan::Instruction &inst) {
  const flatbuffers::TypeTable &schema = *plan::InstructionTypeTable();
  const auto &table = reinterpret_cast<const flatbuffers::Table &>(inst);
  for (size_t i = 0; i < schema.num_elems; ++i) {
    const flatbuffers::TypeCode code = schema.type_codes[i];
    const auto type = static_cast<flatbuffers::ElementaryType>(code.base_type);
    const flatbuffers::voffset_t at = plan::fieldOffset(i);
    if (code.is_repeating || code.sequence_ref < 0 || !table.GetOptionalFieldOffset(at))
      continue; // not an enum, or absent: the schema's default, a value of its enum
    int64_t value = 0;
    if (!plan::withScalarType(type, [&](auto held) {
          value = static_cast<int64_t>(table.GetField<decltype(held)>(at, 0));
        }))
      continue; // a table's field
    const flatbuffers::TypeTable &named = *schema.type_refs[code.sequence_ref]();
    const int64_t n = static_cast<int64_t>(named.num_elems);
    const bool known = named.values ? std::count(named.values, named.values + n, value) > 0
                                    : value >= 0 && value < n;
    if (!known)
      return cat(schema.names[i], " ", value);
  }
  return "";
}

/// The opcodes whose kernels read `context_parallel`: every other one would index its
/// operands as if it were absent.
bool honoursContextParallel(plan::Opcode opcode) {
  using plan::Opcode;
  switch (opcode) {
  case Opcode::PositionEmbedding:
  case Opcode::PositionEmbeddingGrad:
  case Opcode::Rotary:
  case Opcode::Dropout:
  case Opcode::DropoutGrad:
  case Opcode::BiasDropoutAdd:
  case Opcode::Attention:
  case Opcode::AttentionGrad:
  case Opcode::ContextOrder:
  case Opcode::RingAttention:
  case Opcode::RingAttentionGrad:
    return true;
  default:
    return false;
  }
}

/// Every operand's element type as the opcode table says, then its shape rule.
std::string checkOperands(const plan::Instruction &inst, const std::vector<Dims> &in,
                          const std::vector<Dims> &out, const plan::Plan &p) {
  // Every operand is an index tensor, a dropout mask, or a float in the plan's precision
  // or (losses, softmax statistics) its accumulator type; the kernels read each operand
  // by its type.
  const plan::DType precision = p.precision(), accumulator = accumulatorType(precision);
  auto isFloat = [&](const Dims &t) { return t.dtype == precision || t.dtype == accumulator; };
  auto isMask = [](const Dims &t) { return t.dtype == plan::DType::I8; };
  const OpcodeInfo &info = opcodeInfo(inst.opcode());
  // An all-reduce may also sum i32 counts: a router's load over the ranks sharing tokens.
  const bool counts =
      inst.opcode() == plan::Opcode::AllReduce && !in.empty() && in[0].dtype == plan::DType::I32;
  const unsigned indexInputs = info.indexInputs | (counts ? 1 : 0),
                 indexOutputs = info.indexOutputs | (counts ? 1 : 0);
  for (size_t i = 0; i < in.size(); ++i)
    if ((indexInputs >> i) & 1                  ? !in[i].isIndex()
        : static_cast<int>(i) == info.maskInput ? !isMask(in[i])
                                                : !isFloat(in[i]))
      return "an operand has the wrong element type";
  for (size_t i = 0; i < out.size(); ++i)
    if ((indexOutputs >> i) & 1                  ? !out[i].isIndex()
        : static_cast<int>(i) == info.maskOutput ? !isMask(out[i])
                                                 : !isFloat(out[i]))
      return "an output has the wrong element type";
  // A context-parallel share is one of the grid's: its rows cut into two whole chunks.
  const int64_t cp = p.grid()->cp();
  if (inst.context_parallel() != 0) {
    if (!honoursContextParallel(inst.opcode()))
      return "context_parallel on an instruction that has no context-parallel form";
    // The rows of the rank's share: the output's for attention, else the input's.
    const bool attention =
        inst.opcode() == plan::Opcode::Attention || inst.opcode() == plan::Opcode::RingAttention;
    const Dims &shared = attention ? out[0] : in[0];
    const int64_t rows = shared.rank() >= 2 ? shared.d[1] : 1;
    const int64_t share = inst.opcode() == plan::Opcode::ContextOrder ? 0
                          : inst.sequence_parallel()                  ? rows * p.grid()->tp()
                                                                      : rows;
    if (inst.context_parallel() != cp || cp < 2 || (share % 2 != 0))
      return cat("context_parallel ", inst.context_parallel(), " is not the grid's cp ", cp,
                 " over whole chunks of the sequence");
  }
  if (inst.group() == plan::CommGroup::Context && cp < 2)
    return "a collective over the context-parallel group, of one rank";
  return kShapeChecks[static_cast<size_t>(inst.opcode())](
      Operands{inst, in, out, p.grid()->tp(), cp, p.grid()->ep(), accumulator});
}

/// Parameters and their gradients live outside the arena.
bool persistent(const plan::Buffer &b) {
  return b.kind() == plan::BufferKind::Param || b.kind() == plan::BufferKind::Grad;
}

/// A parameter's gradient is only ever added into: by ParamGrad, or from the opcode's
/// gradient output on by an instruction that accumulates. No one reads it.
std::string checkGradOutputs(const plan::Instruction &inst,
                             const flatbuffers::Vector<flatbuffers::Offset<plan::Buffer>> &buffers) {
  auto isGrad = [&](uint32_t id) { return buffers.Get(id)->kind() == plan::BufferKind::Grad; };
  for (uint32_t id : *inst.inputs())
    if (isGrad(id))
      return "reads a parameter's gradient";
  const int first = opcodeInfo(inst.opcode()).gradOutput;
  const bool accumulates = inst.opcode() == plan::Opcode::ParamGrad || inst.accumulate();
  if (inst.accumulate() && first < 0)
    return "accumulates, but has no gradient output";
  for (flatbuffers::uoffset_t i = 0; i < inst.outputs()->size(); ++i)
    if (isGrad(inst.outputs()->Get(i)) != (accumulates && static_cast<int>(i) >= first))
      return accumulates && static_cast<int>(i) >= first
                 ? "adds into a buffer that is not a parameter's gradient"
                 : "writes over a parameter's gradient";
  return "";
}

Status checkProgram(const plan::Plan &p, const plan::Program &prog, size_t index) {
  std::string where = cat("program ", index);
  if (!prog.buffers() || !prog.instructions())
    return Status::failure(cat(where, " has no buffers or no instructions"));
  const auto &buffers = *prog.buffers();
  const size_t numParams = p.params() ? p.params()->size() : 0;
  uint64_t arenaEnd = 0;
  for (flatbuffers::uoffset_t i = 0; i < buffers.size(); ++i) {
    const plan::Buffer *b = buffers.Get(i);
    if (!b->shape() || b->shape()->size() > static_cast<size_t>(kMaxRank))
      return Status::failure(cat(where, " buffer ", i, " has no shape or more than ", kMaxRank,
                                 " dimensions"));
    uint64_t bytes = shapeBytes(b->shape(), b->dtype());
    if (bytes == 0 || bytes != b->bytes())
      return Status::failure(cat(where, " buffer ", i, ": shape and size disagree"));
    if (persistent(*b)) {
      if (b->param() < 0 || static_cast<size_t>(b->param()) >= numParams)
        return Status::failure(cat(where, " buffer ", i, " names parameter ", b->param(),
                                   " of ", numParams));
      const plan::Param *param = p.params()->Get(b->param());
      // The programs read a parameter in the plan's precision (under bf16 and f16, the
      // compute copy of the f32 master weights) and add to its gradient in its own type.
      const plan::DType dtype =
          b->kind() == plan::BufferKind::Param ? p.precision() : param->dtype();
      if (!sameShape(param->shape(), b->shape()) || b->dtype() != dtype)
        return Status::failure(cat(where, " buffer ", i, " disagrees with parameter ",
                                   b->param()));
    } else if (b->offset() > prog.arena_bytes() ||
               b->bytes() > prog.arena_bytes() - b->offset()) {
      return Status::failure(cat(where, " buffer ", i, " [", b->offset(), ", +", b->bytes(),
                                 ") lies outside the arena of ", prog.arena_bytes(),
                                 " bytes"));
    } else {
      arenaEnd = std::max<uint64_t>(arenaEnd, b->offset() + b->bytes());
    }
  }
  // The memory plan's arena is exactly its highest byte: a larger one is a corrupt size,
  // which would have the runtime reserve memory nothing uses.
  if (prog.arena_bytes() != arenaEnd)
    return Status::failure(cat(where, " has an arena of ", prog.arena_bytes(),
                               " bytes, but its buffers end at byte ", arenaEnd));
  for (flatbuffers::uoffset_t i = 0; i < prog.instructions()->size(); ++i) {
    const plan::Instruction *inst = prog.instructions()->Get(i);
    std::string at = cat(where, " instruction ", i);
    if (std::string why = unknownEnumValue(*inst); !why.empty())
      return Status::failure(cat(at, ": unknown ", why));
    if (!inst->inputs() || !inst->outputs())
      return Status::failure(cat(at, ": missing operand lists"));
    const OpcodeInfo &info = opcodeInfo(inst->opcode());
    const int numInputs = static_cast<int>(inst->inputs()->size());
    const int numOutputs = static_cast<int>(inst->outputs()->size());
    const bool inputsOk = numInputs >= info.minInputs && numInputs <= info.maxInputs;
    const bool outputsOk = numOutputs >= info.minOutputs && numOutputs <= info.maxOutputs;
    if (!inputsOk || !outputsOk)
      return Status::failure(cat(at, " (", plan::EnumNameOpcode(inst->opcode()),
                                 "): wrong number of operands"));
    for (auto list : {inst->inputs(), inst->outputs()})
      for (uint32_t id : *list)
        if (id >= buffers.size())
          return Status::failure(cat(at, " names buffer ", id, " of ", buffers.size()));
    if (std::string why = checkGradOutputs(*inst, buffers); !why.empty())
      return Status::failure(cat(at, " (", plan::EnumNameOpcode(inst->opcode()), "): ", why));
    std::vector<Dims> in, out;
    for (uint32_t id : *inst->inputs())
      in.emplace_back(*buffers.Get(id));
    for (uint32_t id : *inst->outputs())
      out.emplace_back(*buffers.Get(id));
    if (std::string why = checkOperands(*inst, in, out, p); !why.empty())
      return Status::failure(cat(at, " (", plan::EnumNameOpcode(inst->opcode()), "): ", why));
  }
  for (uint32_t id : {prog.tokens(), prog.targets()})
    if (id >= buffers.size())
      return Status::failure(cat(where, " names buffer ", id, " of ", buffers.size()));
  // The pipeline interface: a received and a sent tensor, and the stash, held in the
  // arena.
  for (int32_t id : {prog.loss(), prog.recv(), prog.send()})
    if (id < -1 || id >= static_cast<int32_t>(buffers.size()))
      return Status::failure(cat(where, " names buffer ", id, " of ", buffers.size()));
  // The neighbours exchange activations in the plan's precision; a stash also keeps
  // dropout masks, f32 softmax statistics and routing (experts and their counts).
  auto transferable = [&](uint32_t id, bool stash) {
    if (id >= buffers.size() || persistent(*buffers.Get(id)))
      return false;
    plan::DType dtype = buffers.Get(id)->dtype();
    return dtype == p.precision() ||
           (stash && (dtype == plan::DType::I8 || dtype == plan::DType::I32 ||
                      dtype == plan::DType::I64 || dtype == accumulatorType(p.precision())));
  };
  for (int32_t id : {prog.recv(), prog.send()})
    if (id >= 0 && !transferable(static_cast<uint32_t>(id), false))
      return Status::failure(cat(where, " transfers buffer ", id,
                                 ", which is not a float activation"));
  if (prog.stash())
    for (uint32_t id : *prog.stash())
      if (!transferable(id, true))
        return Status::failure(cat(where, " stashes buffer ", id,
                                   ", which is neither a float activation, nor f32 statistics, "
                                   "nor a dropout mask, nor routing"));
  for (uint32_t id : {prog.tokens(), prog.targets()}) {
    Dims input(*buffers.Get(id));
    const int64_t seq = p.seq_length() / p.grid()->cp(); // this context rank's share
    if (!input.isIndex() || input.rank() != 2 || input.d[0] != p.micro_batch_size() ||
        input.d[1] != seq || persistent(*buffers.Get(id)))
      return Status::failure(cat(where, ": tokens and targets must be integer [",
                                 p.micro_batch_size(), ", ", seq, "] inputs"));
  }
  if (prog.loss() >= 0) {
    Dims loss(*buffers.Get(prog.loss()));
    if (loss.numel() != 1 || loss.dtype != accumulatorType(p.precision()) ||
        persistent(*buffers.Get(prog.loss())))
      return Status::failure(cat(where, ": the loss must be a float scalar"));
  }
  return Status::success();
}

/// The plan's sizes, grid, precision and parameter table.
Status checkHeader(const plan::Plan &p) {
  if (!p.programs() || p.programs()->size() == 0)
    return Status::failure("plan has no programs");
  if (!p.stages() || p.stages()->size() == 0 || !p.grid() || !p.params() || !p.model())
    return Status::failure("plan has no schedule, rank grid, parameter table or model name");
  if (p.micro_batch_size() <= 0 || p.global_batch_size() <= 0 || p.seq_length() <= 0)
    return Status::failure("plan has non-positive batch or sequence sizes");
  const plan::Grid &grid = *p.grid();
  if (grid.tp() < 1 || grid.dp() < 1 || grid.pp() < 1 || grid.cp() < 1 || p.virtual_stages() < 1 ||
      p.global_batch_size() % (p.micro_batch_size() * grid.dp()) != 0)
    return Status::failure("plan's rank grid does not divide its batch");
  if (grid.ep() < 1 || (static_cast<int64_t>(grid.dp()) * grid.cp()) % grid.ep() != 0)
    return Status::failure(
        cat("plan's expert-parallel size ", grid.ep(), " does not divide its data-parallel ranks"));
  // Ranks are counted in int (MPI's type): each factor, and so the product, bounded.
  constexpr int64_t kMostRanks = int64_t{1} << 24;
  if (static_cast<int64_t>(grid.tp()) * grid.cp() * grid.dp() * grid.pp() > kMostRanks ||
      grid.tp() > kMostRanks || grid.cp() > kMostRanks || grid.dp() > kMostRanks ||
      grid.pp() > kMostRanks)
    return Status::failure(cat("plan's rank grid has more than ", kMostRanks, " ranks"));
  if (p.seq_length() % (grid.cp() == 1 ? 1 : 2 * grid.cp()) != 0)
    return Status::failure(cat("plan's sequence of ", p.seq_length(),
                               " is not cut into 2·cp = ", 2 * grid.cp(), " chunks"));
  if (p.precision() != plan::DType::F32 && p.precision() != plan::DType::F64 &&
      p.precision() != plan::DType::BF16 && p.precision() != plan::DType::F16)
    return Status::failure("plan precision must be f32, f64, bf16 or f16");
  for (flatbuffers::uoffset_t i = 0; i < p.params()->size(); ++i) {
    const plan::Param *param = p.params()->Get(i);
    if (!param->name() || shapeBytes(param->shape(), param->dtype()) == 0 ||
        shapeBytes(param->global_shape(), param->dtype()) == 0 ||
        param->global_shape()->size() != param->shape()->size() || param->shard_dim() < -1 ||
        param->shard_dim() >= static_cast<int>(param->shape()->size()) ||
        param->dtype() != accumulatorType(p.precision()) || param->init() > plan::Init::MAX ||
        param->vocab_rows() < 0 ||
        (param->vocab_rows() > 0 && (param->global_shape()->size() == 0 ||
                                     param->vocab_rows() > param->global_shape()->Get(0))))
      return Status::failure(cat("parameter ", i, " has no name, an invalid shape or type"));
    // The global shape is tp (an expert's weight: ep) blocks of the local one along the
    // shard dimension; an expert's weight is whole on each rank of a tensor-parallel group.
    if (param->expert_parallel() && param->shard_dim() != 0)
      return Status::failure(cat("parameter ", i, " is cut over the experts along dimension ",
                                 param->shard_dim(), " (experts: dimension 0)"));
    for (flatbuffers::uoffset_t d = 0; d < param->shape()->size(); ++d) {
      int64_t factor = static_cast<int>(d) != param->shard_dim() ? 1
                       : param->expert_parallel()                ? grid.ep()
                                                                 : grid.tp();
      if (param->global_shape()->Get(d) != param->shape()->Get(d) * factor)
        return Status::failure(cat("parameter ", i, " ('", param->name()->str(),
                                   "'): its shard does not tile its global shape"));
    }
  }
  return Status::success();
}

/// The programs' places in the pipeline: one whole step, or a forward and a backward per
/// virtual stage, in order; what neighbours exchange and what a backward reads of its
/// forward's stash agree.
Status checkPipelinePrograms(const plan::Plan &p) {
  const plan::Grid &grid = *p.grid();
  const int64_t virtualStages = static_cast<int64_t>(grid.pp()) * p.virtual_stages();
  const bool pipelined = grid.pp() > 1;
  // Programs: one whole step, or a forward and a backward per virtual stage, in order.
  if (static_cast<int64_t>(p.programs()->size()) != (pipelined ? 2 * virtualStages : 1) ||
      static_cast<int64_t>(p.stages()->size()) != grid.pp())
    return Status::failure("plan's programs or stages do not match its pipeline");
  for (flatbuffers::uoffset_t i = 0; pipelined && i < p.programs()->size(); ++i) {
    const plan::Program &prog = *p.programs()->Get(i);
    const int64_t v = i / 2;
    if (prog.stage() != v % grid.pp() || prog.chunk() != v / grid.pp() ||
        prog.backward() != (i % 2 == 1) ||
        (prog.recv() >= 0) != (prog.backward() ? v + 1 < virtualStages : v > 0) ||
        (prog.send() >= 0) != (prog.backward() ? v > 0 : v + 1 < virtualStages) ||
        (prog.loss() >= 0) != (!prog.backward() && v + 1 == virtualStages))
      return Status::failure(cat("program ", i, " does not fit its place in the pipeline"));
    const plan::Program &forward = *p.programs()->Get(i & ~1u);
    if (prog.backward() && (!prog.stash() || !forward.stash() ||
                            prog.stash()->size() != forward.stash()->size()))
      return Status::failure(cat("program ", i, "'s stash does not match its forward's"));
  }
  if (!pipelined) {
    const plan::Program &whole = *p.programs()->Get(0);
    if (whole.loss() < 0 || whole.stage() != 0 || whole.chunk() != 0 || whole.backward() ||
        whole.recv() >= 0 || whole.send() >= 0 || (whole.stash() && whole.stash()->size()))
      return Status::failure("the plan's one program must be a whole step with a loss");
  }
  // What one neighbour sends is what the other receives, and a backward's stash is its
  // forward's: same shapes, same sizes.
  auto dims = [&](const plan::Program &prog, int32_t id) {
    const plan::Buffer *b = prog.buffers()->Get(static_cast<uint32_t>(id));
    return std::make_pair(std::vector<int64_t>(b->shape()->begin(), b->shape()->end()),
                          b->dtype());
  };
  for (int64_t v = 0; pipelined && v < virtualStages; ++v) {
    const plan::Program &forward = *p.programs()->Get(2 * v);
    const plan::Program &backward = *p.programs()->Get(2 * v + 1);
    if (v + 1 < virtualStages) {
      const plan::Program &next = *p.programs()->Get(2 * v + 2);
      const plan::Program &nextBackward = *p.programs()->Get(2 * v + 3);
      if (dims(forward, forward.send()) != dims(next, next.recv()) ||
          dims(nextBackward, nextBackward.send()) != dims(backward, backward.recv()))
        return Status::failure(cat("virtual stages ", v, " and ", v + 1,
                                   " disagree on the tensors they exchange"));
    }
    for (flatbuffers::uoffset_t i = 0; i < forward.stash()->size(); ++i)
      if (dims(forward, static_cast<int32_t>(forward.stash()->Get(i))) !=
          dims(backward, static_cast<int32_t>(backward.stash()->Get(i))))
        return Status::failure(cat("virtual stage ", v, "'s stash tensor ", i,
                                   " differs between its forward and backward"));
  }
  return Status::success();
}

/// Every parameter belongs to some stage, and a gradient goes to a parameter its
/// program's stage (and so its rank) holds.
Status checkOwnership(const plan::Plan &p) {
  std::set<std::pair<int, uint32_t>> held;
  std::vector<bool> named(p.params()->size(), false);
  for (const plan::Program *prog : *p.programs())
    for (const plan::Buffer *b : *prog->buffers())
      if (b->kind() == plan::BufferKind::Param) {
        held.emplace(prog->stage(), b->param());
        named[b->param()] = true;
      }
  if (auto unnamed = std::find(named.begin(), named.end(), false); unnamed != named.end())
    return Status::failure(cat("parameter ", unnamed - named.begin(), " belongs to no program"));
  for (flatbuffers::uoffset_t i = 0; i < p.programs()->size(); ++i) {
    const plan::Program &prog = *p.programs()->Get(i);
    for (const plan::Buffer *b : *prog.buffers())
      if (b->kind() == plan::BufferKind::Grad &&
          !held.count({prog.stage(), static_cast<uint32_t>(b->param())}))
        return Status::failure(cat("program ", i, " gives a gradient to parameter ",
                                   b->param(), ", which its stage does not hold"));
  }
  return Status::success();
}

/// Each stage's schedule: every micro-batch forward and backward (or in order), a
/// gradient synchronisation and an update; under a pipeline, free of deadlock, with the
/// stash bytes its micro-batches in flight need.
Status checkSchedules(const plan::Plan &p) {
  const plan::Grid &grid = *p.grid();
  const int64_t perRank = p.global_batch_size() / (p.micro_batch_size() * grid.dp());
  const bool pipelined = grid.pp() > 1;
  for (flatbuffers::uoffset_t s = 0; s < p.stages()->size(); ++s) {
    const plan::Stage *stage = p.stages()->Get(s);
    if (!stage->actions())
      return Status::failure("a pipeline stage has no actions");
    const auto &actions = *stage->actions();
    // Every micro-batch of every chunk once forward and once backward (or each micro-batch
    // once, without a pipeline), then one gradient synchronisation and one update.
    const int64_t passes = pipelined ? 2 * perRank * p.virtual_stages() : perRank;
    bool ok = actions.size() == static_cast<size_t>(passes) + 2;
    std::set<std::tuple<int, int64_t, int64_t>> seen;
    for (flatbuffers::uoffset_t i = 0; ok && i < actions.size(); ++i) {
      const plan::Action *a = actions.Get(i);
      if (i < static_cast<size_t>(passes)) {
        if (pipelined)
          ok = (a->kind() == plan::ActionKind::Forward ||
                a->kind() == plan::ActionKind::Backward) &&
               a->chunk() < p.virtual_stages() && a->micro_batch() < perRank &&
               seen.emplace(static_cast<int>(a->kind()), a->chunk(), a->micro_batch()).second;
        else
          ok = a->kind() == plan::ActionKind::ForwardBackward && a->chunk() == 0 &&
               a->micro_batch() == i;
      } else {
        ok = a->kind() == (i == static_cast<size_t>(passes) ? plan::ActionKind::GradSync
                                                           : plan::ActionKind::OptimizerStep);
      }
    }
    if (!ok)
      return Status::failure(cat("stage ", s, "'s schedule is not every micro-batch ",
                                 pipelined ? "forward and backward" : "in order",
                                 ", a gradient synchronisation and an update"));
  }
  if (pipelined) {
    // The schedule runs to the end: every receive meets its send.
    PipelineSchedule schedule{ScheduleKind::OneFOneB, grid.pp(), p.virtual_stages(), perRank, {}};
    for (const plan::Stage *stage : *p.stages()) {
      schedule.perStage.emplace_back();
      for (const plan::Action *a : *stage->actions())
        if (a->kind() == plan::ActionKind::Forward || a->kind() == plan::ActionKind::Backward)
          schedule.perStage.back().push_back(
              {a->kind() == plan::ActionKind::Forward, a->chunk(), a->micro_batch()});
    }
    ScheduleCheck check = checkSchedule(schedule);
    if (!check.deadlockFree)
      return Status::failure("the pipeline schedule cannot run: " + check.problem);
    // mtrun keeps the stashes on the device in exactly the bytes the plan gives them:
    // slots of the stage's largest stash, one per micro-batch its schedule keeps in flight.
    for (flatbuffers::uoffset_t s = 0; s < p.stages()->size(); ++s) {
      uint64_t largest = 0;
      for (const plan::Program *prog : *p.programs())
        if (prog->stage() == static_cast<int32_t>(s) && !prog->backward()) {
          uint64_t bytes = 0;
          for (uint32_t id : *prog->stash())
            bytes += prog->buffers()->Get(id)->bytes();
          largest = std::max(largest, bytes);
        }
      const uint64_t planned = p.stages()->Get(s)->stash_bytes();
      const uint64_t inFlight = static_cast<uint64_t>(check.maxInFlight[s]);
      if (planned != inFlight * largest)
        return Status::failure(cat("stage ", s, " plans ", planned,
                                   " bytes of stashes, but its schedule keeps ", inFlight,
                                   " micro-batches in flight, whose stashes take up to ",
                                   largest, " bytes each"));
    }
  }
  return Status::success();
}

Status checkPlan(const plan::Plan &p) {
  MT_TRY(checkHeader(p));
  for (flatbuffers::uoffset_t i = 0; i < p.programs()->size(); ++i)
    MT_TRY(checkProgram(p, *p.programs()->Get(i), i));
  MT_TRY(checkPipelinePrograms(p));
  MT_TRY(checkOwnership(p));
  return checkSchedules(p);
}

} // namespace

Status LoadedPlan::parse(std::vector<uint8_t> file, const std::string &name,
                         LoadedPlan &out) {
  using namespace plan;
  auto fail = [&](const std::string &why) { return Status::failure(cat(name, ": ", why)); };
  if (file.size() < 4 || std::memcmp(file.data(), kMagic, 4) != 0)
    return fail("not an mtc plan (no MTPL header)");
  if (file.size() < kHeaderBytes + kTrailerBytes)
    return fail(cat("truncated plan: ", file.size(), " bytes, shorter than its header"));
  uint32_t version = static_cast<uint32_t>(getLittleEndian(file.data() + 4, 4));
  if (version != kFormatVersion)
    return fail(cat("plan format version ", version, ", but this build reads version ",
                    kFormatVersion, "; compile the model again with this mtc"));
  uint64_t payload = getLittleEndian(file.data() + 8, 8);
  uint64_t expected = kHeaderBytes + kTrailerBytes;
  if (payload > file.size() || file.size() - expected < payload)
    return fail(cat("truncated plan: header promises ", payload + expected, " bytes, file has ",
                    file.size()));
  if (file.size() - expected != payload)
    return fail(cat("corrupt plan: ", file.size() - expected - payload,
                    " bytes after the end of the plan"));
  uint32_t stored = static_cast<uint32_t>(getLittleEndian(file.data() + kHeaderBytes + payload, 4));
  if (stored != crc32Of(file.data(), kHeaderBytes + payload))
    return fail("corrupt plan: CRC-32 mismatch (damaged or partly written file)");

  const uint8_t *body = file.data() + kHeaderBytes;
  flatbuffers::Verifier verifier(body, payload);
  if (!PlanBufferHasIdentifier(body) || !VerifyPlanBuffer(verifier))
    return fail("corrupt plan: FlatBuffers verification failed");
  if (Status s = checkPlan(*GetPlan(body)); !s.ok())
    return fail("corrupt plan: " + s.message());
  out.bytes_ = std::move(file);
  out.root_ = GetPlan(out.bytes_.data() + kHeaderBytes);
  return Status::success();
}

Status LoadedPlan::read(const std::string &path, LoadedPlan &out) {
  std::vector<uint8_t> bytes;
  MT_TRY(readRegularFile(path, limits::kPlanBytes, "a plan", bytes));
  return parse(std::move(bytes), path, out);
}

} // namespace mt
