// mtc: compiles a single-device model into an execution plan and accounts for it.
//
//   mtc info MODEL [--make-vocab-size-divisible-by N]
//   mtc import-config config.json -o MODEL [--name NAME]
//   mtc compile MODEL --micro-batch-size B --global-batch-size G [--seq-length S]
//               [--make-vocab-size-divisible-by N] [--precision bf16|fp16|fp32|fp64] -o PLAN
//               [--tp T] [--sp] [--dp D] [--distributed-optimizer] [--ddp-bucket-size B]
//               [--emit-mlir FILE] [--print-ir-after-all]
#include "compiler/Accounting.h"
#include "compiler/ImportConfig.h"
#include "compiler/Pipeline.h"
#include "compiler/PlanEmitter.h"
#include "compiler/Registration.h"
#include "core/AtomicFile.h"
#include "plan/Schedule.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace mlir;
using llvm::errs;
using llvm::outs;

namespace {

constexpr const char *kUsage = R"(usage:
  mtc info MODEL [--make-vocab-size-divisible-by N]
  mtc compile MODEL --micro-batch-size B --global-batch-size G -o PLAN
              [--seq-length S] [--make-vocab-size-divisible-by N]
              [--precision bf16|fp16|fp32|fp64 | --bf16 | --fp16]
              [--tp T] [--sp] [--dp D]
              [--pp P [--vpp V | --layers-per-virtual-stage N]
               [--schedule gpipe|1f1b|interleaved]
               [--first-stage-layers N] [--last-stage-layers N]]
              [--distributed-optimizer] [--ddp-bucket-size BYTES]
              [--recompute none|selective|full [--recompute-method uniform|block]
               [--recompute-num-layers N]] [--attention fused|unfused]
              [--emit-mlir FILE] [--print-ir-after-all]

  mtc schedule --pp P --micro-batches M [--schedule gpipe|1f1b|interleaved] [--vpp V]

  mtc import-config config.json -o MODEL [--name NAME]

  info     prints the model's exact parameter count
  import-config
           writes the model file of a Hugging Face transformers config.json
           (GPT2LMHeadModel, LlamaForCausalLM); a key it does not support is refused
  schedule prints each pipeline stage's order of forwards and backwards, proves that
           every receive meets its send, and gives the bubble
  compile  verify -> autodiff -> memory plan -> emit; prints parameters, model
           FLOPs per step and bytes per rank before anything runs
)";

int usageError(const std::string &message) {
  errs() << "mtc: " << message << "\n" << kUsage;
  return 2;
}

/// Flags of one command line: `--name value`, `--name=value`, or a switch.
struct Args {
  std::string command, model;
  llvm::StringMap<std::string> values;
  llvm::StringMap<bool> switches;
};

