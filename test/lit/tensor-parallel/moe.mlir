// RUN: mt-opt %s -mt-tensor-parallel="tp=2 sequence-parallel=true" | FileCheck %s --check-prefix=SP
// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s --check-prefix=TP
// RUN: mt-opt %s -mt-context-parallel="cp=2 tp=2" -mt-tensor-parallel="tp=2 cp=2 sequence-parallel=true" | FileCheck %s --check-prefix=CPSP
// RUN: mt-opt %s -mt-context-parallel="cp=2" | FileCheck %s --check-prefix=CP

// A mixture of experts is per token: the router's linear and the experts' weights stay
// whole. Under sequence parallelism each rank routes its block of the sequence, so the
// load-balancing loss takes the group's counts: its slots per expert, all-reduced, are
// the load of a router that routes again and carries the loss, whose gates and experts
// the dispatch and the combine read.
// SP-LABEL: func.func @moe
// SP: %[[X:.*]] = shard.reduce_scatter {{.*}} -> tensor<2x2x8xf32>
// SP: mt.param "router" normal(1.000000e+00) {tp_grad_reduce} : tensor<4x8xf32>
// SP: %[[R:.*]] = mt.linear %[[X]], %{{.*}} : (tensor<2x2x8xf32>, tensor<4x8xf32>) -> tensor<2x2x4xf32>
// SP: %{{.*}}, %[[ROUTED:.*]] = mt.moe_router %[[R]] {mt.layer = 0 : i64, topk = 2 : i64} : (tensor<2x2x4xf32>)
// SP-NEXT: %[[SLOTS:.*]] = mt.moe_count %[[ROUTED]] {mt.layer = 0 : i64, num_experts = 4 : i64} : (tensor<2x2x2xi32>) -> tensor<4xi32>
// SP-NEXT: %[[LOAD:.*]] = shard.all_reduce %[[SLOTS]] on @grid grid_axes = [2] {mt.layer = 0 : i64} : tensor<4xi32> -> tensor<4xi32>
// SP-NEXT: %[[GATES:.*]], %[[EXPERTS:.*]] = mt.moe_router %[[R]], %[[LOAD]] {aux_loss_coeff = 1.000000e-02 : f64, mt.layer = 0 : i64, topk = 2 : i64}
// SP: %[[ROWS:.*]], %[[COUNTS:.*]] = mt.moe_dispatch %[[X]], %[[EXPERTS]] {{.*}} -> (tensor<8x8xf32>, tensor<4xi32>)
// SP: mt.param "w" normal(1.000000e+00) {tp_grad_reduce} : tensor<4x8x8xf32>
// SP: mt.grouped_linear %[[ROWS]], %[[COUNTS]], %{{.*}} : (tensor<8x8xf32>, tensor<4xi32>, tensor<4x8x8xf32>) -> tensor<8x8xf32>
// SP: mt.moe_combine %{{.*}}, %[[GATES]], %[[EXPERTS]] {{.*}} -> tensor<2x2x8xf32>

// Without sequence parallelism every rank routes every token, with the serial loss.
// TP-LABEL: func.func @moe
// TP: mt.param "router" normal(1.000000e+00) : tensor<4x8xf32>
// TP: mt.moe_router %{{.*}} {aux_loss_coeff = 1.000000e-02 : f64, mt.layer = 0 : i64, topk = 2 : i64} : (tensor<2x4x4xf32>)
// TP-NOT: shard.all_reduce %{{.*}} : tensor<4xi32>
// TP: mt.param "w" normal(1.000000e+00) : tensor<4x8x8xf32>
// TP: mt.grouped_linear {{.*}} -> tensor<16x8xf32>

// Under context parallelism too, a rank's share of the sequence routes itself: the load is
// all-reduced over both groups, and the loss, which the context-parallel group averages
// over its shares, weighs cp times.
// CPSP-LABEL: func.func @moe
// CPSP: %[[SLOTS:.*]] = mt.moe_count %{{.*}} {mt.layer = 0 : i64, num_experts = 4 : i64} : (tensor<2x1x2xi32>) -> tensor<4xi32>
// CPSP-NEXT: %[[CPLOAD:.*]] = shard.all_reduce %[[SLOTS]] on @grid grid_axes = [1] {mt.layer = 0 : i64} : tensor<4xi32> -> tensor<4xi32>
// CPSP-NEXT: %[[TPLOAD:.*]] = shard.all_reduce %[[CPLOAD]] on @grid grid_axes = [2] {mt.layer = 0 : i64} : tensor<4xi32> -> tensor<4xi32>
// CPSP-NEXT: mt.moe_router %{{.*}}, %[[TPLOAD]] {aux_loss_coeff = 2.000000e-02 : f64, mt.layer = 0 : i64, topk = 2 : i64} : (tensor<2x1x4xf32>, tensor<4xi32>)
// CP-LABEL: func.func @moe
// CP: %{{.*}}, %[[ROUTED:.*]] = mt.moe_router %{{.*}} {mt.layer = 0 : i64, topk = 2 : i64} : (tensor<2x2x4xf32>)
// CP-NEXT: %[[SLOTS:.*]] = mt.moe_count %[[ROUTED]]
// CP-NEXT: %[[LOAD:.*]] = shard.all_reduce %[[SLOTS]] on @grid grid_axes = [1]
// CP-NEXT: mt.moe_router %{{.*}}, %[[LOAD]] {aux_loss_coeff = 2.000000e-02 : f64, mt.layer = 0 : i64, topk = 2 : i64}
func.func @moe(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<16x8xf32>
  %x = mt.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %wr = mt.param "router" normal(1.0) : tensor<4x8xf32>
  %r = mt.linear %x, %wr {mt.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %gates, %experts = mt.moe_router %r {topk = 2 : i64, aux_loss_coeff = 1.0e-02 : f64, mt.layer = 0 : i64} : (tensor<2x4x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64, mt.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> (tensor<16x8xf32>, tensor<4xi32>)
  %w = mt.param "w" normal(1.0) : tensor<4x8x8xf32>
  %y = mt.grouped_linear %rows, %counts, %w {mt.layer = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>, tensor<4x8x8xf32>) -> tensor<16x8xf32>
  %out = mt.moe_combine %y, %gates, %experts {num_experts = 4 : i64, mt.layer = 0 : i64} : (tensor<16x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  %logits = mt.linear %out, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
