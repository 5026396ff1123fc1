// RUN: mt-opt %s -mt-set-capacity="factor=1.25 policy=position" | FileCheck %s --check-prefix=SET
// RUN: mt-opt %s -mt-set-capacity="factor=1.25" | FileCheck %s --check-prefix=PROBS
// RUN: mt-opt %s -mt-set-capacity="factor=0" | FileCheck %s --check-prefix=DROPLESS
// RUN: mt-opt %s -mt-set-capacity | FileCheck %s --check-prefix=MODEL

// Megatron-Core's --moe-expert-capacity-factor with --moe-token-drop-policy position:
// every dispatch and combine takes it (this one's 12 slots over 4 experts keep
// ceil(3 · 1.25) = 4 each); 0 makes them dropless; no factor leaves the model's.
// SET-NOT: mt.moe_drop
// SET: mt.moe_dispatch {{.*}}capacity_factor = 1.250000e+00 : f64
// SET: mt.moe_combine {{.*}}capacity_factor = 1.250000e+00 : f64
// DROPLESS-NOT: capacity_factor
// DROPLESS-NOT: mt.moe_drop
// MODEL-NOT: mt.moe_drop
// MODEL: mt.moe_dispatch {{.*}}capacity_factor = 5.000000e-01 : f64
// MODEL: mt.moe_combine {{.*}}capacity_factor = 5.000000e-01 : f64

// With the probs policy (Megatron's default) one mt.moe_drop of the router's gates and
// experts comes right after the router, and the dispatch and the combine read its
// experts, without a capacity of their own; the router's other users (its load's count)
// read the router's.
// PROBS: %[[GATES:.*]], %[[EXPERTS:.*]] = mt.moe_router
// PROBS-NEXT: %[[KEPT:.*]] = mt.moe_drop %[[GATES]], %[[EXPERTS]] {capacity_factor = 1.250000e+00 : f64, num_experts = 4 : i64}
// PROBS-NEXT: mt.moe_count %[[EXPERTS]]
// PROBS-NEXT: mt.moe_dispatch %{{.*}}, %[[KEPT]] {num_experts = 4 : i64}
// PROBS-NEXT: mt.moe_combine %{{.*}}, %[[GATES]], %[[KEPT]] {num_experts = 4 : i64}
// PROBS-NOT: mt.moe_drop
func.func @forward(%x: tensor<2x3x8xf32>, %logits: tensor<2x3x4xf32>) -> (tensor<2x3x8xf32>, tensor<4xi32>) {
  %gates, %experts = mt.moe_router %logits {topk = 2 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  %load = mt.moe_count %experts {num_experts = 4 : i64} : (tensor<2x3x2xi32>) -> tensor<4xi32>
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64, capacity_factor = 0.5 : f64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  %out = mt.moe_combine %rows, %gates, %experts {num_experts = 4 : i64, capacity_factor = 0.5 : f64} : (tensor<12x8xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return %out, %load : tensor<2x3x8xf32>, tensor<4xi32>
}