/// Parses argv against the flags `command` accepts; returns an error message or "".
std::string parseArgs(int argc, char **argv, Args &args) {
  static const llvm::StringMap<std::vector<std::string>> valueFlags = {
      {"info", {"make-vocab-size-divisible-by"}},
      {"schedule", {"pp", "vpp", "micro-batches", "schedule"}},
      {"import-config", {"o", "name"}},
      {"compile",
       {"micro-batch-size", "global-batch-size", "seq-length", "make-vocab-size-divisible-by",
        "precision", "tp", "dp", "pp", "vpp", "layers-per-virtual-stage", "schedule",
        "first-stage-layers",
        "last-stage-layers", "ddp-bucket-size", "recompute",
        "recompute-method", "recompute-num-layers", "attention", "o", "emit-mlir"}}};
  static const llvm::StringMap<std::vector<std::string>> switchFlags = {
      {"info", {}},
      {"schedule", {}},
      {"import-config", {}},
      {"compile",
       {"print-ir-after-all", "sp", "distributed-optimizer", "recompute-activations", "bf16",
        "fp16"}}};
  // Megatron's spellings of the same flags.
  static const llvm::StringMap<std::string> aliases = {
      {"tensor-model-parallel-size", "tp"},
      {"data-parallel-size", "dp"},
      {"sequence-parallel", "sp"},
      {"use-distributed-optimizer", "distributed-optimizer"},
      {"recompute-granularity", "recompute"},
      {"decoder-first-pipeline-num-layers", "first-stage-layers"},
      {"num-layers-per-virtual-pipeline-stage", "layers-per-virtual-stage"},
      {"decoder-last-pipeline-num-layers", "last-stage-layers"},
      {"pipeline-model-parallel-size", "pp"}};
  if (argc < 2)
    return "no command given";
  args.command = argv[1];
  if (!valueFlags.count(args.command))
    return "unknown command '" + args.command + "'";
  const auto &values = valueFlags.lookup(args.command);
  const auto &switches = switchFlags.lookup(args.command);
  for (int i = 2; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (!arg.starts_with("-")) {
      if (!args.model.empty())
        return "more than one model given ('" + args.model + "', '" + arg.str() + "')";
      args.model = arg.str();
      continue;
    }
    llvm::StringRef name = arg.ltrim('-');
    auto [key, inlineValue] = name.split('=');
    bool hasInline = name.contains('=');
    if (auto alias = aliases.find(key); alias != aliases.end())
      key = alias->second;
    if (llvm::is_contained(switches, key.str()) && !hasInline) {
      args.switches[key] = true;
    } else if (llvm::is_contained(values, key.str())) {
      if (hasInline)
        args.values[key] = inlineValue.str();
      else if (i + 1 < argc)
        args.values[key] = argv[++i];
      else
        return "flag '" + arg.str() + "' needs a value";
    } else {
      return "unknown flag '" + arg.str() + "' for '" + args.command + "'";
    }
  }
  if (args.model.empty() && args.command != "schedule")
    return "no model file given";
  if (!args.model.empty() && args.command == "schedule")
    return "schedule takes no model file";
  return "";
}

