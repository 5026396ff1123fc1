// RUN: mt-opt %s -mt-set-capacity="factor=0" | FileCheck %s --check-prefix=DROPLESS
// RUN: mt-opt %s -mt-set-capacity="factor=1.25 policy=position" | FileCheck %s --check-prefix=POSITION
// RUN: mt-opt %s -mt-set-capacity="factor=1.25" | FileCheck %s --check-prefix=PROBS
// RUN: mt-opt %s -mt-set-capacity | FileCheck %s --check-prefix=MODEL

// A model's own mt.moe_drop gives way to the factor and policy given: none where it is
// 0; the dispatch's and combine's capacity by position; one drop of the factor given by
// gates. Without a factor the model's stays.
// DROPLESS-NOT: mt.moe_drop
// DROPLESS-NOT: capacity_factor
// POSITION-NOT: mt.moe_drop
// POSITION: mt.moe_dispatch %{{.*}}, %experts {capacity_factor = 1.250000e+00 : f64
// POSITION: mt.moe_combine %{{.*}}, %gates, %experts {capacity_factor = 1.250000e+00 : f64
// PROBS: mt.moe_drop %gates, %experts {capacity_factor = 1.250000e+00 : f64
// PROBS-NOT: mt.moe_drop
// MODEL: mt.moe_drop %gates, %experts {capacity_factor = 5.000000e-01 : f64
func.func @forward(%x: tensor<2x3x8xf32>, %logits: tensor<2x3x4xf32>) -> tensor<2x3x8xf32> {
  %gates, %experts = mt.moe_router %logits {topk = 2 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  %kept = mt.moe_drop %gates, %experts {num_experts = 4 : i64, capacity_factor = 0.5 : f64} : (tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x2xi32>
  %rows, %counts = mt.moe_dispatch %x, %kept {num_experts = 4 : i64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  %out = mt.moe_combine %rows, %gates, %kept {num_experts = 4 : i64} : (tensor<12x8xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return %out : tensor<2x3x8xf32>
}
