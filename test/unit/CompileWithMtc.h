// Tests that need a plan compile it with the mtc under test (MTC_BINARY).
#ifndef MT_TEST_UNIT_COMPILEWITHMTC_H
#define MT_TEST_UNIT_COMPILEWITHMTC_H

#include "plan/PlanReader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

namespace mt::test {

/// Compiles `model` (a path) with `flags` into `dir` (ending in '/'); returns the plan's
/// path, or "" on failure.
inline std::string compileModel(const std::string &model, const std::string &flags,
                                const std::string &name,
                                const std::string &dir = ::testing::TempDir()) {
  std::string plan = dir + name + ".mtp";
  std::string cmd = std::string(MTC_BINARY) + " compile " + model + " " + flags + " -o " +
                    plan + " > /dev/null";
  return std::system(cmd.c_str()) == 0 ? plan : "";
}

/// Writes `mlir` to a file and compiles it.
inline std::string compileSource(const std::string &mlir, const std::string &flags,
                                 const std::string &name,
                                 const std::string &dir = ::testing::TempDir()) {
  // One file per process: concurrent tests may compile the same case.
  std::string source = ::testing::TempDir() + name + "." + std::to_string(getpid()) + ".mlir";
  std::ofstream(source) << mlir;
  return compileModel(source, flags, name, dir);
}

inline std::string zooModel(const std::string &name) {
  return std::string(MTC_MODELS_DIR) + "/" + name + ".mlir";
}

} // namespace mt::test

#endif
