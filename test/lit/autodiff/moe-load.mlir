// RUN: mt-opt %s -mt-autodiff | FileCheck %s

// A router given the load of the whole micro-batch (a share of its tokens here) passes it
// to its gradient, which counts the load-balancing loss by it; the load has no gradient.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[L:.*]] = mt.linear
// CHECK: %[[G:[^,]*]], %[[E:.*]] = mt.moe_router %[[L]], %[[LOAD:[^ ]*]] {aux_loss_coeff = 1.000000e-02 : f64, topk = 2 : i64}
// CHECK: mt.moe_router_grad %{{.*}}, %[[L]], %[[E]], %[[LOAD]] {aux_loss_coeff = 1.000000e-02 : f64, topk = 2 : i64} : (tensor<2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x2xi32>, tensor<4xi32>) -> tensor<2x3x4xf32>
func.func @forward(%t: tensor<2x3xi32>, %load: tensor<4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x3x4xf32>
  %wr = mt.param "router" normal(1.0) : tensor<4x4xf32>
  %r = mt.linear %x, %wr : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %gates, %experts = mt.moe_router %r, %load {topk = 2 : i64, aux_loss_coeff = 1.0e-02 : f64} : (tensor<2x3x4xf32>, tensor<4xi32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  %wo = mt.param "out" normal(1.0) : tensor<8x2xf32>
  %logits = mt.linear %gates, %wo : (tensor<2x3x2xf32>, tensor<8x2xf32>) -> tensor<2x3x8xf32>
  %loss = mt.cross_entropy %logits, %t : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
