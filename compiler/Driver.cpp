#include "compiler/Driver.h"
#include "compiler/Pipeline.h"
#include "core/InputFile.h"
#include "passes/Passes.h"
#include "plan/Schedule.h"

#include "dialects/mt/Collectives.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using llvm::errs;

namespace mtc {

int usageError(const std::string &message) {
  errs() << "mtc: " << message << "\n";
  return 2;
}

bool positiveFlag(const Flags &args, llvm::StringRef name, int64_t fallback, int64_t &out) {
  auto it = args.values.find(name);
  if (it == args.values.end()) {
    out = fallback;
    return true;
  }
  if (llvm::StringRef(it->second).getAsInteger(10, out) || out <= 0) {
    errs() << "mtc: --" << name << " must be a positive integer, got '" << it->second << "'\n";
    return false;
  }
  return true;
}

bool modelFlags(const Flags &args, CompileOptions &options) {
  for (auto [name, out] : {std::pair{"attention-dropout", &options.attentionDropout},
                           std::pair{"hidden-dropout", &options.hiddenDropout}}) {
    auto it = args.values.find(name);
    if (it == args.values.end())
      continue;
    if (llvm::StringRef(it->second).getAsDouble(*out) || !(*out >= 0 && *out < 1)) {
      errs() << "mtc: --" << name << " must be a rate in [0, 1), got '" << it->second << "'\n";
      return false;
    }
  }
  auto it = args.values.find("moe-expert-capacity-factor");
  if (it != args.values.end() &&
      (llvm::StringRef(it->second).getAsDouble(options.capacityFactor) ||
       !(options.capacityFactor >= 0 && std::isfinite(options.capacityFactor)))) {
    errs() << "mtc: --moe-expert-capacity-factor must be a number >= 0 (0: dropless), got '"
           << it->second << "'\n";
    return false;
  }
  options.dropPolicy = args.values.lookup("moe-token-drop-policy");
  if (options.dropPolicy.empty())
    options.dropPolicy = "probs";
  if (options.dropPolicy != "probs" && options.dropPolicy != "position") {
    errs() << "mtc: --moe-token-drop-policy must be probs or position, got '" << options.dropPolicy
           << "'\n";
    return false;
  }
  return true;
}

Fusions fusionsOf(const Flags &args) {
  Fusions fusions;
  for (auto [flag, on] : kFusionSwitches)
    fusions.*on = !args.switches.lookup(flag);
  return fusions;
}

int readPrecision(const Flags &args, std::string &precision, std::string &elementType) {
  // bf16 and fp16 compute with f32 master weights, gradients and Adam state (Megatron's
  // mixed precision); fp64 exists for gradient checks against finite differences.
  precision = args.values.lookup("precision");
  for (const char *flag : {"bf16", "fp16"})
    if (args.switches.lookup(flag)) {
      if (!precision.empty() && precision != flag)
        return usageError(std::string("--") + flag + " contradicts --precision " + precision);
      precision = flag;
    }
  if (precision.empty())
    precision = "fp32";
  const llvm::StringMap<std::string> elementTypes = {
      {"fp32", "f32"}, {"fp64", "f64"}, {"bf16", "bf16"}, {"fp16", "f16"}};
  if (!elementTypes.count(precision))
    return usageError("--precision must be bf16, fp16, fp32 or fp64, got '" + precision + "'");
  elementType = elementTypes.lookup(precision);
  return 0;
}

/// Expert parallelism's condition: ep consecutive data-parallel ranks share a mixture's
/// experts.
int expertLayout(const StepLayout &layout) {
  const CompileOptions &options = layout.options;
  if (options.ep == 1)
    return 0;
  if ((options.dp * options.cp) % options.ep != 0)
    return usageError("--ep " + std::to_string(options.ep) +
                      " must divide the data-parallel ranks (dp x cp = " +
                      std::to_string(options.dp * options.cp) + ")");
  return 0;
}

int readLayout(const Flags &args, StepLayout &layout, std::string &precision) {
  CompileOptions &options = layout.options;
  if (!args.values.count("micro-batch-size") || !args.values.count("global-batch-size"))
    return usageError(args.command + " needs --micro-batch-size and --global-batch-size");
  if (!positiveFlag(args, "micro-batch-size", 0, options.microBatchSize) ||
      !positiveFlag(args, "global-batch-size", 0, options.globalBatchSize) ||
      !positiveFlag(args, "seq-length", 1, options.seqLength) ||
      !positiveFlag(args, "make-vocab-size-divisible-by", 128, options.vocabMultiple) ||
      !positiveFlag(args, "tp", 1, options.tp) || !positiveFlag(args, "dp", 1, options.dp) ||
      !positiveFlag(args, "cp", 1, options.cp) || !positiveFlag(args, "ep", 1, options.ep) ||
      !positiveFlag(args, "ddp-bucket-size", 40000000, layout.bucketBytes) ||
      !positiveFlag(args, "recompute-num-layers", 1, options.recomputeLayers) ||
      !positiveFlag(args, "pp", 1, options.pp) ||
      !positiveFlag(args, "vpp", 1, options.virtualStages) ||
      !positiveFlag(args, "first-stage-layers", 1, options.firstStageLayers) ||
      !positiveFlag(args, "last-stage-layers", 1, options.lastStageLayers) ||
      !modelFlags(args, options))
    return 1;
  if (!args.values.count("seq-length"))
    options.seqLength = 0;
  if (!args.values.count("first-stage-layers"))
    options.firstStageLayers = 0;
  if (!args.values.count("last-stage-layers"))
    options.lastStageLayers = 0;
  if (args.values.count("gpus")) {
    int64_t gpus;
    if (!positiveFlag(args, "gpus", 1, gpus))
      return 1;
    // Each bounded before the product, which could overflow.
    if (options.tp > gpus || options.pp > gpus / options.tp ||
        options.cp > gpus / (options.tp * options.pp)) {
      errs() << "mtc: tp " << options.tp << " x cp " << options.cp << " x pp " << options.pp
             << " is more than " << gpus << " GPUs\n";
      return 1;
    }
    const int64_t modelParallel = options.tp * options.cp * options.pp;
    if (!args.values.count("dp")) {
      if (gpus % modelParallel != 0) {
        errs() << "mtc: " << gpus << " GPUs are not a multiple of tp x cp x pp = " << modelParallel
               << "\n";
        return 1;
      }
      options.dp = gpus / modelParallel;
    } else if (gpus != modelParallel * options.dp) {
      errs() << "mtc: --gpus " << gpus
             << " is not tp x cp x pp x dp = " << modelParallel * options.dp << "\n";
      return 1;
    }
  }
  options.sequenceParallel = args.switches.lookup("sp");
  options.fusions = fusionsOf(args);
  layout.distributedOptimizer = args.switches.lookup("distributed-optimizer");
  if (options.globalBatchSize % (options.microBatchSize * options.dp) != 0) {
    errs() << "mtc: global batch size " << options.globalBatchSize
           << " is not a multiple of micro-batch size " << options.microBatchSize << " x dp "
           << options.dp << "\n";
    return 1;
  }
  options.recompute = args.values.lookup("recompute");
  if (options.recompute.empty())
    options.recompute = args.switches.lookup("recompute-activations") ? "selective" : "none";
  if (options.recompute != "none" && options.recompute != "selective" &&
      options.recompute != "full")
    return usageError("--recompute must be none, selective or full, got '" +
                      options.recompute + "'");
  // Fused attention keeps no s x s tensor; selective recomputation re-runs the unfused
  // chain, whose probabilities it then does not keep.
  options.attention = args.values.lookup("attention");
  if (options.attention.empty())
    options.attention = options.recompute == "selective" ? "unfused" : "fused";
  if (options.attention != "fused" && options.attention != "unfused")
    return usageError("--attention must be fused or unfused, got '" + options.attention + "'");
  if (options.attention == "fused" && options.recompute == "selective")
    return usageError("--recompute selective re-runs unfused attention in backward; fused "
                      "attention keeps no probabilities to recompute");
  if (args.values.count("recompute-method"))
    options.recomputeMethod = args.values.lookup("recompute-method");
  if (options.recomputeMethod != "uniform" && options.recomputeMethod != "block")
    return usageError("--recompute-method must be uniform or block, got '" +
                      options.recomputeMethod + "'");
  if (options.sequenceParallel && options.tp == 1)
    return usageError("--sp splits the sequence over the tensor-parallel group: it needs "
                      "--tp > 1");
  // Megatron's --cp-comm-type: how attention reaches the other ranks' keys and values.
  if (args.values.count("cp-comm-type"))
    options.cpCommType = args.values.lookup("cp-comm-type");
  if (options.cpCommType != "all-gather" && options.cpCommType != "p2p")
    return usageError("--cp-comm-type must be all-gather or p2p, got '" + options.cpCommType + "'");
  if (options.cp > 1 && options.attention == "unfused")
    return usageError("--cp splits attention's queries over the context-parallel group, "
                      "which only fused attention does: it cannot be used with unfused "
                      "attention or --recompute selective");
  if (int status = expertLayout(layout))
    return status;
  options.printIRAfterAll = args.switches.lookup("print-ir-after-all");
  return readPrecision(args, precision, options.precision);
}

int finishLayout(const Flags &args, const std::optional<DecoderShape> &decoder,
                 StepLayout &layout, std::vector<int64_t> &inFlight) {
  CompileOptions &options = layout.options;
  // Megatron's --num-layers-per-virtual-pipeline-stage N: v = layers / (pp x N).
  if (args.values.count("layers-per-virtual-stage")) {
    int64_t perChunk;
    if (!positiveFlag(args, "layers-per-virtual-stage", 1, perChunk))
      return 1;
    if (!decoder || decoder->layers % (options.pp * perChunk) != 0) {
      errs() << "mtc: " << (decoder ? decoder->layers : 0) << " layers do not split into "
             << options.pp << " pipeline stages of chunks of " << perChunk << " layers\n";
      return 1;
    }
    options.virtualStages = decoder->layers / (options.pp * perChunk);
  }
  if (std::string error = ::mt::parseScheduleKind(args.values.lookup("schedule"),
                                                  options.virtualStages, layout.schedule);
      !error.empty())
    return usageError(error);
  if (options.pp > 1) {
    ::mt::PipelineSchedule probe;
    if (std::string error = ::mt::buildSchedule(layout.schedule, options.pp,
                                                options.virtualStages, layout.microBatches(),
                                                probe);
        !error.empty()) {
      errs() << "mtc: " << error << "\n";
      return 1;
    }
    inFlight = ::mt::checkSchedule(probe).maxInFlight;
  } else if (options.virtualStages > 1) {
    return usageError("--vpp needs --pp > 1");
  }
  return 0;
}

int readSystem(const Flags &args, SystemSpec &system) {
  if (!args.values.count("system") || !args.values.count("gpus"))
    return usageError(args.command + " needs --system and --gpus");
  const std::string name = args.values.lookup("system");
  const std::string path = systemPath(name);
  if (!llvm::sys::fs::exists(path)) {
    errs() << "mtc: no system '" << name << "': give a file, or one of " << systemNames()
           << "\n";
    return 1;
  }
  std::string error;
  if (!SystemSpec::load(path, system, error)) {
    errs() << "mtc: " << error << "\n";
    return 1;
  }
  // --runtime: the software described apart, in place of the system file's own.
  if (args.values.count("runtime")) {
    const std::string runtime = args.values.lookup("runtime");
    const std::string file = runtimePath(runtime);
    if (!llvm::sys::fs::exists(file)) {
      errs() << "mtc: no runtime '" << runtime << "': give a file, or one of " << runtimeNames()
             << "\n";
      return 1;
    }
    system.runtime = RuntimeSpec();
    if (!RuntimeSpec::load(file, system.runtime, error)) {
      errs() << "mtc: " << error << "\n";
      return 1;
    }
  }
  return 0;
}

bool loadModel(MLIRContext &context, const std::string &path, ModelFile &model) {
  std::string text;
  if (::mt::Status s = ::mt::readRegularFile(path, ::mt::limits::kModelBytes, "a model file", text);
      !s.ok()) {
    errs() << "mtc: " << s.message() << "\n";
    return false;
  }
  model.sources->AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, path),
                                    llvm::SMLoc());
  model.diagnostics = std::make_unique<SourceMgrDiagnosticHandler>(*model.sources, &context);
  model.module = parseSourceFile<ModuleOp>(model.sources, ParserConfig(&context));
  return static_cast<bool>(model.module);
}

