// Serialises a compiled training step into the FlatBuffers plan (runtime/plan/plan.fbs).
#ifndef MT_COMPILER_PLANEMITTER_H
#define MT_COMPILER_PLANEMITTER_H

#include "compiler/Accounting.h"
#include "plan/Schedule.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mtc {

struct PlanHeader {
  std::string model;
  std::string precision = "f32"; // f32, f64, bf16 or f16: weights and activations
  int64_t tp = 1, dp = 1, pp = 1, virtualStages = 1, cp = 1, ep = 1;
  mt::ScheduleKind schedule = mt::ScheduleKind::OneFOneB;
  bool sequenceParallel = false, distributedOptimizer = false;
  uint64_t ddpBucketBytes = 0;
  int64_t microBatchSize = 0, globalBatchSize = 0, seqLength = 0, vocabSize = 0;
  int64_t parameters = 0;
  OpCosts costs;
  MemoryReport memory;              // the stage that holds the most
  std::vector<MemoryReport> stages; // what each pipeline stage's ranks hold
  std::vector<int64_t> stashBytes; // per pipeline stage: the most stash bytes held at once
};

/// Builds the framed plan file (header, FlatBuffer, CRC) of the module's memory-planned
/// @train_step, or, under pipeline parallelism, its @forward_<v> and @backward_<v>.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, const PlanHeader &header,
                             std::vector<uint8_t> &file);

} // namespace mtc

#endif
