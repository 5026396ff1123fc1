// Loads a plan file: checks the frame (magic, format version, length, CRC-32), runs the
// FlatBuffers verifier, then checks every index and size the executor will trust.
#ifndef MT_RUNTIME_PLAN_PLANREADER_H
#define MT_RUNTIME_PLAN_PLANREADER_H

#include "core/DType.h"
#include "core/Status.h"
#include "plan/PlanFormat.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

class LoadedPlan {
public:
  const plan::Plan &plan() const { return *root_; }

  /// Parses `file` (the whole file's bytes); `name` appears in error messages.
  static Status parse(std::vector<uint8_t> file, const std::string &name, LoadedPlan &out);
  static Status read(const std::string &path, LoadedPlan &out);

private:
  std::vector<uint8_t> bytes_;
  const plan::Plan *root_ = nullptr;
};

} // namespace mt

#endif
