#include "compiler/Tune.h"
#include "dialects/mt/MtDialect.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>
#include <map>
#include <tuple>

using namespace mlir;

namespace mtc {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0)
      d.push_back(i);
  return d;
}

/// The chunks of a lowering cut to `parts` chunks of one shape, or why it failed.
struct Profiled {
  std::vector<ChunkProfile> chunks;
  std::string error;
};

/// The bytes of weights, gradients and optimizer state the fullest stage of `layout`
/// holds, from chunks of one layer (first, middle, last): a chunk of k layers holds k
/// times a layer's parameters beside the same shared ones.
int64_t parameterState(const std::vector<ChunkProfile> &one, const StepLayout &layout,
                       int64_t layers) {
  const CompileOptions &o = layout.options;
  const int64_t chunks = o.pp * o.virtualStages, perChunk = layers / chunks;
  std::vector<ChunkFootprint> footprints;
  for (int64_t c = 0; c < chunks; ++c) {
    ChunkFootprint f = (c == 0 ? one.front() : c + 1 == chunks ? one.back() : one[1]).footprint;
    if (chunks == 1) // the first chunk is the last
      f.sharedParameters.insert(one.back().footprint.sharedParameters.begin(),
                                one.back().footprint.sharedParameters.end());
    f.layerParameters *= perChunk;
    f.layerTpReduced *= perChunk;
    f.layerExperts *= perChunk;
    footprints.push_back(std::move(f));
  }
  const StepAccount a = accountChunks(footprints, o.precision, o.pp, std::vector<int64_t>(o.pp, 0),
                                      layout.dataParts(), o.ep, layout.distributedOptimizer);
  int64_t state = 0; // the most any stage's weights, gradients and optimizer state take
  for (const MemoryReport &m : a.stages)
    state = std::max(state, m.weights + m.gradients + m.optimizer);
  return state;
}

} // namespace

std::string layoutFlags(const StepLayout &layout) {
  const CompileOptions &o = layout.options;
  std::string f = "--tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp);
  if (o.virtualStages > 1)
    f += " --vpp " + std::to_string(o.virtualStages);
  if (o.cp > 1)
    f += " --cp " + std::to_string(o.cp);
  f += " --dp " + std::to_string(o.dp);
  if (o.ep > 1)
    f += " --ep " + std::to_string(o.ep);
  f += " --micro-batch-size " + std::to_string(o.microBatchSize) + " --global-batch-size " +
       std::to_string(o.globalBatchSize);
  if (o.sequenceParallel)
    f += " --sp";
  if (o.recompute != "none")
    f += " --recompute " + o.recompute;
  if (layout.distributedOptimizer)
    f += " --distributed-optimizer";
  for (auto [flag, on] : kFusionSwitches)
    if (!(o.fusions.*on))
      f += std::string(" --") + flag;
  return f;
}

namespace {

/// The tuner's lowerings, each made once, and the layouts it has estimated or rejected.
class Tuner {
public:
  Tuner(ModuleOp model, const SystemSpec &system, TuneResult &result)
      : model_(model), system_(system), result_(result) {}

