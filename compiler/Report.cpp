#include "compiler/Report.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using llvm::errs;
using llvm::outs;

namespace mtc {
namespace {

/// The figures of one estimate, for text and JSON alike.
struct Figures {
  double modelTflops, hardwareTflops, mfu, tokensPerSecond;
  bool fits;
};

Figures figuresOf(const StepEstimate &e, const SystemSpec &system,
                  const StepLayout &layout, int64_t seqLength) {
  const double gpus = static_cast<double>(layout.gpus());
  Figures f;
  f.modelTflops = static_cast<double>(e.modelFlops) / e.iteration / gpus / 1e12;
  f.hardwareTflops = static_cast<double>(e.hardwareFlops) / e.iteration / gpus / 1e12;
  f.mfu = f.modelTflops * 1e12 / system.peak(layout.options.precision);
  f.tokensPerSecond =
      static_cast<double>(layout.options.globalBatchSize * seqLength) / e.iteration;
  f.fits = e.gpuBytes <= system.planBytes();
  return f;
}

/// The estimate as a JSON object (`mtc estimate --json`, and each of tune's candidates).
llvm::json::Object estimateJson(const StepEstimate &e, const SystemSpec &system,
                                const StepLayout &layout, int64_t seqLength) {
  const Figures f = figuresOf(e, system, layout, seqLength);
  const StepEstimate::Parts &p = e.parts;
  return llvm::json::Object{
      {"layout", layoutFlags(layout)},
      {"iteration_seconds", e.iteration},
      {"model_tflops_per_gpu", f.modelTflops},
      {"hardware_tflops_per_gpu", f.hardwareTflops},
      {"mfu", f.mfu},
      {"tokens_per_second", f.tokensPerSecond},
      {"memory_bytes_per_rank", e.account.memory.total()},
      {"workspace_bytes_per_rank", e.workspaceBytes},
      {"gpu_bytes_per_rank", e.gpuBytes},
      {"fits", f.fits},
      {"model_flops_per_step", static_cast<double>(e.modelFlops)},
      {"bubble", e.bubble},
      {"critical_stage", e.criticalStage},
      {"parts", llvm::json::Object{{"forward", p.forward},
                                   {"backward", p.backward},
                                   {"recompute", p.recompute},
                                   {"tensor_parallel", p.tensorParallel},
                                   {"sequence_parallel", p.sequenceParallel},
                                   {"context_parallel", p.contextParallel},
                                   {"expert_parallel", p.expertParallel},
                                   {"host_gaps", p.host},
                                   {"pipeline_bubble", p.pipeline},
                                   {"gradient_reduction", p.gradients},
                                   {"gradient_reduction_overlapped", p.overlapped},
                                   {"optimizer", p.optimizer}}},
      {"bytes_sent_per_rank",
       llvm::json::Object{{"tensor_parallel_per_micro_batch", e.tensorParallelBytes},
                          {"sequence_parallel_per_micro_batch", e.sequenceParallelBytes},
                          {"context_parallel_per_micro_batch", e.contextParallelBytes},
                          {"expert_parallel_per_micro_batch", e.expertParallelBytes},
                          {"pipeline_message", e.pipelineMessageBytes},
                          {"gradient_reduction", e.gradientBytes}}}};
}

} // namespace

void printCompile(const CompiledStep &step, const StepLayout &layout,
                  const std::string &precision, const std::string &output, double seconds) {
  const CompileOptions &options = layout.options;
  const bool distributedOptimizer = layout.distributedOptimizer;
  const PlanHeader &header = step.header;
  const StepAccount &account = step.account;
  const std::optional<DecoderShape> &decoder = step.decoder;
  const std::optional<int64_t> &layerBytes = step.layerBytes;
  const ::mt::ScheduleKind scheduleKind = layout.schedule;
  const int64_t ranks = options.tp * options.cp * options.dp * options.pp;
  int64_t microBatches = options.globalBatchSize / (options.microBatchSize * options.dp);
  // The ops of every pipeline stage are in the module: one copy per tp x cp x dp rank
  // (a context-parallel rank's ops are its share of the micro-batch's).
  const int64_t replicas = options.tp * options.cp * options.dp;
  unsigned __int128 gemmPerStep =
      static_cast<unsigned __int128>(header.costs.gemmFlops) * microBatches * replicas;
  const unsigned __int128 recomputePerStep =
      static_cast<unsigned __int128>(account.recompute.gemmFlops) * microBatches * replicas;
  const unsigned __int128 recomputeOtherPerStep =
      static_cast<unsigned __int128>(account.recompute.otherFlops) * microBatches * replicas;
  unsigned __int128 otherPerStep =
      static_cast<unsigned __int128>(header.costs.otherFlops) * microBatches * replicas;
  const MemoryReport &m = header.memory;
  auto row = [](llvm::StringRef label) -> llvm::raw_ostream & {
    return outs() << "  " << llvm::left_justify(label, 20);
  };
  outs() << "mtc: " << header.model << " -> " << output << " (" << withCommas(step.plan.size())
         << " bytes) in " << llvm::format("%.2f", seconds) << " s\n";
  const std::string &fp = precision;
  const std::string master = precision == "fp64" ? "fp64" : "fp32";
  row("layout") << ranks << " rank" << (ranks > 1 ? "s" : "") << " (tp " << options.tp << ", pp "
                << options.pp << ", dp " << options.dp
                << (options.cp > 1 ? ", cp " + std::to_string(options.cp) : std::string())
                << (options.ep > 1 ? ", ep " + std::to_string(options.ep) : std::string()) << ")"
                << (options.pp > 1
                        ? ", " + std::string(::mt::scheduleName(scheduleKind)) + " schedule"
                        : std::string())
                << (options.sequenceParallel ? ", sequence parallel" : "")
                << (distributedOptimizer ? ", distributed optimizer" : "") << ", " << fp << "\n";
  row("batch") << "micro-batch " << options.microBatchSize << " x " << microBatches
               << " micro-batches x dp " << options.dp << " = global batch "
               << options.globalBatchSize << ", sequence " << header.seqLength << "\n";
  row("parameters") << withCommas(header.parameters) << ", " << withCommas(account.localParameters)
                    << (options.pp > 1 ? " on the stage that holds the most" : " per rank") << "\n";
  row("model FLOPs/step") << withCommas(gemmPerStep)
                          << "  (GEMM work, summed over the ops of every rank)\n";
  if (decoder) {
    row("  formula") << withCommas(decoderModelFlops(
        *decoder, options.globalBatchSize, header.seqLength));
    if (decoder->positionTable && !decoder->gated && decoder->ffn == 4 * decoder->hidden &&
        decoder->kvHeads == decoder->heads && decoder->heads * decoder->headDim == decoder->hidden)
      outs() << "  72Bslh^2(1 + s/6h + V/12lh), l=" << decoder->layers
             << " h=" << decoder->hidden << " V=" << decoder->vocab << "\n";
    else
      outs() << "  12Bslh^2((1 + g/n + s/h)nd/h + " << (decoder->gated ? "3" : "2")
             << (decoder->experts ? "kf/2h + E/2h" : "f/2h") << " + V/2lh), l=" << decoder->layers
             << " h=" << decoder->hidden << " n=" << decoder->heads << " g=" << decoder->kvHeads
             << " d=" << decoder->headDim << " f=" << decoder->ffn
             << (decoder->experts ? " k=" + std::to_string(decoder->topk) +
                                        " E=" + std::to_string(decoder->experts)
                                  : std::string())
             << " V=" << decoder->vocab << "\n";
  }
  row("other FLOPs/step") << withCommas(otherPerStep) << "  (elementwise, reductions)\n";
  if (options.recompute != "none") {
    const unsigned __int128 extra = recomputePerStep, model = gemmPerStep;
    row("recompute") << options.recompute
                     << (options.recompute == "full"
                             ? " (" + options.recomputeMethod + ", " +
                                   std::to_string(options.recomputeLayers) + " layer" +
                                   (options.recomputeLayers > 1 ? "s" : "") + ")"
                             : std::string())
                     << ": +" << withCommas(extra) << " GEMM FLOPs/step ("
                     << llvm::format("%.1f", model ? 100.0 * static_cast<double>(extra) /
                                                         static_cast<double>(model)
                                                   : 0.0)
                     << "% of the model's), +" << withCommas(recomputeOtherPerStep)
                     << " other\n";
  }
  outs() << "  bytes per rank\n";
  const BytesPerParameter &bytes = account.bytesPerParameter;
  row("  weights") << withCommas(m.weights) << "  (" << fp << ", " << bytes.weights
                   << " B/param)\n";
  row("  gradients") << withCommas(m.gradients) << "  (" << master << ", "
                     << bytes.gradients << " B/param)\n";
  row("  optimizer state") << withCommas(m.optimizer) << "  ("
                           << (bytes.mixed ? "fp32 master weights, " : "") << "Adam m and v, "
                           << bytes.optimizer << " B/param"
                           << (!distributedOptimizer ? ""
                               : options.cp > 1      ? " / (dp x cp)"
                                                     : " / dp")
                           << (!distributedOptimizer || options.ep == 1 ? ""
                               : options.cp > 1 ? "; the experts' / (dp x cp / ep)"
                                                : "; the experts' / (dp / ep)")
                           << ")\n";
  row("  activations") << withCommas(m.activations)
                       << (options.pp > 1 ? "  (arena + stashes of the micro-batches in flight)\n"
                                          : "  (peak of the arena, one micro-batch)\n");
  if (layerBytes)
    row("  per layer") << withCommas(*layerBytes)
                       << "  (kept for backward by layer 0, one micro-batch, "
                       << options.attention << " attention)\n";
  row("  total") << withCommas(m.total()) << "  (" << binarySize(m.total()) << ")"
                 << (header.stages.size() > 1 ? ", the stage that holds the most" : "") << "\n";
  if (header.stages.size() > 1) {
    row("  per stage");
    for (size_t s = 0; s < header.stages.size(); ++s)
      outs() << (s ? ", " : "") << withCommas(header.stages[s].total());
    outs() << "\n";
  }
}

/// The critical stage's kernels by family, per step, in `mtrun --profile`'s names and
/// columns (and the bytes each family moves, where the profile cannot know them).
void printFamilies(const StepEstimate &e) {
  std::vector<std::pair<std::string, FamilyCost>> rows(e.families.begin(), e.families.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  FamilyCost total;
  for (const auto &row : rows)
    total.add(row.second);
  const double step = total.seconds + e.parts.host + e.parts.pipeline;
  outs() << "  by kernel family: the critical stage's rank, per step (mtrun --profile's names)\n"
         << llvm::format("  %-26s %9s %11s %7s %9s %10s\n", "opcode or part", "runs/step",
                         "ms/step", "share", "TFLOP/s", "GB/s");
  auto print = [&](const std::string &name, const FamilyCost &c) {
    std::string tflops, gbs;
    if (c.flops > 0 && c.seconds > 0)
      tflops = llvm::formatv("{0:F1}", c.flops / c.seconds / 1e12).str();
    if (c.bytes > 0 && c.seconds > 0)
      gbs = llvm::formatv("{0:F1}", c.bytes / c.seconds / 1e9).str();
    outs() << llvm::format("  %-26s %9.0f %11.3f %6.1f%% %9s %10s\n", name.c_str(), c.runs,
                           c.seconds * 1e3, 100.0 * c.seconds / step, tflops.c_str(), gbs.c_str());
  };
  for (const auto &[name, cost] : rows)
    print(name, cost);
  if (e.parts.host > 0)
    print("(host gaps)", {0, e.parts.host, 0, 0});
  if (e.parts.pipeline > 0)
    print("(pipeline bubble)", {0, e.parts.pipeline, 0, 0});
  print("total", {total.runs, step, total.flops, total.bytes});
}

void printEstimate(const StepEstimate &e, const SystemSpec &system, const StepLayout &layout,
                   const std::string &model, const std::string &precision, int64_t seqLength,
                   double trainTokens, bool json, bool explain) {
  const Figures f = figuresOf(e, system, layout, seqLength);
  const double days = trainTokens / f.tokensPerSecond / 86400.0;
  const double gpuHours = days * 24.0 * static_cast<double>(layout.gpus());
  if (json) {
    llvm::json::Object o = estimateJson(e, system, layout, seqLength);
    o["model"] = model;
    o["system"] = system.name;
    o["gpus"] = layout.gpus();
    if (trainTokens > 0) {
      o["train_days"] = days;
      o["gpu_hours"] = gpuHours;
    }
    llvm::json::Object families;
    for (const auto &[name, c] : e.families)
      families[name] = llvm::json::Object{
          {"runs", c.runs}, {"seconds", c.seconds}, {"flops", c.flops}, {"bytes", c.bytes}};
    o["families"] = std::move(families);
    outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
    return;
  }
  const StepEstimate::Parts &p = e.parts;
  auto row = [](llvm::StringRef label) -> llvm::raw_ostream & {
    return outs() << "  " << llvm::left_justify(label, 22);
  };
  auto part = [&](llvm::StringRef label, double seconds) -> llvm::raw_ostream & {
    return row(label) << llvm::format("%10.4f s %5.1f%%", seconds,
                                      100.0 * seconds / e.iteration);
  };
  const CompileOptions &o = layout.options;
  outs() << "mtc estimate: " << model << " on " << layout.gpus()
         << " x " << system.gpu << " (" << system.name << ")\n";
  row("layout") << layoutFlags(layout) << ", " << precision << "\n";
  row("runtime") << system.runtime.name << "\n";
  row("iteration") << llvm::format("%10.4f s", e.iteration) << "  (stage " << e.criticalStage
                   << " finishes last)\n";
  part("  forward", p.forward) << "  (kernels)\n";
  part("  backward", p.backward) << "\n";
  if (o.recompute != "none")
    part("  recompute", p.recompute) << "  (" << o.recompute << ")\n";
  if (o.tp > 1)
    part("  tp collectives", p.tensorParallel)
        << "  (" << withCommas(e.tensorParallelBytes)
        << " bytes sent per micro-batch)\n";
  if (o.sequenceParallel)
    part("  sp collectives", p.sequenceParallel)
        << "  (" << withCommas(e.sequenceParallelBytes)
        << " bytes sent per micro-batch; along the sequence)\n";
  if (o.cp > 1)
    part("  cp collectives", p.contextParallel)
        << "  (" << withCommas(e.contextParallelBytes)
        << " bytes sent per micro-batch; attention's keys and values)\n";
  if (o.ep > 1)
    part("  ep all-to-all", p.expertParallel)
        << "  (" << withCommas(e.expertParallelBytes)
        << " bytes sent per micro-batch; a mixture's tokens to their experts and back)\n";
  if (o.pp > 1)
    part("  pipeline bubble", p.pipeline)
        << llvm::format("  (%s, %lld micro-batches: %.4f of busy time; (p-1)/(vm) = %.4f; "
                        "messages of %s bytes)\n",
                        ::mt::scheduleName(layout.schedule),
                        static_cast<long long>(layout.microBatches()), e.bubble,
                        (o.pp - 1.0) / (static_cast<double>(o.virtualStages) *
                                        static_cast<double>(layout.microBatches())),
                        withCommas(e.pipelineMessageBytes).c_str());
  const RuntimeSpec &runtime = system.runtime;
  if (runtime.launchGap > 0)
    part("  host gaps", p.host) << llvm::format(
        "  (%.1f us a launch, %s)\n", runtime.launchGap * 1e6,
        runtime.graphs ? "the stretches between collectives replayed as graphs" : "no graphs");
  part("  gradient reduction", p.gradients)
      << "  (" << withCommas(e.gradientBytes) << " bytes sent; "
      << (p.overlapped > 0 ? llvm::formatv("{0:F4} s more overlapped", p.overlapped).str()
                           : std::string("not overlapped"))
      << ")\n";
  part("  optimizer", p.optimizer) << "  (zeroing, gradient norm, Adam; memory-bound)\n";
  row("model FLOPs/step") << withCommas(e.modelFlops) << "\n";
  row("throughput") << llvm::format(
      "%.1f TFLOP/s per GPU (model), %.1f (hardware: recomputation counted, as Narayanan et al. "
      "report), MFU %.1f%% of %.0f TFLOP/s; "
      "%.0f tokens/s\n",
      f.modelTflops, f.hardwareTflops, 100.0 * f.mfu, system.peak(o.precision) / 1e12,
      f.tokensPerSecond);
  llvm::raw_ostream &os = row("memory per rank");
  os << withCommas(e.account.memory.total()) << " bytes";
  if (e.workspaceBytes > 0)
    os << "; on a GPU " << withCommas(e.gpuBytes)
       << " with the CUDA backend's workspaces (cuDNN's attention, copies of misaligned rows)";
  os << " (" << binarySize(e.gpuBytes) << " of the " << binarySize(system.planBytes())
     << " a plan may use: " << binarySize(system.memoryBytes) << " less "
     << binarySize(system.reservedBytes) << " reserved): " << (f.fits ? "fits" : "does not fit")
     << "\n";
  if (trainTokens > 0)
    row("training") << llvm::format("%.4g tokens: %.1f days, %.3g GPU-hours\n", trainTokens,
                                    days, gpuHours);
  if (explain)
    printFamilies(e);
}

int printTune(const TuneResult &result, const TuneRequest &request, const SystemSpec &system,
              const std::string &model, const std::string &precision, int64_t seqLength,
              double seconds, int64_t top, bool json) {
  const size_t shown = std::min<size_t>(result.fitting.size(), static_cast<size_t>(top));
  if (json) {
    llvm::json::Array candidates, rejected;
    for (size_t i = 0; i < shown; ++i)
      candidates.push_back(estimateJson(result.fitting[i].estimate, system,
                                        result.fitting[i].layout, seqLength));
    for (const TuneCandidate &c : result.rejected)
      rejected.push_back(llvm::json::Object{{"layout", layoutFlags(c.layout)},
                                            {"reason", c.rejected}});
    llvm::json::Object o{{"model", model},
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
  outs() << "mtc tune: " << model << " on " << request.gpus << " x "
         << system.gpu << " (" << system.name << "), global batch "
         << request.globalBatchSize << ", " << precision << "\n";
  outs() << "  searched " << result.fitting.size() + result.rejected.size() << " layouts ("
         << result.lowerings << " lowerings) in " << llvm::format("%.2f", seconds) << " s: "
         << result.fitting.size() << " fit, " << result.rejected.size() << " rejected\n";
  for (size_t i = 0; i < shown; ++i) {
    const TuneCandidate &c = result.fitting[i];
    const Figures f = figuresOf(c.estimate, system, c.layout, seqLength);
    outs() << llvm::format("  %2zu. %8.3f s/iter  MFU %5.1f%%  %6.1f TFLOP/s  %6.2f GiB  ", i + 1,
                           c.estimate.iteration, 100.0 * f.mfu, f.modelTflops,
                           c.estimate.gpuBytes / 1073741824.0)
           << layoutFlags(c.layout) << "\n";
  }
  // Why the rest were dropped: how many for each reason, with the first of each.
  std::map<std::string, std::pair<int64_t, const TuneCandidate *>> reasons;
  for (const TuneCandidate &c : result.rejected) {
    std::string reason = c.rejected.substr(0, c.rejected.find_first_of("0123456789"));
    auto &entry = reasons[reason];
    if (!entry.first++)
      entry.second = &c;
  }
  if (!reasons.empty())
    outs() << "  rejected, by reason (the first of each):\n";
  for (const auto &[reason, entry] : reasons)
    outs() << "    " << entry.first << " x " << entry.second->rejected << "  ("
           << layoutFlags(entry.second->layout) << ")\n";
  if (result.fitting.empty()) {
    errs() << "mtc: no layout of " << request.gpus << " GPUs fits\n";
    return 1;
  }
  return 0;
}

void printSchedule(const ::mt::PipelineSchedule &schedule, const ::mt::ScheduleCheck &check,
                   const std::string &name, int64_t stages, int64_t chunks,
                   int64_t microBatches) {
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
}

} // namespace mtc
