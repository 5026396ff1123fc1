// Where a step's time goes on the device: each instruction's time, measured by the
// backend's stopwatch (events in the CUDA stream, the host's clock on the CPU), and the
// optimizer's; reported by opcode and by the slowest instructions (mtrun --profile).
// On the GPU a lap is the time between two marks on the device's timeline, so it also
// holds any time the device waited for the host: the profile waits for the device at
// the end of each program, so a program's first instructions start from an empty
// queue.
#ifndef MT_RUNTIME_EXEC_PROFILE_H
#define MT_RUNTIME_EXEC_PROFILE_H

#include "backends/Backend.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace mt {

class Profile {
public:
  /// One timed thing: an instruction of a program, or a part of the step outside the
  /// programs (the optimizer), with the seconds of each of its runs.
  struct Entry {
    std::string what;  // the opcode, or the part's name
    std::string where; // program and instruction, or ""
    std::string shape; // the first output's shape, or ""
    double flops = 0;  // of one run, where the executor knows them (matrix products)
    int64_t count = 0;        // runs timed
    std::vector<double> runs; // the seconds of the latest kWindow of them
    /// The median of those: a first run's set-up (graph and algorithm choice) and the
    /// host's hiccups fall out of it.
    double median() const;
    void add(double seconds);
  };
  /// Runs kept per entry: a long run's memory stays bounded.
  static constexpr size_t kWindow = 256;

  explicit Profile(std::unique_ptr<Stopwatch> stopwatch) : stopwatch_(std::move(stopwatch)) {}

  /// A mark after the work asked so far; the laps between marks are handed out by
  /// `record`.
  Status mark() { return stopwatch_->mark(); }
  /// Waits for the marks since the last record and adds their laps, in order, to
  /// `entries` (one lap per entry).
  Status record(const std::vector<Entry *> &entries);
  /// Drops the marks since the last record (those a failure left).
  void forget() { stopwatch_->forget(); }

  /// The entry of instruction `index` of `program`, or null before its first use.
  Entry *find(uint32_t program, uint32_t index) const;

  /// The entry of instruction `index` of program `program`, made on first use.
  Entry &instruction(uint32_t program, uint32_t index, const std::string &what,
                     const std::string &where, const std::string &shape);
  /// The entry of a part of the step outside the programs, made on first use.
  Entry &part(const std::string &name);

  const std::vector<std::unique_ptr<Entry>> &entries() const { return entries_; }

  /// A table of `steps` steps: device time per step by opcode (each instruction's median
  /// run times its runs per step, and TFLOP/s where the FLOPs are known), then the
  /// `slowest` instructions.
  void print(std::FILE *out, int64_t steps, size_t slowest = 12) const;

private:
  std::unique_ptr<Stopwatch> stopwatch_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::vector<Entry *>> byInstruction_; // [program][index], null until used
  std::vector<double> laps_;
};

} // namespace mt

#endif