  /// The chunks of the model cut to `parts` chunks of `perChunk` layers and lowered with
  /// `o` (dp 1 or ep, pp `parts`), lowered once per (tp, cp, ep, sp, micro-batch size,
  /// recomputation, layers per chunk, chunks).
  const Profiled &profile(const CompileOptions &o, int64_t perChunk, int64_t parts);
  void reject(const StepLayout &layout, std::string why) {
    result_.rejected.push_back({layout, {}, std::move(why)});
  }
  /// Every variant of `layout` (of `layers` layers) estimated, fitting or rejected: for a
  /// mixture of experts each expert-parallel size (dividing the data-parallel ranks and
  /// the experts), then as estimateVariantsOf.
  void estimateVariants(StepLayout layout, int64_t layers,
                        const std::vector<std::string> &recomputes) {
    for (int64_t ep = 1; ep <= std::max<int64_t>(1, experts_); ++ep)
      if (ep == 1 || (layout.dataParts() % ep == 0 && experts_ % ep == 0)) {
        layout.options.ep = ep;
        estimateVariantsOf(layout, layers, recomputes);
      }
  }
  /// Sequence parallel or not, each recomputation of `recomputes`, the distributed
  /// optimizer or not.
  void estimateVariantsOf(StepLayout layout, int64_t layers,
                          const std::vector<std::string> &recomputes);
  /// The experts of the model's mixture (0: none), each searched over.
  int64_t experts_ = 0;

private:
  ModuleOp model_;
  const SystemSpec &system_;
  TuneResult &result_;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, int64_t, std::string, int64_t, int64_t>,
           Profiled>
      cache_;
};

const Profiled &Tuner::profile(const CompileOptions &o, int64_t perChunk, int64_t parts) {
  auto key = std::make_tuple(o.tp, o.cp, o.ep, o.sequenceParallel, o.microBatchSize, o.recompute,
                             perChunk, parts);
  auto found = cache_.find(key);
  if (found != cache_.end())
    return found->second;
  Profiled &p = cache_[key];
  OwningOpRef<ModuleOp> copy(model_.clone());
  copy->walk([&](mlir::mt::RepeatOp op) { op.setCount(perChunk * parts); });
  CompileOptions lowering = o;
  lowering.dp = o.ep; // one rank's program: of its expert group, which dp holds
  lowering.pp = parts;
  lowering.virtualStages = 1;
  std::string diagnostic;
  ScopedDiagnosticHandler capture(model_.getContext(), [&](Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return success();
  });
  ++result_.lowerings;
  if (failed(prepareModel(*copy, lowering)) || failed(lowerToTrainStep(*copy, lowering)))
    p.error = diagnostic.empty() ? "the layout does not lower" : diagnostic;
  else
    p.chunks = profileChunks(*copy, system_, lowering);
  return p;
}

void Tuner::estimateVariantsOf(StepLayout layout, int64_t layers,
                               const std::vector<std::string> &recomputes) {
  const CompileOptions &o = layout.options;
  const int64_t chunks = o.pp * o.virtualStages, perChunk = layers / chunks;
  for (bool sp : {false, true}) {
    if (sp && o.tp == 1)
      continue;
    for (const std::string &recompute : recomputes) {
      // Selective recomputation re-runs unfused attention, as a runtime that materializes
      // the scores runs it always: context parallelism cannot split it.
      const bool unfused = recompute == "selective" || system_.runtime.materializedAttention;
      if (o.cp > 1 && unfused)
        continue;
      layout.options.sequenceParallel = sp;
      layout.options.recompute = recompute;
      layout.options.attention = unfused ? "unfused" : "fused";
      // One layer per chunk, lowered once per (tp, sp), says whether the layout lowers at
      // all and, exactly, what its parameters' state needs: a layout that cannot hold its
      // parameters is dropped before its own lowering.
      CompileOptions plain = layout.options;
      plain.microBatchSize = 1;
      plain.recompute = "none";
      plain.attention = "fused";
      const Profiled &one = profile(plain, 1, 3);
      for (bool distributed : {false, true}) {
        if (distributed && layout.dataParts() == 1)
          continue;
        layout.distributedOptimizer = distributed;
        if (!one.error.empty()) {
          reject(layout, one.error);
          continue;
        }
        const int64_t state = parameterState(one.chunks, layout, layers);
        if (state > system_.planBytes()) {
          reject(layout, "its parameters' state alone needs " + binarySize(state) +
                             " per rank (weights, gradients, optimizer), the GPU has " +
                             binarySize(system_.planBytes()) + " for the plan");
          continue;
        }
        const Profiled &p = profile(layout.options, chunks == 1 ? layers : perChunk,
                                    std::min<int64_t>(chunks, 3));
        if (!p.error.empty()) {
          reject(layout, p.error);
          continue;
        }
        // First, middle and last chunk shapes, as the layout has them.
        std::vector<ChunkProfile> all;
        for (int64_t c = 0; c < chunks; ++c)
          all.push_back(c == 0                ? p.chunks.front()
                        : c + 1 == chunks ? p.chunks.back()
                                          : p.chunks[1]);
        TuneCandidate candidate{layout, {}, ""};
        if (std::string error = estimateStep(all, system_, layout, candidate.estimate);
            !error.empty()) {
          reject(layout, error);
          continue;
        }
        const int64_t bytes = candidate.estimate.gpuBytes;
        if (bytes > system_.planBytes()) {
          candidate.rejected = "needs " + binarySize(bytes) + " per rank, the GPU has " +
                               binarySize(system_.planBytes()) + " for the plan";
          result_.rejected.push_back(std::move(candidate));
          continue;
        }
        result_.fitting.push_back(std::move(candidate));
      }
    }
  }
}

} // namespace

/// The (pp, cp) pairs searched beside tensor parallelism `tp`: each fixed, or a divisor of
/// what remains (cp up to `maxCp`, and cutting the sequence into 2·cp chunks), such that
/// pp·cp divides the GPUs of a tensor-parallel group.
std::vector<std::pair<int64_t, int64_t>> modelParallel(const TuneRequest &r, int64_t tp,
                                                       int64_t maxCp) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  const int64_t group = r.gpus / tp;
  for (int64_t pp : r.pp ? std::vector<int64_t>{*r.pp} : divisors(group))
    for (int64_t cp : r.cp ? std::vector<int64_t>{*r.cp} : divisors(group))
      if ((r.cp || (cp <= maxCp && (cp == 1 || r.seqLength % (2 * cp) == 0))) &&
          group % (pp * cp) == 0)
        pairs.emplace_back(pp, cp);
  return pairs;
}

