// Checkpoints as safetensors: the global (unsharded) weights, Adam's moments, and the
// training state (step, data position, seed, fp16's loss scale) in the metadata — so a checkpoint saved
// under one layout loads under any other. World rank 0 writes it atomically
// (temporary file, fsync, rename, fsync of the directory), so a crash or kill mid-save
// leaves the last good checkpoint as it was.
#ifndef MT_RUNTIME_TRAIN_CHECKPOINT_H
#define MT_RUNTIME_TRAIN_CHECKPOINT_H

#include "core/Executor.h"
#include "train/Optimizer.h"

#include <string>

namespace mt {

struct TrainingState {
  int64_t step = 0;          // steps completed
  uint64_t dataPosition = 0; // samples consumed
  uint64_t seed = 0;
  LossScaler lossScaler;     // fp16 only
  int64_t skippedSteps = 0;  // fp16: steps whose gradients overflowed
};

/// The checkpoint file inside a save directory.
std::string checkpointPath(const std::string &dir);

/// Collective: whether `dir` holds a checkpoint, as every rank sees it; fails if the
/// ranks disagree (a directory that is not shared).
Status findCheckpoint(const std::string &dir, Comm &comm, bool &found);

/// Collective: every rank calls it. Writing or reading the file, a failure on any rank
/// is every rank's result; a rank that fails before that (out of memory gathering a
/// tensor, a failed collective) returns at once, and its caller ends the job.
Status saveCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      const TrainingState &state);
Status loadCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      TrainingState &state);

} // namespace mt

#endif
