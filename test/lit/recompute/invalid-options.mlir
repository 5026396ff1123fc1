// RUN: not mt-opt %s -mt-recompute="granularity=most" 2>&1 | FileCheck %s --check-prefix=GRANULARITY
// RUN: not mt-opt %s -mt-recompute="granularity=full method=random" 2>&1 | FileCheck %s --check-prefix=METHOD
// GRANULARITY: mt-recompute: granularity 'most' is not none, selective or full
// METHOD: mt-recompute: method 'random' is not uniform or block
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
