#include "compiler/Accounting.h"
#include "core/Shares.h"
#include "dialects/mt/MtDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <cstdio>

using namespace mlir;

namespace mtc {

static int64_t parametersIn(FunctionOpInterface fn, SymbolTableCollection &symbols) {
  int64_t n = 0;
  fn.walk([&](Operation *op) {
    if (auto param = dyn_cast<mlir::mt::ParamOp>(op))
      n += cast<RankedTensorType>(param.getType()).getNumElements();
    else if (auto repeat = dyn_cast<mlir::mt::RepeatOp>(op))
      if (auto block = symbols.lookupNearestSymbolFrom<FunctionOpInterface>(
              repeat, repeat.getCalleeAttr()))
        n += static_cast<int64_t>(repeat.getCount()) * parametersIn(block, symbols);
  });
  return n;
}

int64_t countParameters(ModuleOp module) {
  SymbolTableCollection symbols;
  int64_t n = 0;
  for (auto fn : module.getOps<FunctionOpInterface>())
    if (!fn.isPrivate())
      n += parametersIn(fn, symbols);
  return n;
}

std::optional<DecoderShape> recogniseDecoder(ModuleOp module) {
  DecoderShape g;
  int repeats = 0, embeddings = 0, attentions = 0, activations = 0, routers = 0;
  module.walk([&](Operation *op) {
    if (auto r = dyn_cast<mlir::mt::RepeatOp>(op)) {
      ++repeats;
      g.layers = r.getCount();
    } else if (auto e = dyn_cast<mlir::mt::EmbeddingOp>(op)) {
      ++embeddings;
      auto table = cast<RankedTensorType>(e.getTable().getType());
      g.vocab = table.getDimSize(0);
      g.hidden = table.getDimSize(1);
    } else if (auto p = dyn_cast<mlir::mt::PositionEmbeddingOp>(op)) {
      g.positions = cast<RankedTensorType>(p.getTable().getType()).getDimSize(0);
      g.positionTable = true;
    } else if (auto a = dyn_cast<mlir::mt::AttentionOp>(op)) {
      ++attentions;
      g.heads = a.getHeads();
      g.kvHeads = a.getKeyValueHeads();
      g.headDim = cast<RankedTensorType>(a.getResult().getType()).getDimSize(2) / g.heads;
    } else if (isa<mlir::mt::GeluOp, mlir::mt::SwigluOp>(op)) {
      ++activations;
      g.ffn = cast<RankedTensorType>(op->getResult(0).getType()).getShape().back();
      g.gated = isa<mlir::mt::SwigluOp>(op);
    } else if (auto r = dyn_cast<mlir::mt::MoeRouterOp>(op)) {
      ++routers;
      g.experts = cast<RankedTensorType>(r.getLogits().getType()).getDimSize(2);
      g.topk = static_cast<int64_t>(r.getTopk());
    }
  });
  if (auto length = module->getAttrOfType<IntegerAttr>("mt.seq_length"); length && !g.positions)
    g.positions = length.getInt();
  if (repeats != 1 || embeddings != 1 || attentions != 1 || activations != 1 || routers > 1 ||
      g.positions == 0 || ShapedType::isDynamic(g.ffn))
    return std::nullopt;
  return g;
}

unsigned __int128 decoderModelFlops(const DecoderShape &g, int64_t batch, int64_t seq) {
  using U = unsigned __int128;
  U b = batch, s = seq, l = g.layers, h = g.hidden, v = g.vocab, f = g.ffn;
  U q = static_cast<U>(g.heads) * g.headDim, kv = static_cast<U>(g.kvHeads) * g.headDim;
  U matrices = g.gated ? 3 : 2;
  // A mixture of experts: each token through topk experts' MLPs, and the router's linear.
  U mlp = matrices * h * f * (g.experts ? g.topk : 1) + h * static_cast<U>(g.experts);
  return 6 * b * s * (l * (2 * h * q + 2 * h * kv + mlp + 2 * s * q) + h * v);
}

std::string withCommas(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

std::string binarySize(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1073741824.0)
    snprintf(text, sizeof text, "%.2f GiB", b / 1073741824.0);
  else
    snprintf(text, sizeof text, "%.2f MiB", b / 1048576.0);
  return text;
}

std::optional<int64_t> savedBytesOfLayer(ModuleOp module, int64_t layer) {
  auto fn = module.lookupSymbol<FunctionOpInterface>("train_step");
  if (!fn)
    return std::nullopt;
  Block &body = fn.getFunctionBody().front();
  DenseMap<Operation *, int64_t> position;
  const int64_t backwardStart = mlir::mt::numberOps(body, position);
  int64_t bytes = 0;
  bool found = false;
  for (Operation &op : body) {
    if (position[&op] >= backwardStart)
      break;
    auto ordinal = op.getAttrOfType<IntegerAttr>(mlir::mt::kLayerAttr);
    if (!ordinal || ordinal.getInt() != layer || isa<mlir::mt::ParamOp>(op))
      continue;
    found = true;
    for (Value v : op.getResults())
      if (llvm::any_of(v.getUsers(),
                       [&](Operation *user) { return position.lookup(user) >= backwardStart; }))
        bytes += mlir::mt::tensorBytes(v.getType());
  }
  return found ? std::optional<int64_t>(bytes) : std::nullopt;
}

BytesPerParameter BytesPerParameter::of(llvm::StringRef precision) {
  BytesPerParameter b;
  b.mixed = precision == "bf16" || precision == "f16";
  b.weights = precision == "f64" ? 8 : b.mixed ? 2 : 4;
  b.gradients = precision == "f64" ? 8 : 4;
  b.optimizer = 2 * b.gradients + (b.mixed ? 4 : 0);
  return b;
}

std::optional<int64_t> chunkOf(func::FuncOp fn, bool &forward) {
  llvm::StringRef name = fn.getName();
  int64_t v;
  forward = name.consume_front("forward_");
  if (!forward && !name.consume_front("backward_"))
    return std::nullopt;
  if (name.getAsInteger(10, v))
    return std::nullopt;
  return v;
}

std::vector<ChunkFootprint> chunkFootprints(ModuleOp module) {
  std::vector<ChunkFootprint> chunks;
  std::vector<llvm::StringMap<int64_t>> layerParams;
  auto chunk = [&](int64_t v) -> ChunkFootprint & {
    if (static_cast<int64_t>(chunks.size()) <= v) {
      chunks.resize(v + 1);
      layerParams.resize(v + 1);
    }
    return chunks[v];
  };
  module.walk([&](func::FuncOp fn) {
    bool forward = false;
    int64_t v = 0;
    if (fn.getName() != "train_step") {
      std::optional<int64_t> c = chunkOf(fn, forward);
      if (!c)
        return;
      v = *c;
    }
    ChunkFootprint &f = chunk(v);
    if (auto arena = fn->getAttrOfType<IntegerAttr>(mlir::mt::kArenaBytesAttr))
      f.arenaBytes = std::max(f.arenaBytes, arena.getInt());
    if (forward) {
      // What it returns beyond the tensor it sends (or the loss) waits for backward.
      ArrayRef<Type> results = fn.getResultTypes();
      for (Type t : results.drop_front())
        f.stashBytes += mlir::mt::tensorBytes(t);
      if (!results.empty() && cast<RankedTensorType>(results.front()).getRank() > 0)
        f.messageBytes = mlir::mt::tensorBytes(results.front());
    }
    fn.walk([&](Operation *op) {
      if (auto p = dyn_cast<mlir::mt::ParamOp>(op)) {
        const int64_t n = cast<RankedTensorType>(p.getType()).getNumElements();
        const bool tpReduced = p->hasAttr("tp_grad_reduce");
        if (p->hasAttr(mlir::mt::kLayerAttr)) {
          if (layerParams[v].insert({p.getName(), n}).second) {
            f.layerParameters += n;
            f.layerTpReduced += tpReduced ? n : 0;
            f.layerExperts += p.getExpertParallel() ? n : 0;
          }
        } else {
          f.sharedParameters[p.getName().str()] = {n, tpReduced};
        }
      } else if (auto cost = dyn_cast<mlir::mt::CostOpInterface>(op)) {
        OpCosts &into = op->hasAttr(mlir::mt::kRecomputedAttr) ? f.recompute : f.costs;
        into.add(cost.getGemmFlops(), cost.getOtherFlops());
      }
      // Ring attention keeps two shares of keys and values in flight, and its gradient
      // two of their gradients as well, outside the arena (runtime/exec/Executor.h).
      if (auto attention = dyn_cast<mlir::mt::AttentionOp>(op); attention && attention.getRing())
        f.ringBytes =
            std::max(f.ringBytes, 2 * mlir::mt::tensorBytes(attention.getQkv().getType()));
      if (auto grad = dyn_cast<mlir::mt::AttentionGradOp>(op); grad && grad.getRing())
        f.ringBytes = std::max(f.ringBytes, 4 * mlir::mt::tensorBytes(grad.getQkv().getType()));
      // An expert exchange's rows pass through a staging buffer of the whole group's.
      if (isa<mlir::mt::MoeExchangeOp>(op))
        f.ringBytes = std::max(f.ringBytes, mlir::mt::tensorBytes(op->getResult(0).getType()));
      if (isa<mlir::mt::MoeExchangeBackOp>(op))
        f.ringBytes = std::max(f.ringBytes, mlir::mt::tensorBytes(op->getOperand(0).getType()));
    });
  });
  return chunks;
}

StageParameters stageParameters(ArrayRef<ChunkFootprint> chunks, int64_t pp, int64_t stage) {
  StageParameters p;
  std::map<std::string, std::pair<int64_t, bool>> shared;
  for (size_t c = stage; c < chunks.size(); c += pp) {
    p.all += chunks[c].layerParameters;
    p.tpReduced += chunks[c].layerTpReduced;
    p.experts += chunks[c].layerExperts;
    shared.insert(chunks[c].sharedParameters.begin(), chunks[c].sharedParameters.end());
  }
  for (const auto &[name, param] : shared) {
    p.all += param.first;
    p.tpReduced += param.second ? param.first : 0;
    p.shared.push_back({name, param.first});
  }
  return p;
}

StepAccount accountChunks(ArrayRef<ChunkFootprint> chunks, llvm::StringRef precision, int64_t pp,
                          ArrayRef<int64_t> inFlight, int64_t dp, int64_t ep,
                          bool distributedOptimizer) {
  StepAccount a;
  a.bytesPerParameter = BytesPerParameter::of(precision);
  const BytesPerParameter &b = a.bytesPerParameter;
  for (const ChunkFootprint &c : chunks) {
    a.costs.add(c.costs);
    a.recompute.add(c.recompute);
  }
  // Each stage as the executor allocates it: one arena for its programs, which run one at
  // a time; under a pipeline, a slot of its largest stash for every micro-batch in flight;
  // the staging of its ring attention or expert exchange.
  for (int64_t s = 0; s < pp; ++s) {
    const StageParameters p = stageParameters(chunks, pp, s);
    a.localParameters = std::max(a.localParameters, p.all);
    int64_t arena = 0, stash = 0, ring = 0;
    for (size_t c = s; c < chunks.size(); c += pp) {
      arena = std::max(arena, chunks[c].arenaBytes);
      stash = std::max(stash, chunks[c].stashBytes);
      ring = std::max(ring, chunks[c].ringBytes);
    }
    const int64_t stashes = pp > 1 ? inFlight[s] * stash : 0;
    if (pp > 1)
      a.stashBytes.push_back(stashes);
    // The flat stores: the rest, then (expert parallelism) the experts, each section in
    // whole shares of the ranks that share it (Executor.cpp: flatLayout).
    const int64_t rest = ::mt::paddedToShares(ep > 1 ? p.all - p.experts : p.all, dp);
    const int64_t experts = ep > 1 ? ::mt::paddedToShares(p.experts, dp / ep) : 0;
    const int64_t optimized =
        distributedOptimizer ? rest / dp + experts / (dp / ep) : rest + experts;
    MemoryReport m;
    m.weights = b.weights * (rest + experts);
    m.gradients = b.gradients * (rest + experts);
    m.optimizer = b.optimizer * optimized;
    m.activations = arena + stashes + ring;
    a.stages.push_back(m);
    if (s == 0 || m.total() > a.memory.total())
      a.memory = m;
  }
  return a;
}

StepAccount accountStep(ModuleOp module, llvm::StringRef precision, int64_t pp,
                        ArrayRef<int64_t> inFlight, int64_t dp, int64_t ep,
                        bool distributedOptimizer) {
  return accountChunks(chunkFootprints(module), precision, pp, inFlight, dp, ep,
                       distributedOptimizer);
}

} // namespace mtc
