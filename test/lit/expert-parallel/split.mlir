// RUN: mt-opt %s -mt-expert-parallel="ep=2 dp=4" | FileCheck %s

// Each grouped linear's weight is cut along its experts (expert rank r: experts
// [2r, 2r + 2)); the dispatched rows go to their experts' ranks (an exchange that the
// experts' GEMMs read by its routing) and the results come back before the combine.
// CHECK-LABEL: func.func @forward
// CHECK: %[[GATES:[^,]*]], %[[EXPERTS:.*]] = mt.moe_router
// CHECK: %[[ROWS:[^,]*]], %[[COUNTS:.*]] = mt.moe_dispatch %{{.*}}, %[[EXPERTS]] {mt.layer = 0 : i64, num_experts = 4 : i64}
// CHECK-NEXT: %[[MINE:[^,]*]], %[[ROUTING:.*]] = mt.moe_exchange %[[ROWS]], %[[COUNTS]] {expert_parallel = 2 : i64, mt.layer = 0 : i64} : (tensor<12x8xf32>, tensor<4xi32>) -> (tensor<24x8xf32>, tensor<2x2xi32>)
// CHECK: mt.param "w" normal(1.000000e+00) {expert_parallel, global_shape = array<i64: 4, 5, 8>, shard_dim = 0 : i64} : tensor<2x5x8xf32>
// CHECK: %[[Y:.*]] = mt.grouped_linear %[[MINE]], %[[ROUTING]], %{{.*}} : (tensor<24x8xf32>, tensor<2x2xi32>, tensor<2x5x8xf32>) -> tensor<24x5xf32>
// CHECK: %[[BACK:.*]] = mt.moe_exchange_back %[[Y]], %[[COUNTS]], %[[ROUTING]] {expert_parallel = 2 : i64, mt.layer = 0 : i64} : (tensor<24x5xf32>, tensor<4xi32>, tensor<2x2xi32>) -> tensor<12x5xf32>
// CHECK: mt.moe_combine %[[BACK]], %[[GATES]], %[[EXPERTS]]
func.func @forward(%x: tensor<2x3x8xf32>) -> tensor<2x3x5xf32> {
  %wr = mt.param "router" normal(1.0) : tensor<4x8xf32>
  %r = mt.linear %x, %wr {mt.layer = 0 : i64} : (tensor<2x3x8xf32>, tensor<4x8xf32>) -> tensor<2x3x4xf32>
  %gates, %experts = mt.moe_router %r {topk = 2 : i64, mt.layer = 0 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64, mt.layer = 0 : i64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  %w = mt.param "w" normal(1.0) : tensor<4x5x8xf32>
  %y = mt.grouped_linear %rows, %counts, %w {mt.layer = 0 : i64} : (tensor<12x8xf32>, tensor<4xi32>, tensor<4x5x8xf32>) -> tensor<12x5xf32>
  %out = mt.moe_combine %y, %gates, %experts {num_experts = 4 : i64, mt.layer = 0 : i64} : (tensor<12x5xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x5xf32>
  return %out : tensor<2x3x5xf32>
}
