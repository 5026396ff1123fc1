// RUN: mt-opt %s -mt-set-capacity="factor=1.25" | FileCheck %s --check-prefix=SET
// RUN: mt-opt %s -mt-set-capacity="factor=0" | FileCheck %s --check-prefix=DROPLESS
// RUN: mt-opt %s -mt-set-capacity | FileCheck %s --check-prefix=MODEL

// Megatron-Core's --moe-expert-capacity-factor: every dispatch and combine takes it (this
// one's 12 slots over 4 experts keep ceil(3 · 1.25) = 4 each); 0 makes them dropless; no
// factor leaves the model's.
// SET: mt.moe_dispatch {{.*}}capacity_factor = 1.250000e+00 : f64
// SET: mt.moe_combine {{.*}}capacity_factor = 1.250000e+00 : f64
// DROPLESS-NOT: capacity_factor
// MODEL: mt.moe_dispatch {{.*}}capacity_factor = 5.000000e-01 : f64
// MODEL: mt.moe_combine {{.*}}capacity_factor = 5.000000e-01 : f64
func.func @forward(%x: tensor<2x3x8xf32>, %gates: tensor<2x3x2xf32>, %experts: tensor<2x3x2xi32>) -> tensor<2x3x8xf32> {
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64, capacity_factor = 0.5 : f64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  %out = mt.moe_combine %rows, %gates, %experts {num_experts = 4 : i64, capacity_factor = 0.5 : f64} : (tensor<12x8xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return %out : tensor<2x3x8xf32>
}
