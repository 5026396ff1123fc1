// The tile-and-wave model of a matrix product on a GPU (NVIDIA's "Matrix Multiplication
// Background" guide): the output is cut into tiles of tileM x tileN, each multiprocessor
// computes one tile per wave, and a wave of full tiles runs at the peak. `mtc estimate`
// costs products with it (compiler/System.cpp) and bench/calibrate.cu measures real
// products against it; plain C++, so that both sides share it.
#ifndef MT_COMPILER_GEMMMODEL_H
#define MT_COMPILER_GEMMMODEL_H

#include <cstdint>

namespace mt {

/// Seconds of `batch` products of m x k by k x n at `peak` FLOP/s on `multiprocessors`,
/// in whole waves of tiles.
inline double gemmWaveSeconds(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t tileM,
                              int64_t tileN, int64_t multiprocessors, double peak) {
  const int64_t tiles = batch * ((m + tileM - 1) / tileM) * ((n + tileN - 1) / tileN);
  const int64_t waves = (tiles + multiprocessors - 1) / multiprocessors;
  return static_cast<double>(waves) * 2.0 * static_cast<double>(tileM * tileN) *
         static_cast<double>(k) / (peak / static_cast<double>(multiprocessors));
}

/// Bytes a product reads and writes once: its two operands and its result.
inline double gemmBytes(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t elementBytes) {
  return static_cast<double>(batch) * static_cast<double>(elementBytes) *
         (static_cast<double>(m) * static_cast<double>(k) +
          static_cast<double>(k) * static_cast<double>(n) +
          static_cast<double>(m) * static_cast<double>(n));
}

} // namespace mt

#endif