/// A positive integer flag; `fallback` when absent. Returns false (and says why) on
/// anything that is not a positive integer.
bool positiveFlag(const Args &args, llvm::StringRef name, int64_t fallback, int64_t &out) {
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

/// A parsed model and the source manager its diagnostics point into: errors print as
/// file:line:col for as long as it lives.
struct ModelFile {
  std::shared_ptr<llvm::SourceMgr> sources = std::make_shared<llvm::SourceMgr>();
  std::unique_ptr<SourceMgrDiagnosticHandler> diagnostics;
  OwningOpRef<ModuleOp> module;
};

bool loadModel(MLIRContext &context, const std::string &path, ModelFile &model) {
  std::string error;
  auto file = openInputFile(path, &error);
  if (!file) {
    errs() << "mtc: " << error << "\n";
    return false;
  }
  model.sources->AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  model.diagnostics = std::make_unique<SourceMgrDiagnosticHandler>(*model.sources, &context);
  model.module = parseSourceFile<ModuleOp>(model.sources, ParserConfig(&context));
  return static_cast<bool>(model.module);
}

std::string modelName(ModuleOp module, const std::string &path) {
  if (auto name = module->getAttrOfType<StringAttr>("mt.model"))
    return name.str();
  return llvm::sys::path::stem(path).str();
}

std::string gib(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.2f GiB", bytes / 1073741824.0);
  return s;
}

int runInfo(MLIRContext &context, const Args &args) {
  int64_t multiple;
  if (!positiveFlag(args, "make-vocab-size-divisible-by", 128, multiple))
    return 1;
  ModelFile model;
  if (!loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  std::optional<mtc::DecoderShape> decoder = mtc::recogniseDecoder(module);
  outs() << "model       " << modelName(module, args.model) << "\n";
  if (decoder)
    outs() << "shape       " << decoder->layers << " layers, hidden " << decoder->hidden
           << ", vocab " << decoder->vocab << ", positions " << decoder->positions << "\n";
  outs() << "parameters  " << mtc::withCommas(mtc::countParameters(module)) << "\n";

  mtc::CompileOptions options;
  options.vocabMultiple = multiple;
  if (failed(mtc::padVocabulary(module, options)))
    return 1;
  std::optional<mtc::DecoderShape> padded = mtc::recogniseDecoder(module);
  if (decoder && padded && padded->vocab != decoder->vocab)
    outs() << "padded      " << mtc::withCommas(mtc::countParameters(module))
           << " with the vocab padded to " << padded->vocab
           << " (--make-vocab-size-divisible-by " << multiple << ")\n";
  return 0;
}

int runImportConfig(MLIRContext &context, const Args &args) {
  auto fail = [&](const std::string &why) {
    errs() << "mtc: " << args.model << ": " << why << "\n";
    return 1;
  };
  if (!args.values.count("o"))
    return usageError("import-config needs -o MODEL");
  auto buffer = llvm::MemoryBuffer::getFile(args.model);
  if (!buffer)
    return fail(buffer.getError().message());
  llvm::Expected<llvm::json::Value> json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return fail("not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *config = json->getAsObject();
  if (!config)
    return fail("not a JSON object");
  std::string name = args.values.lookup("name");
  if (name.empty())
    name = config->getString("model_type").value_or("model").str();
  std::string text, error;
  if (!mtc::modelFromConfig(*config, name, text, error))
    return fail(error);
  // What is written must be a model mtc reads.
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module)
    return fail("the model written from it does not verify");
  const std::string out = args.values.lookup("o");
  if (::mt::Status s = ::mt::AtomicFile::writeWhole(out, text.data(), text.size()); !s.ok())
    return fail(s.message());
  outs() << "mtc: wrote " << out << ": " << name << ", "
         << mtc::withCommas(mtc::countParameters(*module)) << " parameters\n";
  return 0;
}

int runSchedule(const Args &args) {
  int64_t stages, chunks, microBatches;
  if (!args.values.count("pp") || !args.values.count("micro-batches"))
    return usageError("schedule needs --pp and --micro-batches");
  if (!positiveFlag(args, "pp", 1, stages) || !positiveFlag(args, "vpp", 1, chunks) ||
      !positiveFlag(args, "micro-batches", 1, microBatches))
    return 1;
  std::string name = args.values.lookup("schedule");
  ::mt::ScheduleKind kind;
  if (std::string error = ::mt::parseScheduleKind(name, chunks, kind); !error.empty())
    return usageError(error);
  if (name.empty())
    name = ::mt::scheduleName(kind);
  ::mt::PipelineSchedule schedule;
  if (std::string error = ::mt::buildSchedule(kind, stages, chunks, microBatches, schedule);
      !error.empty()) {
    errs() << "mtc: " << error << "\n";
    return 1;
  }
  ::mt::ScheduleCheck check = ::mt::checkSchedule(schedule);
  if (!check.deadlockFree) {
    errs() << "mtc: schedule " << name << ": " << check.problem << "\n";
    return 1;
  }
  outs() << "schedule " << name << ": " << stages << " stages"
         << (chunks > 1 ? " x " + std::to_string(chunks) + " virtual" : std::string()) << ", "
         << microBatches << " micro-batches\n";
  for (int64_t s = 0; s < stages; ++s) {
    outs() << "stage " << s << ":";
    for (const ::mt::PipelineAction &a : schedule.perStage[s])
      outs() << " " << ::mt::actionName(a, chunks > 1);
    outs() << "\n";
  }
  outs() << "in flight:";
  for (int64_t n : check.maxInFlight)
    outs() << " " << n;
  outs() << "  (most forwards awaiting their backward, per stage)\n";
  outs() << llvm::format("first stage holds %.3f micro-batches of its activations",
                         static_cast<double>(check.maxInFlight[0]) / chunks);
  if (chunks > 1)
    outs() << llvm::format("; p(1 + (p-1)/(pv)) = %.3f\n",
                           stages * (1.0 + (stages - 1.0) / (stages * chunks)));
  else
    outs() << "; p = " << stages << "\n";
  outs() << llvm::format("bubble: %.4f ideal (p-1)/%s, %.4f simulated (forward 1, backward 2)\n",
                         ::mt::idealBubble(schedule), chunks > 1 ? "(v*m)" : "m",
                         check.bubble);
  outs() << "every receive meets its send: no deadlock\n";
  return 0;
}

int runCompile(MLIRContext &context, const Args &args) {
  auto started = std::chrono::steady_clock::now();
  mtc::CompileOptions options;
  if (!args.values.count("micro-batch-size") || !args.values.count("global-batch-size"))
    return usageError("compile needs --micro-batch-size and --global-batch-size");
  if (!args.values.count("o"))
    return usageError("compile needs -o PLAN");
  int64_t bucketBytes;
  if (!positiveFlag(args, "micro-batch-size", 0, options.microBatchSize) ||
      !positiveFlag(args, "global-batch-size", 0, options.globalBatchSize) ||
      !positiveFlag(args, "seq-length", 1, options.seqLength) ||
      !positiveFlag(args, "make-vocab-size-divisible-by", 1, options.vocabMultiple) ||
      !positiveFlag(args, "tp", 1, options.tp) || !positiveFlag(args, "dp", 1, options.dp) ||
      !positiveFlag(args, "ddp-bucket-size", 40000000, bucketBytes))
    return 1;
  if (!args.values.count("seq-length"))
    options.seqLength = 0;
  options.sequenceParallel = args.switches.lookup("sp");
  const bool distributedOptimizer = args.switches.lookup("distributed-optimizer");
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
  if (!positiveFlag(args, "recompute-num-layers", 1, options.recomputeLayers) ||
      !positiveFlag(args, "pp", 1, options.pp) ||
      !positiveFlag(args, "vpp", 1, options.virtualStages) ||
      !positiveFlag(args, "first-stage-layers", 1, options.firstStageLayers) ||
      !positiveFlag(args, "last-stage-layers", 1, options.lastStageLayers))
    return 1;
  if (!args.values.count("first-stage-layers"))
    options.firstStageLayers = 0;
  if (!args.values.count("last-stage-layers"))
    options.lastStageLayers = 0;
  if (options.sequenceParallel && options.tp == 1)
    return usageError("--sp splits the sequence over the tensor-parallel group: it needs "
                      "--tp > 1");
  options.printIRAfterAll = args.switches.lookup("print-ir-after-all");
  // bf16 and fp16 compute with f32 master weights, gradients and Adam state (Megatron's
  // mixed precision); fp64 exists for gradient checks against finite differences.
  std::string precision = args.values.lookup("precision");
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
  options.precision = elementTypes.lookup(precision);

  ModelFile model;
  if (!loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  if (failed(mtc::padVocabulary(module, options)))
    return 1;
  std::optional<mtc::DecoderShape> decoder = mtc::recogniseDecoder(module);
  int64_t vocab = decoder ? decoder->vocab : 0;
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
  ::mt::ScheduleKind scheduleKind;
  if (std::string error = ::mt::parseScheduleKind(args.values.lookup("schedule"),
                                                  options.virtualStages, scheduleKind);
      !error.empty())
    return usageError(error);
  std::vector<int64_t> inFlight; // per pipeline stage, in chunks
  if (options.pp > 1) {
    ::mt::PipelineSchedule probe;
    if (std::string error = ::mt::buildSchedule(
            scheduleKind, options.pp, options.virtualStages,
            options.globalBatchSize / (options.microBatchSize * options.dp), probe);
        !error.empty()) {
      errs() << "mtc: " << error << "\n";
      return 1;
    }
    inFlight = ::mt::checkSchedule(probe).maxInFlight;
  } else if (options.virtualStages > 1) {
    return usageError("--vpp needs --pp > 1");
  }
  mtc::PlanHeader header;
  header.model = modelName(module, args.model);
  header.parameters = mtc::countParameters(module);
  header.microBatchSize = options.microBatchSize;
  header.globalBatchSize = options.globalBatchSize;

  if (failed(mtc::lowerToTrainStep(module, options)))
    return 1;
  const std::optional<int64_t> layerBytes = mtc::savedBytesOfLayer(module, 0);
  module.walk([&](func::FuncOp fn) {
    if (fn.getNumArguments() > 0)
      header.seqLength = cast<RankedTensorType>(fn.getArgumentTypes()[0]).getDimSize(1);
  });
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
  header.pp = options.pp;
  header.virtualStages = options.virtualStages;
  header.schedule = scheduleKind;
  header.sequenceParallel = options.sequenceParallel;
  header.distributedOptimizer = distributedOptimizer;
  header.ddpBucketBytes = static_cast<uint64_t>(bucketBytes);
  const mtc::StepAccount account =
      mtc::accountStep(module, options.precision, options.pp, inFlight, options.dp,
                       distributedOptimizer);
  header.costs = account.costs;
  header.memory = account.memory;
  header.stashBytes = account.stashBytes;
  header.precision = options.precision;

  std::vector<uint8_t> plan;
  if (failed(mtc::emitPlan(module, header, plan)))
    return 1;
  const std::string &output = args.values.lookup("o");
  if (::mt::Status s = ::mt::AtomicFile::writeWhole(output, plan.data(), plan.size()); !s.ok()) {
    errs() << "mtc: " << s.message() << "\n";
    return 1;
  }
  if (args.values.count("emit-mlir")) {
    std::string error;
    auto out = openOutputFile(args.values.lookup("emit-mlir"), &error);
    if (!out) {
      errs() << "mtc: " << error << "\n";
      return 1;
    }
    module.print(out->os());
    out->keep();
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const int64_t ranks = options.tp * options.dp * options.pp;
  int64_t microBatches = options.globalBatchSize / (options.microBatchSize * options.dp);
  // The ops of every pipeline stage are in the module: one copy per tp x dp rank.
  const int64_t replicas = options.tp * options.dp;
  unsigned __int128 gemmPerStep =
      static_cast<unsigned __int128>(header.costs.gemmFlops) * microBatches * replicas;
  const unsigned __int128 recomputePerStep =
      static_cast<unsigned __int128>(account.recompute.gemmFlops) * microBatches * replicas;
  const unsigned __int128 recomputeOtherPerStep =
      static_cast<unsigned __int128>(account.recompute.otherFlops) * microBatches * replicas;
  unsigned __int128 otherPerStep =
      static_cast<unsigned __int128>(header.costs.otherFlops) * microBatches * replicas;
  const mtc::MemoryReport &m = header.memory;
  auto row = [](llvm::StringRef label) -> llvm::raw_ostream & {
    return outs() << "  " << llvm::left_justify(label, 20);
  };
  outs() << "mtc: " << header.model << " -> " << output << " (" << mtc::withCommas(plan.size())
         << " bytes) in " << llvm::format("%.2f", seconds) << " s\n";
  const std::string &fp = precision;
  const std::string master = precision == "fp64" ? "fp64" : "fp32";
  row("layout") << ranks << " rank" << (ranks > 1 ? "s" : "") << " (tp " << options.tp
                << ", pp " << options.pp << ", dp " << options.dp << ")"
                << (options.pp > 1
                        ? ", " + std::string(::mt::scheduleName(scheduleKind)) + " schedule"
                        : std::string())
                << (options.sequenceParallel ? ", sequence parallel" : "")
                << (distributedOptimizer ? ", distributed optimizer" : "") << ", " << fp
                << "\n";
  row("batch") << "micro-batch " << options.microBatchSize << " x " << microBatches
               << " micro-batches x dp " << options.dp << " = global batch "
               << options.globalBatchSize << ", sequence " << header.seqLength << "\n";
  row("parameters") << mtc::withCommas(header.parameters) << ", "
                    << mtc::withCommas(account.localParameters) << " per rank\n";
  row("model FLOPs/step") << mtc::withCommas(gemmPerStep)
                          << "  (GEMM work, summed over the ops of every rank)\n";
  if (decoder) {
    row("  formula") << mtc::withCommas(mtc::decoderModelFlops(
        *decoder, options.globalBatchSize, header.seqLength));
    if (decoder->positionTable && !decoder->gated && decoder->ffn == 4 * decoder->hidden &&
        decoder->kvHeads == decoder->heads && decoder->heads * decoder->headDim == decoder->hidden)
      outs() << "  72Bslh^2(1 + s/6h + V/12lh), l=" << decoder->layers
             << " h=" << decoder->hidden << " V=" << decoder->vocab << "\n";
    else
      outs() << "  12Bslh^2((1 + g/n + s/h)nd/h + " << (decoder->gated ? "3" : "2")
             << "f/2h + V/2lh), l=" << decoder->layers << " h=" << decoder->hidden
             << " n=" << decoder->heads << " g=" << decoder->kvHeads << " d=" << decoder->headDim
             << " f=" << decoder->ffn << " V=" << decoder->vocab << "\n";
  }
  row("other FLOPs/step") << mtc::withCommas(otherPerStep) << "  (elementwise, reductions)\n";
  if (options.recompute != "none") {
    const unsigned __int128 extra = recomputePerStep, model = gemmPerStep;
    row("recompute") << options.recompute
                     << (options.recompute == "full"
                             ? " (" + options.recomputeMethod + ", " +
                                   std::to_string(options.recomputeLayers) + " layer" +
                                   (options.recomputeLayers > 1 ? "s" : "") + ")"
                             : std::string())
                     << ": +" << mtc::withCommas(extra) << " GEMM FLOPs/step ("
                     << llvm::format("%.1f", model ? 100.0 * static_cast<double>(extra) /
                                                         static_cast<double>(model)
                                                   : 0.0)
                     << "% of the model's), +" << mtc::withCommas(recomputeOtherPerStep)
                     << " other\n";
  }
  outs() << "  bytes per rank\n";
  const mtc::BytesPerParameter &bytes = account.bytesPerParameter;
  row("  weights") << mtc::withCommas(m.weights) << "  (" << fp << ", " << bytes.weights
                   << " B/param)\n";
  row("  gradients") << mtc::withCommas(m.gradients) << "  (" << master << ", "
                     << bytes.gradients << " B/param)\n";
  row("  optimizer state") << mtc::withCommas(m.optimizer) << "  ("
                           << (bytes.mixed ? "fp32 master weights, " : "") << "Adam m and v, "
                           << bytes.optimizer << " B/param"
                           << (distributedOptimizer ? " / dp" : "") << ")\n";
  row("  activations") << mtc::withCommas(m.activations)
                       << (options.pp > 1 ? "  (arena + stashes of the micro-batches in flight)\n"
                                          : "  (peak of the arena, one micro-batch)\n");
  if (layerBytes)
    row("  per layer") << mtc::withCommas(*layerBytes)
                       << "  (kept for backward by layer 0, one micro-batch, "
                       << options.attention << " attention)\n";
  row("  total") << mtc::withCommas(m.total()) << "  (" << gib(m.total()) << ")\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Args args;
  if (argc >= 2 && (llvm::StringRef(argv[1]) == "--help" || llvm::StringRef(argv[1]) == "-h")) {
    outs() << kUsage;
    return 0;
  }
  if (std::string error = parseArgs(argc, argv, args); !error.empty())
    return usageError(error);
  if (args.command == "schedule")
    return runSchedule(args);

  DialectRegistry registry;
  mtc::registerAll(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false); // the file:line:col says where; the op dump is noise
  if (args.command == "import-config")
    return runImportConfig(context, args);
  return args.command == "info" ? runInfo(context, args) : runCompile(context, args);
}
