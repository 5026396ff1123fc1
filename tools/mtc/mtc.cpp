// mtc: compiles a single-device model into an execution plan and accounts for it; the
// commands' flags are parsed here, and compiler/Driver.h and Report.h do the rest.
#include "compiler/Driver.h"
#include "compiler/ImportConfig.h"
#include "compiler/Report.h"
#include "compiler/Registration.h"
#include "core/AtomicFile.h"
#include "plan/Schedule.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/JSON.h"
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
              [--tp T] [--sp] [--dp D] [--cp C [--cp-comm-type all-gather|p2p]]
              [--pp P [--vpp V | --layers-per-virtual-stage N]
               [--schedule gpipe|1f1b|interleaved]
               [--first-stage-layers N] [--last-stage-layers N]]
              [--distributed-optimizer] [--ddp-bucket-size BYTES]
              [--recompute none|selective|full [--recompute-method uniform|block]
               [--recompute-num-layers N]] [--attention fused|unfused]
              [--attention-dropout R] [--hidden-dropout R] [--no-bias-gelu-fusion]
              [--no-bias-dropout-fusion] [--no-bias-grad-fusion]
              [--no-cross-entropy-loss-fusion] [--no-gradient-accumulation-fusion]
              [--no-norm-grad-add-fusion] [--moe-expert-capacity-factor F
               [--moe-token-drop-policy probs|position]]
              [--emit-mlir FILE] [--print-ir-after-all]

  mtc estimate MODEL --system S [--runtime R] --gpus N [the layout flags of compile]
              [--train-tokens T] [--json] [--explain]
  mtc tune MODEL --system S [--runtime R] --gpus N --global-batch-size B [--top K] [--json]
              [--seq-length S] [--precision P | --bf16 | --fp16]
              [--tp T] [--pp P] [--vpp V] [--cp C] [--micro-batch-size B] [--recompute R]
              [--max-tp T] [--max-cp C] [--max-micro-batch-size B]
              [--make-vocab-size-divisible-by N]
              [--ddp-bucket-size BYTES] [--attention-dropout R] [--hidden-dropout R]
              [--no-bias-gelu-fusion] [--no-bias-dropout-fusion] [--no-bias-grad-fusion]
              [--no-cross-entropy-loss-fusion] [--no-gradient-accumulation-fusion]
              [--no-norm-grad-add-fusion]

  mtc schedule --pp P --micro-batches M [--schedule gpipe|1f1b|interleaved] [--vpp V]

  mtc import-config config.json -o MODEL [--name NAME]

  info     prints the model's exact parameter count
  import-config
           writes the model file of a Hugging Face transformers config.json
           (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
           Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, Phi3ForCausalLM); a
           key it does not support is refused
  schedule prints each pipeline stage's order of forwards and backwards, proves that
           every receive meets its send, and gives the bubble
  compile  verify -> autodiff -> memory plan -> emit; prints parameters, model
           FLOPs per step and bytes per rank before anything runs
  estimate the iteration time of the compiled step on a described system (systems/*.json,
           or a file), by part, with TFLOP/s, MFU, memory per rank and days to train;
           --explain adds the kernels by family, as mtrun --profile lists them
  tune     every layout of N GPUs that divides and fits, estimated, the fastest first
)";

using mtc::Flags;
using mtc::usageError;

/// A command's exit code; after a misuse of the flags (2), the usage too.
int withUsage(int code) {
  if (code == 2)
    errs() << kUsage;
  return code;
}

/// The flags of a step's layout, which compile and estimate take.
const std::vector<std::string> kLayoutValues = {"micro-batch-size",
                                                "global-batch-size",
                                                "seq-length",
                                                "make-vocab-size-divisible-by",
                                                "precision",
                                                "tp",
                                                "dp",
                                                "cp",
                                                "cp-comm-type",
                                                "ep",
                                                "pp",
                                                "vpp",
                                                "layers-per-virtual-stage",
                                                "schedule",
                                                "first-stage-layers",
                                                "last-stage-layers",
                                                "ddp-bucket-size",
                                                "recompute",
                                                "recompute-method",
                                                "recompute-num-layers",
                                                "attention",
                                                "attention-dropout",
                                                "hidden-dropout",
                                                "moe-expert-capacity-factor",
                                                "moe-token-drop-policy"};

/// Parses argv against the flags `command` accepts; returns an error message or "".
std::string parseArgs(int argc, char **argv, Flags &args) {
  auto with = [](std::vector<std::string> flags, std::vector<std::string> more) {
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  };
  static const llvm::StringMap<std::vector<std::string>> valueFlags = {
      {"estimate", with(kLayoutValues, {"system", "runtime", "gpus", "train-tokens"})},
      {"tune",
       {"system",
        "runtime",
        "gpus",
        "global-batch-size",
        "seq-length",
        "make-vocab-size-divisible-by",
        "precision",
        "tp",
        "pp",
        "vpp",
        "micro-batch-size",
        "recompute",
        "max-tp",
        "max-micro-batch-size",
        "ddp-bucket-size",
        "top",
        "cp",
        "max-cp",
        "attention-dropout",
        "hidden-dropout"}},
      {"info", {"make-vocab-size-divisible-by"}},
      {"schedule", {"pp", "vpp", "micro-batches", "schedule"}},
      {"import-config", {"o", "name"}},
      {"compile", with(kLayoutValues, {"o", "emit-mlir"})}};
  std::vector<std::string> fusionSwitches;
  for (auto [flag, on] : mtc::kFusionSwitches)
    fusionSwitches.push_back(flag);
  static const llvm::StringMap<std::vector<std::string>> switchFlags = {
      {"estimate", with(fusionSwitches, {"sp", "distributed-optimizer", "recompute-activations",
                                         "bf16", "fp16", "json", "explain"})},
      {"tune", with(fusionSwitches, {"bf16", "fp16", "json"})},
      {"info", {}},
      {"schedule", {}},
      {"import-config", {}},
      {"compile", with(fusionSwitches, {"print-ir-after-all", "sp", "distributed-optimizer",
                                        "recompute-activations", "bf16", "fp16"})}};
  // Megatron's spellings of the same flags.
  static const llvm::StringMap<std::string> aliases = {
      {"tensor-model-parallel-size", "tp"},
      {"data-parallel-size", "dp"},
      {"context-parallel-size", "cp"},
      {"expert-model-parallel-size", "ep"},
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

int runInfo(MLIRContext &context, const Flags &args) {
  int64_t multiple;
  if (!mtc::positiveFlag(args, "make-vocab-size-divisible-by", 128, multiple))
    return 1;
  mtc::ModelFile model;
  if (!mtc::loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  std::optional<mtc::DecoderShape> decoder = mtc::recogniseDecoder(module);
  outs() << "model       " << mtc::modelName(module, args.model) << "\n";
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

int runImportConfig(MLIRContext &context, const Flags &args) {
  auto fail = [&](const std::string &why) {
    errs() << "mtc: " << args.model << ": " << why << "\n";
    return 1;
  };
  if (!args.values.count("o"))
    return usageError("import-config needs -o MODEL");
  ::mt::hf::ModelConfig config;
  if (::mt::Status s = ::mt::hf::readModelConfig(args.model, config); !s.ok()) {
    errs() << "mtc: " << s.message() << "\n";
    return 1;
  }
  std::string name = args.values.lookup("name");
  if (name.empty())
    name = config.modelType.empty() ? "model" : config.modelType;
  std::string text, error;
  if (!mtc::modelFromConfig(config, name, text, error))
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

int runSchedule(const Flags &args) {
  int64_t stages, chunks, microBatches;
  if (!args.values.count("pp") || !args.values.count("micro-batches"))
    return usageError("schedule needs --pp and --micro-batches");
  if (!mtc::positiveFlag(args, "pp", 1, stages) || !mtc::positiveFlag(args, "vpp", 1, chunks) ||
      !mtc::positiveFlag(args, "micro-batches", 1, microBatches))
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
  mtc::printSchedule(schedule, check, name, stages, chunks, microBatches);
  return 0;
}

int runCompile(MLIRContext &context, const Flags &args) {
  auto started = std::chrono::steady_clock::now();
  if (!args.values.count("o"))
    return usageError("compile needs -o PLAN");
  mtc::StepLayout layout;
  std::string precision;
  if (int status = mtc::readLayout(args, layout, precision))
    return status;
  mtc::ModelFile model;
  if (!mtc::loadModel(context, args.model, model))
    return 1;
  mtc::CompiledStep step;
  if (int status = mtc::compileStep(args, *model.module, args.model, layout, step))
    return status;
  const std::string &output = args.values.lookup("o");
  if (::mt::Status s = ::mt::AtomicFile::writeWhole(output, step.plan.data(), step.plan.size());
      !s.ok()) {
    errs() << "mtc: " << s.message() << "\n";
    return 1;
  }
  if (args.values.count("emit-mlir")) {
    std::string text;
    llvm::raw_string_ostream os(text);
    model.module->print(os);
    os.flush();
    if (::mt::Status s =
            ::mt::AtomicFile::writeWhole(args.values.lookup("emit-mlir"), text.data(), text.size());
        !s.ok()) {
      errs() << "mtc: " << s.message() << "\n";
      return 1;
    }
  }
  mtc::printCompile(step, layout, precision, output,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                        .count());
  return 0;
}

int runEstimate(MLIRContext &context, const Flags &args) {
  mtc::SystemSpec system;
  if (int status = mtc::readSystem(args, system))
    return status;
  mtc::StepLayout layout;
  std::string precision;
  if (int status = mtc::readLayout(args, layout, precision))
    return status;
  // A runtime that materializes attention's scores runs the unfused chain: its plan keeps
  // the probabilities for backward, and its ops are costed as that runtime runs them.
  if (system.runtime.materializedAttention) {
    if (args.values.lookup("attention") == "fused")
      return usageError("--attention fused: the runtime '" + system.runtime.name +
                        "' materializes attention's scores (unfused)");
    if (layout.options.cp > 1)
      return usageError("--cp splits fused attention's queries; the runtime '" +
                        system.runtime.name + "' materializes attention's scores (unfused)");
    layout.options.attention = "unfused";
  }
  double trainTokens = 0;
  if (args.values.count("train-tokens") &&
      (llvm::StringRef(args.values.lookup("train-tokens")).getAsDouble(trainTokens) ||
       !(trainTokens > 0)))
    return usageError("--train-tokens must be a positive number, got '" +
                      args.values.lookup("train-tokens") + "'");
  mtc::ModelFile model;
  if (!mtc::loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  if (failed(mtc::prepareModel(module, layout.options)))
    return 1;
  std::vector<int64_t> inFlight;
  if (int status = mtc::finishLayout(args, mtc::recogniseDecoder(module), layout, inFlight))
    return status;
  if (failed(mtc::lowerToTrainStep(module, layout.options)))
    return 1;
  const int64_t seqLength = mtc::loweredSeqLength(module);
  mtc::StepEstimate e;
  if (std::string error = mtc::estimateStep(mtc::profileChunks(module, system, layout.options),
                                            system, layout, e);
      !error.empty()) {
    errs() << "mtc: " << error << "\n";
    return 1;
  }
  mtc::printEstimate(e, system, layout, mtc::modelName(module, args.model), precision, seqLength,
                     trainTokens, args.switches.lookup("json"), args.switches.lookup("explain"));
  return 0;
}

int runTune(MLIRContext &context, const Flags &args) {
  auto started = std::chrono::steady_clock::now();
  mtc::SystemSpec system;
  if (int status = mtc::readSystem(args, system))
    return status;
  if (!args.values.count("global-batch-size"))
    return usageError("tune needs --global-batch-size");
  mtc::TuneRequest request;
  std::string precision;
  int64_t top;
  auto optional = [&](llvm::StringRef name, std::optional<int64_t> &out) {
    if (!args.values.count(name))
      return true;
    int64_t value;
    if (!mtc::positiveFlag(args, name, 1, value))
      return false;
    out = value;
    return true;
  };
  if (!mtc::positiveFlag(args, "gpus", 1, request.gpus) ||
      !mtc::positiveFlag(args, "global-batch-size", 1, request.globalBatchSize) ||
      !mtc::positiveFlag(args, "seq-length", 1, request.seqLength) ||
      !mtc::positiveFlag(args, "make-vocab-size-divisible-by", 128, request.vocabMultiple) ||
      !mtc::positiveFlag(args, "ddp-bucket-size", 40000000, request.bucketBytes) ||
      !mtc::positiveFlag(args, "max-tp", system.gpusPerNode, request.maxTp) ||
      !mtc::positiveFlag(args, "max-micro-batch-size", 8, request.maxMicroBatch) ||
      !mtc::positiveFlag(args, "top", 5, top) || !optional("tp", request.tp) ||
      !optional("pp", request.pp) || !optional("vpp", request.vpp) || !optional("cp", request.cp) ||
      !mtc::positiveFlag(args, "max-cp", 0, request.maxCp) ||
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
  if (int status = mtc::readPrecision(args, precision, request.precision))
    return status;
  request.fusions = mtc::fusionsOf(args);
  mtc::ModelFile model;
  if (!mtc::loadModel(context, args.model, model))
    return 1;
  ModuleOp module = *model.module;
  mtc::CompileOptions modelOptions;
  modelOptions.vocabMultiple = request.vocabMultiple;
  if (!mtc::modelFlags(args, modelOptions))
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
  return mtc::printTune(result, request, system, mtc::modelName(module, args.model), precision,
                        seqLength, seconds, top, args.switches.lookup("json"));
}

} // namespace

int main(int argc, char **argv) {
  Flags args;
  if (argc >= 2 && (llvm::StringRef(argv[1]) == "--help" || llvm::StringRef(argv[1]) == "-h")) {
    outs() << kUsage;
    return 0;
  }
  if (std::string error = parseArgs(argc, argv, args); !error.empty())
    return withUsage(usageError(error));
  if (args.command == "schedule")
    return withUsage(runSchedule(args));

  DialectRegistry registry;
  mtc::registerAll(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false); // the file:line:col says where; the op dump is noise
  if (args.command == "import-config")
    return withUsage(runImportConfig(context, args));
  if (args.command == "estimate")
    return withUsage(runEstimate(context, args));
  if (args.command == "tune")
    return withUsage(runTune(context, args));
  return withUsage(args.command == "info" ? runInfo(context, args) : runCompile(context, args));
}