std::string modelName(ModuleOp module, const std::string &path) {
  if (auto name = module->getAttrOfType<StringAttr>("mt.model"))
    return name.str();
  return llvm::sys::path::stem(path).str();
}

int64_t loweredSeqLength(ModuleOp module) {
  int64_t seqLength = 0;
  module.walk([&](func::FuncOp fn) {
    if (fn.getNumArguments() > 0)
      seqLength = cast<RankedTensorType>(fn.getArgumentTypes()[0]).getDimSize(1);
  });
  if (auto grid = module.lookupSymbol<shard::GridOp>("grid"))
    seqLength *= grid.getShape()[mlir::mt::kCpAxis];
  return seqLength;
}

ModelFile::ModelFile() : sources(std::make_shared<llvm::SourceMgr>()) {}
ModelFile::~ModelFile() = default;

int compileStep(const Flags &args, ModuleOp module, const std::string &path,
                StepLayout &layout, CompiledStep &out) {
  CompileOptions &options = layout.options;
  if (failed(prepareModel(module, options)))
    return 1;
  out.decoder = recogniseDecoder(module);
  const std::optional<DecoderShape> &decoder = out.decoder;
  int64_t vocab = decoder ? decoder->vocab : 0;
  std::vector<int64_t> inFlight; // per pipeline stage, in chunks
  if (int status = finishLayout(args, decoder, layout, inFlight))
    return status;
  PlanHeader &header = out.header;
  header.model = modelName(module, path);
  header.parameters = countParameters(module);
  header.microBatchSize = options.microBatchSize;
  header.globalBatchSize = options.globalBatchSize;

  if (failed(lowerToTrainStep(module, options)))
    return 1;
  out.layerBytes = savedBytesOfLayer(module, 0);
  header.seqLength = loweredSeqLength(module);
  // The real vocabulary: what the loss counts, padding excluded (every logit where the
  // loss says no more).
  module.walk([&](Operation *op) {
    if (!isa<mlir::mt::CrossEntropyOp, mlir::mt::CrossEntropyMergeOp>(op))
      return;
    if (auto classes = op->getAttrOfType<IntegerAttr>("num_classes"))
      vocab = classes.getInt();
    else if (auto loss = dyn_cast<mlir::mt::CrossEntropyOp>(op))
      vocab = cast<RankedTensorType>(loss.getLogits().getType()).getShape().back();
  });
  header.vocabSize = vocab;
  header.tp = options.tp;
  header.dp = options.dp;
  header.cp = options.cp;
  header.ep = options.ep;
  header.pp = options.pp;
  header.virtualStages = options.virtualStages;
  header.schedule = layout.schedule;
  header.sequenceParallel = options.sequenceParallel;
  header.distributedOptimizer = layout.distributedOptimizer;
  header.ddpBucketBytes = static_cast<uint64_t>(layout.bucketBytes);
  // The distributed optimizer shares its state over data x context parallel ranks (the
  // experts' over those holding the same experts).
  out.account = accountStep(module, options.precision, options.pp, inFlight,
                            options.dp * options.cp, options.ep, layout.distributedOptimizer);
  const StepAccount &account = out.account;
  if (account.costs.overflowed || account.recompute.overflowed) {
    errs() << "mtc: " << kFlopsOverflow << "\n";
    return 1;
  }
  header.costs = account.costs;
  header.memory = account.memory;
  header.stages = account.stages;
  header.stashBytes = account.stashBytes;
  header.precision = options.precision;

  return failed(emitPlan(module, header, out.plan)) ? 1 : 0;
}

} // namespace mtc
