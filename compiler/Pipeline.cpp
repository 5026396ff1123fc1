#include "compiler/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;

namespace mtc {

static LogicalResult runPasses(ModuleOp module, const CompileOptions &options,
                               llvm::function_ref<void(PassManager &)> build) {
  PassManager pm(module.getContext());
  if (options.printIRAfterAll) {
    module.getContext()->disableMultithreading();
    pm.enableIRPrinting();
  }
  build(pm);
  return pm.run(module);
}

LogicalResult prepareModel(ModuleOp module, const CompileOptions &options) {
  return runPasses(module, options, [&](PassManager &pm) {
    pm.addPass(mt::createMtPadVocab({options.vocabMultiple * options.tp}));
    if (options.attentionDropout >= 0 || options.hiddenDropout >= 0)
      pm.addPass(mt::createMtSetDropout({options.attentionDropout, options.hiddenDropout}));
    if (options.capacityFactor >= 0)
      pm.addPass(mt::createMtSetCapacity({options.capacityFactor, options.dropPolicy}));
  });
}

LogicalResult lowerToTrainStep(ModuleOp module, const CompileOptions &options) {
  return runPasses(module, options, [&](PassManager &pm) {
    pm.addPass(mt::createMtExpand());
    pm.addPass(mt::createMtSpecialize(
        {options.microBatchSize, options.seqLength, options.precision}));
    pm.addPass(
        mt::createMtContextParallel({options.cp, options.dp, options.tp, options.cpCommType}));
    pm.addPass(mt::createMtExpertParallel({options.ep, options.dp * options.cp}));
    pm.addPass(
        mt::createMtTensorParallel({options.tp, options.dp, options.cp, options.sequenceParallel}));
    if (options.attention == "unfused")
      pm.addPass(mt::createMtUnfuseAttention());
    if (options.pp > 1)
      pm.addPass(mt::createMtPipelineAssign({options.pp, options.virtualStages,
                                             options.firstStageLayers,
                                             options.lastStageLayers}));
    pm.addPass(mt::createMtAutodiff());
    pm.addPass(mt::createMtRecompute(
        {options.recompute, options.recomputeMethod, options.recomputeLayers}));
    pm.addPass(mt::createMtKeepAttentionStats());
    if (options.pp > 1)
      pm.addPass(mt::createMtPipelinePartition());
    if (options.fusions.biasGelu)
      pm.addPass(mt::createMtFuseEpilogues());
    if (options.fusions.biasDropout)
      pm.addPass(mt::createMtFuseBiasDropoutAdd());
    if (options.fusions.biasGrad)
      pm.addPass(mt::createMtFuseBiasGrad());
    if (options.fusions.crossEntropy)
      pm.addPass(mt::createMtFuseCrossEntropy());
    if (options.fusions.gradAccumulation)
      pm.addPass(mt::createMtFuseGradAccumulation());
    if (options.fusions.normGradAdd)
      pm.addPass(mt::createMtFuseNormGradAdd());
    pm.addPass(mt::createMtMemoryPlan());
  });
}

} // namespace mtc
