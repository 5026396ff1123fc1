// mtc: compiles a single-device model into an execution plan and accounts for it.
//
//   mtc info MODEL [--make-vocab-size-divisible-by N]
//   mtc import-config config.json -o MODEL [--name NAME]
//   mtc compile MODEL --micro-batch-size B --global-batch-size G [--seq-length S]
//               [--make-vocab-size-divisible-by N] [--precision bf16|fp16|fp32|fp64] -o PLAN
//               [--tp T] [--sp] [--dp D] [--distributed-optimizer] [--ddp-bucket-size B]
//               [--emit-mlir FILE] [--print-ir-after-all]
#include "compiler/Accounting.h"
#include "compiler/Estimate.h"
#include "compiler/ImportConfig.h"
#include "compiler/Pipeline.h"
#include "compiler/PlanEmitter.h"
#include "compiler/Registration.h"
#include "compiler/Tune.h"
#include "core/AtomicFile.h"
#include "plan/Schedule.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
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
              [--attention-dropout R] [--hidden-dropout R] [--no-bias-gelu-fusion]
              [--no-bias-dropout-fusion] [--no-cross-entropy-loss-fusion]
              [--no-gradient-accumulation-fusion] [--no-norm-grad-add-fusion]
              [--emit-mlir FILE] [--print-ir-after-all]

  mtc estimate MODEL --system S --gpus N [the layout flags of compile] [--train-tokens T]
              [--json]
  mtc tune MODEL --system S --gpus N --global-batch-size B [--top K] [--json]
              [--seq-length S] [--precision P | --bf16 | --fp16]
              [--tp T] [--pp P] [--vpp V] [--micro-batch-size B] [--recompute R]
              [--max-tp T] [--max-micro-batch-size B] [--make-vocab-size-divisible-by N]
              [--ddp-bucket-size BYTES] [--attention-dropout R] [--hidden-dropout R]
              [--no-bias-gelu-fusion] [--no-bias-dropout-fusion]
              [--no-cross-entropy-loss-fusion] [--no-gradient-accumulation-fusion]
              [--no-norm-grad-add-fusion]

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
  estimate the iteration time of the compiled step on a described system (systems/*.json,
           or a file), by part, with TFLOP/s, MFU, memory per rank and days to train
  tune     every layout of N GPUs that divides and fits, estimated, the fastest first
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

/// The fusions the switches leave on.
mtc::Fusions fusionsOf(const Args &args) {
  mtc::Fusions fusions;
  for (auto [flag, on] : mtc::kFusionSwitches)
    fusions.*on = !args.switches.lookup(flag);
  return fusions;
}

/// Parses argv against the flags `command` accepts; returns an error message or "".
std::string parseArgs(int argc, char **argv, Args &args) {
  static const std::vector<std::string> layoutValues = {
      "micro-batch-size", "global-batch-size", "seq-length", "make-vocab-size-divisible-by",
      "precision", "tp", "dp", "pp", "vpp", "layers-per-virtual-stage", "schedule",
      "first-stage-layers", "last-stage-layers", "ddp-bucket-size", "recompute",
      "recompute-method", "recompute-num-layers", "attention", "attention-dropout",
      "hidden-dropout"};
  auto with = [](std::vector<std::string> flags, std::vector<std::string> more) {
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  };
  static const llvm::StringMap<std::vector<std::string>> valueFlags = {
      {"estimate", with(layoutValues, {"system", "gpus", "train-tokens"})},
      {"tune",
       {"system", "gpus", "global-batch-size", "seq-length", "make-vocab-size-divisible-by",
        "precision", "tp", "pp", "vpp", "micro-batch-size", "recompute", "max-tp",
        "max-micro-batch-size", "ddp-bucket-size", "top", "attention-dropout",
        "hidden-dropout"}},
      {"info", {"make-vocab-size-divisible-by"}},
      {"schedule", {"pp", "vpp", "micro-batches", "schedule"}},
      {"import-config", {"o", "name"}},
      {"compile", with(layoutValues, {"o", "emit-mlir"})}};
  std::vector<std::string> fusionSwitches;
  for (auto [flag, on] : mtc::kFusionSwitches)
    fusionSwitches.push_back(flag);
  static const llvm::StringMap<std::vector<std::string>> switchFlags = {
      {"estimate",
       with(fusionSwitches,
            {"sp", "distributed-optimizer", "recompute-activations", "bf16", "fp16", "json"})},
      {"tune", with(fusionSwitches, {"bf16", "fp16", "json"})},
      {"info", {}},
      {"schedule", {}},
      {"import-config", {}},
      {"compile",
       with(fusionSwitches, {"print-ir-after-all", "sp", "distributed-optimizer",
                             "recompute-activations", "bf16", "fp16"})}};
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

/// --attention-dropout and --hidden-dropout: a rate in [0, 1) each, or, absent, the
/// model's own (negative).
bool dropoutFlags(const Args &args, mtc::CompileOptions &options) {
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
  if (failed(mtc::prepareModel(module, options)))
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

/// --precision, --bf16 or --fp16: the name (fp32 by default) and the element type.
int readPrecision(const Args &args, std::string &precision, std::string &elementType) {
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

/// The sequence length of a lowered step: its programs' token arguments are [b, s].
int64_t loweredSeqLength(ModuleOp module) {
  int64_t seqLength = 0;
  module.walk([&](func::FuncOp fn) {
    if (fn.getNumArguments() > 0)
      seqLength = cast<RankedTensorType>(fn.getArgumentTypes()[0]).getDimSize(1);
  });
  return seqLength;
}

/// The layout flags compile and estimate share, up to what needs the model. With
/// `--gpus N` (estimate), dp defaults to N / (tp x pp). Returns 0, or an exit code.
int readLayout(const Args &args, mtc::StepLayout &layout, std::string &precision) {
  mtc::CompileOptions &options = layout.options;
  if (!args.values.count("micro-batch-size") || !args.values.count("global-batch-size"))
    return usageError(args.command + " needs --micro-batch-size and --global-batch-size");
  if (!positiveFlag(args, "micro-batch-size", 0, options.microBatchSize) ||
      !positiveFlag(args, "global-batch-size", 0, options.globalBatchSize) ||
      !positiveFlag(args, "seq-length", 1, options.seqLength) ||
      !positiveFlag(args, "make-vocab-size-divisible-by", 128, options.vocabMultiple) ||
      !positiveFlag(args, "tp", 1, options.tp) || !positiveFlag(args, "dp", 1, options.dp) ||
      !positiveFlag(args, "ddp-bucket-size", 40000000, layout.bucketBytes) ||
      !positiveFlag(args, "recompute-num-layers", 1, options.recomputeLayers) ||
      !positiveFlag(args, "pp", 1, options.pp) ||
      !positiveFlag(args, "vpp", 1, options.virtualStages) ||
      !positiveFlag(args, "first-stage-layers", 1, options.firstStageLayers) ||
      !positiveFlag(args, "last-stage-layers", 1, options.lastStageLayers) ||
      !dropoutFlags(args, options))
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
    if (options.tp > gpus || options.pp > gpus) {
      errs() << "mtc: tp " << options.tp << " x pp " << options.pp << " is more than " << gpus
             << " GPUs\n";
      return 1;
    }
    const int64_t modelParallel = options.tp * options.pp;
    if (!args.values.count("dp")) {
      if (gpus % modelParallel != 0) {
        errs() << "mtc: " << gpus << " GPUs are not a multiple of tp x pp = " << modelParallel
               << "\n";
        return 1;
      }
      options.dp = gpus / modelParallel;
    } else if (gpus != modelParallel * options.dp) {
      errs() << "mtc: --gpus " << gpus << " is not tp x pp x dp = " << modelParallel * options.dp
             << "\n";
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
  options.printIRAfterAll = args.switches.lookup("print-ir-after-all");
  return readPrecision(args, precision, options.precision);
}

/// What of the layout needs the model: virtual stages given as layers per chunk, and
/// the schedule, with the most micro-batches each stage holds in flight.
int finishLayout(const Args &args, const std::optional<mtc::DecoderShape> &decoder,
                 mtc::StepLayout &layout, std::vector<int64_t> &inFlight) {
  mtc::CompileOptions &options = layout.options;
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

int runCompile(MLIRContext &context, const Args &args) {
  auto started = std::chrono::steady_clock::now();
  if (!args.values.count("o"))
    return usageError("compile needs -o PLAN");
  mtc::StepLayout layout;
  std::string precision;
  if (int status = readLayout(args, layout, precision))
    return status;
  mtc::CompileOptions &options = layout.options;
  const bool distributedOptimizer = layout.distributedOptimizer;
  const int64_t bucketBytes = layout.bucketBytes;

  ModelFile model;
  if (!loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  if (failed(mtc::prepareModel(module, options)))
    return 1;
  std::optional<mtc::DecoderShape> decoder = mtc::recogniseDecoder(module);
  int64_t vocab = decoder ? decoder->vocab : 0;
  std::vector<int64_t> inFlight; // per pipeline stage, in chunks
  if (int status = finishLayout(args, decoder, layout, inFlight))
    return status;
  const ::mt::ScheduleKind scheduleKind = layout.schedule;
  mtc::PlanHeader header;
  header.model = modelName(module, args.model);
  header.parameters = mtc::countParameters(module);
  header.microBatchSize = options.microBatchSize;
  header.globalBatchSize = options.globalBatchSize;

  if (failed(mtc::lowerToTrainStep(module, options)))
    return 1;
  const std::optional<int64_t> layerBytes = mtc::savedBytesOfLayer(module, 0);
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
  header.pp = options.pp;
  header.virtualStages = options.virtualStages;
  header.schedule = scheduleKind;
  header.sequenceParallel = options.sequenceParallel;
  header.distributedOptimizer = distributedOptimizer;
  header.ddpBucketBytes = static_cast<uint64_t>(bucketBytes);
  const mtc::StepAccount account =
      mtc::accountStep(module, options.precision, options.pp, inFlight, options.dp,
                       distributedOptimizer);
  if (account.costs.overflowed || account.recompute.overflowed) {
    errs() << "mtc: " << mtc::kFlopsOverflow << "\n";
    return 1;
  }
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
  row("  total") << mtc::withCommas(m.total()) << "  (" << mtc::binarySize(m.total()) << ")\n";
  return 0;
}


/// The system `--system` names, read; false (and why, on stderr) when it is not one.
bool readSystem(const Args &args, mtc::SystemSpec &system) {
  if (!args.values.count("system") || !args.values.count("gpus")) {
    usageError(args.command + " needs --system and --gpus");
    return false;
  }
  const std::string name = args.values.lookup("system");
  const std::string path = mtc::systemPath(name);
  if (!llvm::sys::fs::exists(path)) {
    errs() << "mtc: no system '" << name << "': give a file, or one of " << mtc::systemNames()
           << "\n";
    return false;
  }
  std::string error;
  if (!mtc::SystemSpec::load(path, system, error)) {
    errs() << "mtc: " << error << "\n";
    return false;
  }
  return true;
}

/// The figures of one estimate, for text and JSON alike.
struct Figures {
  double modelTflops, hardwareTflops, mfu, tokensPerSecond;
  bool fits;
};
Figures figuresOf(const mtc::StepEstimate &e, const mtc::SystemSpec &system,
                  const mtc::StepLayout &layout, int64_t seqLength) {
  const double gpus = static_cast<double>(layout.gpus());
  Figures f;
  f.modelTflops = static_cast<double>(e.modelFlops) / e.iteration / gpus / 1e12;
  f.hardwareTflops = static_cast<double>(e.hardwareFlops) / e.iteration / gpus / 1e12;
  f.mfu = f.modelTflops * 1e12 / system.peak(layout.options.precision);
  f.tokensPerSecond =
      static_cast<double>(layout.options.globalBatchSize * seqLength) / e.iteration;
  f.fits = e.account.memory.total() <= system.planBytes();
  return f;
}

/// The estimate as a JSON object (`mtc estimate --json`, and each of tune's candidates).
llvm::json::Object estimateJson(const mtc::StepEstimate &e, const mtc::SystemSpec &system,
                                const mtc::StepLayout &layout, int64_t seqLength) {
  const Figures f = figuresOf(e, system, layout, seqLength);
  const mtc::StepEstimate::Parts &p = e.parts;
  return llvm::json::Object{
      {"layout", mtc::layoutFlags(layout)},
      {"iteration_seconds", e.iteration},
      {"model_tflops_per_gpu", f.modelTflops},
      {"hardware_tflops_per_gpu", f.hardwareTflops},
      {"mfu", f.mfu},
      {"tokens_per_second", f.tokensPerSecond},
      {"memory_bytes_per_rank", e.account.memory.total()},
      {"fits", f.fits},
      {"model_flops_per_step", static_cast<double>(e.modelFlops)},
      {"bubble", e.bubble},
      {"critical_stage", e.criticalStage},
      {"parts",
       llvm::json::Object{{"forward", p.forward},
                          {"backward", p.backward},
                          {"recompute", p.recompute},
                          {"tensor_parallel", p.tensorParallel},
                          {"sequence_parallel", p.sequenceParallel},
                          {"pipeline_bubble", p.pipeline},
                          {"gradient_reduction", p.gradients},
                          {"optimizer", p.optimizer}}},
      {"bytes_sent_per_rank",
       llvm::json::Object{{"tensor_parallel_per_micro_batch", e.tensorParallelBytes},
                          {"sequence_parallel_per_micro_batch", e.sequenceParallelBytes},
                          {"pipeline_message", e.pipelineMessageBytes},
                          {"gradient_reduction", e.gradientBytes}}}};
}

int runEstimate(MLIRContext &context, const Args &args) {
  mtc::SystemSpec system;
  if (!readSystem(args, system))
    return 1;
  mtc::StepLayout layout;
  std::string precision;
  if (int status = readLayout(args, layout, precision))
    return status;
  double trainTokens = 0;
  if (args.values.count("train-tokens") &&
      (llvm::StringRef(args.values.lookup("train-tokens")).getAsDouble(trainTokens) ||
       !(trainTokens > 0)))
    return usageError("--train-tokens must be a positive number, got '" +
                      args.values.lookup("train-tokens") + "'");
  ModelFile model;
  if (!loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  if (failed(mtc::prepareModel(module, layout.options)))
    return 1;
  std::vector<int64_t> inFlight;
  if (int status = finishLayout(args, mtc::recogniseDecoder(module), layout, inFlight))
    return status;
  if (failed(mtc::lowerToTrainStep(module, layout.options)))
    return 1;
  const int64_t seqLength = loweredSeqLength(module);
  mtc::StepEstimate e;
  if (std::string error = mtc::estimateStep(mtc::profileChunks(module, system, layout.options),
                                            system, layout, e);
      !error.empty()) {
    errs() << "mtc: " << error << "\n";
    return 1;
  }
  const Figures f = figuresOf(e, system, layout, seqLength);
  const double days = trainTokens / f.tokensPerSecond / 86400.0;
  const double gpuHours = days * 24.0 * static_cast<double>(layout.gpus());
  if (args.switches.lookup("json")) {
    llvm::json::Object o = estimateJson(e, system, layout, seqLength);
    o["model"] = modelName(module, args.model);
    o["system"] = system.name;
    o["gpus"] = layout.gpus();
    if (trainTokens > 0) {
      o["train_days"] = days;
      o["gpu_hours"] = gpuHours;
    }
    outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
    return 0;
  }
  const mtc::StepEstimate::Parts &p = e.parts;
  auto row = [](llvm::StringRef label) -> llvm::raw_ostream & {
    return outs() << "  " << llvm::left_justify(label, 22);
  };
  auto part = [&](llvm::StringRef label, double seconds) -> llvm::raw_ostream & {
    return row(label) << llvm::format("%10.4f s %5.1f%%", seconds,
                                      100.0 * seconds / e.iteration);
  };
  const mtc::CompileOptions &o = layout.options;
  outs() << "mtc estimate: " << modelName(module, args.model) << " on " << layout.gpus()
         << " x " << system.gpu << " (" << system.name << ")\n";
  row("layout") << mtc::layoutFlags(layout) << ", " << precision << "\n";
  row("iteration") << llvm::format("%10.4f s", e.iteration) << "  (stage " << e.criticalStage
                   << " finishes last)\n";
  part("  forward", p.forward) << "  (kernels)\n";
  part("  backward", p.backward) << "\n";
  if (o.recompute != "none")
    part("  recompute", p.recompute) << "  (" << o.recompute << ")\n";
  if (o.tp > 1)
    part("  tp collectives", p.tensorParallel)
        << "  (" << mtc::withCommas(e.tensorParallelBytes)
        << " bytes sent per micro-batch)\n";
  if (o.sequenceParallel)
    part("  sp collectives", p.sequenceParallel)
        << "  (" << mtc::withCommas(e.sequenceParallelBytes)
        << " bytes sent per micro-batch; along the sequence)\n";
  if (o.pp > 1)
    part("  pipeline bubble", p.pipeline)
        << llvm::format("  (%s, %lld micro-batches: %.4f of busy time; (p-1)/(vm) = %.4f; "
                        "messages of %s bytes)\n",
                        ::mt::scheduleName(layout.schedule),
                        static_cast<long long>(layout.microBatches()), e.bubble,
                        (o.pp - 1.0) / (static_cast<double>(o.virtualStages) *
                                        static_cast<double>(layout.microBatches())),
                        mtc::withCommas(e.pipelineMessageBytes).c_str());
  part("  gradient reduction", p.gradients)
      << "  (" << mtc::withCommas(e.gradientBytes) << " bytes sent; not overlapped)\n";
  part("  optimizer", p.optimizer) << "  (Adam, memory-bound)\n";
  row("model FLOPs/step") << mtc::withCommas(e.modelFlops) << "\n";
  row("throughput") << llvm::format(
      "%.1f TFLOP/s per GPU (model), %.1f (hardware), MFU %.1f%% of %.0f TFLOP/s; "
      "%.0f tokens/s\n",
      f.modelTflops, f.hardwareTflops, 100.0 * f.mfu, system.peak(o.precision) / 1e12,
      f.tokensPerSecond);
  row("memory per rank") << mtc::withCommas(e.account.memory.total()) << " bytes ("
                         << mtc::binarySize(e.account.memory.total()) << " of the "
                         << mtc::binarySize(system.planBytes()) << " a plan may use: "
                         << mtc::binarySize(system.memoryBytes) << " less "
                         << mtc::binarySize(system.reservedBytes)
                         << " reserved): " << (f.fits ? "fits" : "does not fit") << "\n";
  if (trainTokens > 0)
    row("training") << llvm::format("%.4g tokens: %.1f days, %.3g GPU-hours\n", trainTokens,
                                    days, gpuHours);
  return 0;
}

int runTune(MLIRContext &context, const Args &args) {
  auto started = std::chrono::steady_clock::now();
  mtc::SystemSpec system;
  if (!readSystem(args, system))
    return 1;
  if (!args.values.count("global-batch-size"))
    return usageError("tune needs --global-batch-size");
  mtc::TuneRequest request;
  std::string precision;
  int64_t top;
  auto optional = [&](llvm::StringRef name, std::optional<int64_t> &out) {
    if (!args.values.count(name))
      return true;
    int64_t value;
    if (!positiveFlag(args, name, 1, value))
      return false;
    out = value;
    return true;
  };
  if (!positiveFlag(args, "gpus", 1, request.gpus) ||
      !positiveFlag(args, "global-batch-size", 1, request.globalBatchSize) ||
      !positiveFlag(args, "seq-length", 1, request.seqLength) ||
      !positiveFlag(args, "make-vocab-size-divisible-by", 128, request.vocabMultiple) ||
      !positiveFlag(args, "ddp-bucket-size", 40000000, request.bucketBytes) ||
      !positiveFlag(args, "max-tp", system.gpusPerNode, request.maxTp) ||
      !positiveFlag(args, "max-micro-batch-size", 8, request.maxMicroBatch) ||
      !positiveFlag(args, "top", 5, top) || !optional("tp", request.tp) ||
      !optional("pp", request.pp) || !optional("vpp", request.vpp) ||
      !optional("micro-batch-size", request.microBatchSize))
    return 1;
  if (!args.values.count("seq-length"))
    request.seqLength = 0;
  // The search runs over divisors and powers of two of these: bound them.
  for (auto [name, value] : {std::pair{"gpus", request.gpus},
                             {"max-micro-batch-size", request.maxMicroBatch},
                             {"global-batch-size", request.globalBatchSize}})
    if (value > (int64_t(1) << 24)) {
      errs() << "mtc: --" << name << " " << value << " is more than tune searches (2^24)\n";
      return 1;
    }
  if (request.microBatchSize && *request.microBatchSize > request.globalBatchSize)
    return usageError("--micro-batch-size is larger than --global-batch-size");
  if (args.values.count("recompute")) {
    request.recompute = args.values.lookup("recompute");
    if (*request.recompute != "none" && *request.recompute != "selective" &&
        *request.recompute != "full")
      return usageError("--recompute must be none, selective or full, got '" +
                        *request.recompute + "'");
  }
  if (int status = readPrecision(args, precision, request.precision))
    return status;
  request.fusions = fusionsOf(args);
  ModelFile model;
  if (!loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  mtc::CompileOptions modelOptions;
  modelOptions.vocabMultiple = request.vocabMultiple;
  if (!dropoutFlags(args, modelOptions))
    return 1;
  if (failed(mtc::prepareModel(module, modelOptions)))
    return 1;
  std::optional<mtc::DecoderShape> decoder = mtc::recogniseDecoder(module);
  const int64_t seqLength =
      request.seqLength ? request.seqLength : decoder ? decoder->positions : 0;
  mtc::TuneResult result = mtc::tune(module, system, request);
  if (!result.error.empty()) {
    errs() << "mtc: " << result.error << "\n";
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const size_t shown = std::min<size_t>(result.fitting.size(), static_cast<size_t>(top));
  if (args.switches.lookup("json")) {
    llvm::json::Array candidates, rejected;
    for (size_t i = 0; i < shown; ++i)
      candidates.push_back(estimateJson(result.fitting[i].estimate, system,
                                        result.fitting[i].layout, seqLength));
    for (const mtc::TuneCandidate &c : result.rejected)
      rejected.push_back(llvm::json::Object{{"layout", mtc::layoutFlags(c.layout)},
                                            {"reason", c.rejected}});
    llvm::json::Object o{{"model", modelName(module, args.model)},
                         {"system", system.name},
                         {"gpus", request.gpus},
                         {"searched", static_cast<int64_t>(result.fitting.size() +
                                                           result.rejected.size())},
                         {"fitting", static_cast<int64_t>(result.fitting.size())},
                         {"lowerings", result.lowerings},
                         {"seconds", seconds},
                         {"candidates", std::move(candidates)},
                         {"rejected", std::move(rejected)}};
    outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
    return result.fitting.empty() ? 1 : 0;
  }
  outs() << "mtc tune: " << modelName(module, args.model) << " on " << request.gpus << " x "
         << system.gpu << " (" << system.name << "), global batch "
         << request.globalBatchSize << ", " << precision << "\n";
  outs() << "  searched " << result.fitting.size() + result.rejected.size() << " layouts ("
         << result.lowerings << " lowerings) in " << llvm::format("%.2f", seconds) << " s: "
         << result.fitting.size() << " fit, " << result.rejected.size() << " rejected\n";
  for (size_t i = 0; i < shown; ++i) {
    const mtc::TuneCandidate &c = result.fitting[i];
    const Figures f = figuresOf(c.estimate, system, c.layout, seqLength);
    outs() << llvm::format("  %2zu. %8.3f s/iter  MFU %5.1f%%  %6.1f TFLOP/s  %6.2f GiB  ",
                           i + 1, c.estimate.iteration, 100.0 * f.mfu, f.modelTflops,
                           c.estimate.account.memory.total() / 1073741824.0)
           << mtc::layoutFlags(c.layout) << "\n";
  }
  // Why the rest were dropped: how many for each reason, with the first of each.
  std::map<std::string, std::pair<int64_t, const mtc::TuneCandidate *>> reasons;
  for (const mtc::TuneCandidate &c : result.rejected) {
    std::string reason = c.rejected.substr(0, c.rejected.find_first_of("0123456789"));
    auto &entry = reasons[reason];
    if (!entry.first++)
      entry.second = &c;
  }
  if (!reasons.empty())
    outs() << "  rejected, by reason (the first of each):\n";
  for (const auto &[reason, entry] : reasons)
    outs() << "    " << entry.first << " x " << entry.second->rejected << "  ("
           << mtc::layoutFlags(entry.second->layout) << ")\n";
  if (result.fitting.empty()) {
    errs() << "mtc: no layout of " << request.gpus << " GPUs fits\n";
    return 1;
  }
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
  if (args.command == "estimate")
    return runEstimate(context, args);
  if (args.command == "tune")
    return runTune(context, args);
  return args.command == "info" ? runInfo(context, args) : runCompile(context, args);
}
