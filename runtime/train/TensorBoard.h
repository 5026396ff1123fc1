// TensorBoard's event files, as `tensorboard --logdir` reads them: a TFRecord stream (each
// record its length, the length's masked CRC-32C, the bytes, their masked CRC-32C) of
// tensorflow.Event messages, the first naming the format ("brain.Event:2"), each later one
// a step's scalar summaries; a resumed run's first event after that, a session log saying
// it starts again at its first step. Written by hand in the protocol-buffer wire format: the three
// messages used take a page, where the protobuf runtime and TensorFlow's schema would be
// two more dependencies.
#ifndef MT_RUNTIME_TRAIN_TENSORBOARD_H
#define MT_RUNTIME_TRAIN_TENSORBOARD_H

#include "core/Status.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mt::tensorboard {

/// CRC-32C (Castagnoli), as TFRecord checksums its records.
uint32_t crc32c(const void *data, size_t bytes);

class EventWriter {
public:
  /// A new event file in `dir` (created if missing), named as TensorBoard looks for them:
  /// events.out.tfevents.<seconds>.<host>.<pid>.
  static Status open(const std::string &dir, EventWriter &out);
  /// The scalars of step `step` (tag, value), as one event; flushed.
  Status scalars(int64_t step, const std::vector<std::pair<std::string, double>> &values);
  /// A run that resumes at step `step`: a SessionLog START at that step, on which
  /// TensorBoard forgets the events of earlier files at or past it (those of the run
  /// that went on from the checkpoint before), as PyTorch's SummaryWriter(purge_step)
  /// has it written.
  Status restart(int64_t step);
  const std::string &path() const { return path_; }

private:
  Status record(const std::string &event);

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file_{nullptr, [](std::FILE *f) {
                                                           return f ? std::fclose(f) : 0;
                                                         }};
};

} // namespace mt::tensorboard

#endif
