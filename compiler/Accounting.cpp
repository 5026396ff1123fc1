#include "compiler/Accounting.h"
#include "dialects/mt/MtDialect.h"
#include "passes/Passes.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;

namespace mtc {

static int64_t parametersIn(FunctionOpInterface fn, SymbolTableCollection &symbols) {
  int64_t n = 0;
  fn.walk([&](Operation *op) {
    if (auto param = dyn_cast<mt::ParamOp>(op))
      n += cast<RankedTensorType>(param.getType()).getNumElements();
    else if (auto repeat = dyn_cast<mt::RepeatOp>(op))
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

std::optional<GptShape> recogniseGpt(ModuleOp module) {
  GptShape g;
  int repeats = 0, embeddings = 0;
  module.walk([&](Operation *op) {
    if (auto r = dyn_cast<mt::RepeatOp>(op)) {
      ++repeats;
      g.layers = r.getCount();
    } else if (auto e = dyn_cast<mt::EmbeddingOp>(op)) {
      ++embeddings;
      auto table = cast<RankedTensorType>(e.getTable().getType());
      g.vocab = table.getDimSize(0);
      g.hidden = table.getDimSize(1);
    } else if (auto p = dyn_cast<mt::PositionEmbeddingOp>(op)) {
      g.positions = cast<RankedTensorType>(p.getTable().getType()).getDimSize(0);
    }
  });
  if (repeats != 1 || embeddings != 1 || g.positions == 0)
    return std::nullopt;
  return g;
}

unsigned __int128 gptModelFlops(const GptShape &g, int64_t batch, int64_t seq) {
  using U = unsigned __int128;
  U b = batch, s = seq, l = g.layers, h = g.hidden, v = g.vocab;
  return 72 * b * s * l * h * h + 12 * b * s * s * l * h + 6 * b * s * h * v;
}

OpCosts sumOpCosts(ModuleOp module) {
  OpCosts c;
  module.walk([&](mt::CostOpInterface op) {
    c.gemmFlops += op.getGemmFlops();
    c.otherFlops += op.getOtherFlops();
  });
  return c;
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

std::optional<int64_t> savedBytesOfLayer(ModuleOp module, int64_t layer) {
  auto fn = module.lookupSymbol<FunctionOpInterface>("train_step");
  if (!fn)
    return std::nullopt;
  Block &body = fn.getFunctionBody().front();
  DenseMap<Operation *, int64_t> position;
  const int64_t backwardStart = mt::numberOps(body, position);
  int64_t bytes = 0;
  bool found = false;
  for (Operation &op : body) {
    if (position[&op] >= backwardStart)
      break;
    auto ordinal = op.getAttrOfType<IntegerAttr>(mt::kLayerAttr);
    if (!ordinal || ordinal.getInt() != layer || isa<mt::ParamOp>(op))
      continue;
    found = true;
    for (Value v : op.getResults())
      if (llvm::any_of(v.getUsers(),
                       [&](Operation *user) { return position.lookup(user) >= backwardStart; }))
        bytes += mt::tensorBytes(v.getType());
  }
  return found ? std::optional<int64_t>(bytes) : std::nullopt;
}

} // namespace mtc