TuneResult tune(ModuleOp model, const SystemSpec &system, const TuneRequest &r) {
  TuneResult result;
  mlir::mt::RepeatOp repeat;
  int64_t repeats = 0;
  model.walk([&](mlir::mt::RepeatOp op) {
    repeat = op;
    ++repeats;
  });
  if (repeats != 1) {
    result.error = "tune cuts the model's repeated block into chunks of layers: it needs a "
                   "model with exactly one mt.repeat (this one has " +
                   std::to_string(repeats) + "); estimate its layouts one by one";
    return result;
  }
  const int64_t layers = static_cast<int64_t>(repeat.getCount());
  const int64_t maxTp = r.maxTp > 0 ? r.maxTp : system.gpusPerNode;
  const int64_t maxCp = r.maxCp > 0                    ? r.maxCp
                        : r.seqLength >= kLongSequence ? system.gpusPerNode
                                                       : 1;
  Tuner tuner(model, system, result);
  if (std::optional<DecoderShape> decoder = recogniseDecoder(model))
    tuner.experts_ = decoder->experts;
  auto fixedOr = [](const std::optional<int64_t> &fixed, std::vector<int64_t> all) {
    return fixed ? std::vector<int64_t>{*fixed} : all;
  };
  std::vector<int64_t> microBatchSizes;
  for (int64_t b = 1; b <= r.maxMicroBatch; b *= 2)
    microBatchSizes.push_back(b);
  const std::vector<std::string> recomputes =
      r.recompute ? std::vector<std::string>{*r.recompute}
                  : std::vector<std::string>{"none", "selective", "full"};

  for (int64_t tp : fixedOr(r.tp, divisors(r.gpus))) {
    if (r.gpus % tp != 0) {
      result.error = "--tp " + std::to_string(tp) + " does not divide " +
                     std::to_string(r.gpus) + " GPUs";
      return result;
    }
    if (!r.tp && tp > maxTp)
      continue;
    const std::vector<std::pair<int64_t, int64_t>> pairs = modelParallel(r, tp, maxCp);
    if (pairs.empty() && r.tp) { // a searched tp leaves another a fixed pp or cp divides
      result.error = "no --pp" + (r.pp ? " " + std::to_string(*r.pp) : std::string()) + " x --cp" +
                     (r.cp ? " " + std::to_string(*r.cp) : std::string()) + " divides the " +
                     std::to_string(r.gpus / tp) + " GPUs per tensor-parallel group";
      return result;
    }
    for (auto [pp, cp] : pairs) {
      StepLayout base;
      base.options.tp = tp;
      base.options.pp = pp;
      base.options.cp = cp;
      base.options.dp = r.gpus / (tp * pp * cp);
      base.options.globalBatchSize = r.globalBatchSize;
      base.options.seqLength = r.seqLength;
      base.options.vocabMultiple = r.vocabMultiple;
      base.options.precision = r.precision;
      base.options.fusions = r.fusions;
      base.bucketBytes = r.bucketBytes;
      base.options.microBatchSize = 1;
      if (layers % pp != 0) {
        tuner.reject(base, std::to_string(layers) + " layers do not split into " +
                               std::to_string(pp) + " pipeline stages");
        continue;
      }
      for (int64_t mbs : fixedOr(r.microBatchSize, microBatchSizes)) {
        StepLayout withBatch = base;
        withBatch.options.microBatchSize = mbs;
        const int64_t dp = base.options.dp;
        if (r.globalBatchSize % (mbs * dp) != 0) {
          tuner.reject(withBatch, "global batch " + std::to_string(r.globalBatchSize) +
                                      " is not a multiple of micro-batch " +
                                      std::to_string(mbs) + " x dp " + std::to_string(dp));
          continue;
        }
        for (int64_t vpp : fixedOr(r.vpp, divisors(layers / pp))) {
          StepLayout layout = withBatch;
          layout.options.virtualStages = vpp;
          if ((layers / pp) % vpp != 0 || (vpp > 1 && pp == 1)) {
            if (r.vpp) // only a --vpp asked for; the divisors searched always split
              tuner.reject(layout, vpp > 1 && pp == 1
                                       ? "virtual stages need pipeline stages"
                                       : std::to_string(layers / pp) +
                                             " layers per stage do not split into " +
                                             std::to_string(vpp) + " virtual stages");
            continue;
          }
          layout.schedule =
              vpp > 1 ? ::mt::ScheduleKind::Interleaved : ::mt::ScheduleKind::OneFOneB;
          if (vpp > 1 && layout.microBatches() % pp != 0) {
            tuner.reject(layout, "the interleaved schedule needs the micro-batches (" +
                                     std::to_string(layout.microBatches()) +
                                     ") to be a multiple of the pipeline stages");
            continue;
          }
          tuner.estimateVariants(layout, layers, recomputes);
        }
      }
    }
  }
  std::stable_sort(result.fitting.begin(), result.fitting.end(),
                   [](const TuneCandidate &a, const TuneCandidate &b) {
                     return a.estimate.iteration < b.estimate.iteration;
                   });
  return result;
}

} // namespace mtc
