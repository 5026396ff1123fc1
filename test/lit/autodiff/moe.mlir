// RUN: mt-opt %s -mt-autodiff | FileCheck %s

// A mixture-of-experts layer's backward: the combine's gradient gives the expert rows'
// and the gates'; each grouped linear its input's (by the same counts) and its weight's;
// the dispatch's gradient sums a token's slots; the router's takes the gates' gradient
// and its attributes (the load-balancing loss's coefficient among them). Routing
// (experts, counts) has no gradient.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[R:.*]] = mt.param "router"
// CHECK: %[[L:.*]] = mt.linear %[[X]], %[[R]]
// CHECK: %[[G:[^,]*]], %[[E:.*]] = mt.moe_router %[[L]] {aux_loss_coeff = 1.000000e-02 : f64, topk = 2 : i64}
// CHECK: %[[ROWS:[^,]*]], %[[C:.*]] = mt.moe_dispatch %[[X]], %[[E]] {num_experts = 4 : i64}
// CHECK: %[[W:.*]] = mt.param "w"
// CHECK: %[[Y:.*]] = mt.grouped_linear %[[ROWS]], %[[C]], %[[W]] : (tensor<12x4xf32>, tensor<4xi32>, tensor<4x5x4xf32>) -> tensor<12x5xf32>
// CHECK: %[[OUT:.*]] = mt.moe_combine %[[Y]], %[[G]], %[[E]] {num_experts = 4 : i64}
// CHECK: %[[DOUT:.*]] = mt.cross_entropy_grad
// CHECK: %[[DY:[^,]*]], %[[DG:.*]] = mt.moe_combine_grad %[[DOUT]], %[[Y]], %[[G]], %[[E]] {num_experts = 4 : i64} : (tensor<2x3x5xf32>, tensor<12x5xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> (tensor<12x5xf32>, tensor<2x3x2xf32>)
// CHECK-DAG: %[[DROWS:.*]] = mt.grouped_linear_grad_input %[[DY]], %[[C]], %[[W]] : (tensor<12x5xf32>, tensor<4xi32>, tensor<4x5x4xf32>) -> tensor<12x4xf32>
// CHECK-DAG: %[[DW:.*]] = mt.grouped_linear_grad_weight %[[DY]], %[[ROWS]], %[[C]] : (tensor<12x5xf32>, tensor<12x4xf32>, tensor<4xi32>) -> tensor<4x5x4xf32>
// CHECK-DAG: mt.param_grad "w", %[[DW]]
// CHECK-DAG: %[[DX:.*]] = mt.moe_dispatch_grad %[[DROWS]], %[[E]] {num_experts = 4 : i64} : (tensor<12x4xf32>, tensor<2x3x2xi32>) -> tensor<2x3x4xf32>
// CHECK-DAG: %[[DL:.*]] = mt.moe_router_grad %[[DG]], %[[L]], %[[E]] {aux_loss_coeff = 1.000000e-02 : f64, topk = 2 : i64} : (tensor<2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x2xi32>) -> tensor<2x3x4xf32>
func.func @forward(%t: tensor<2x3xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x3x4xf32>
  %wr = mt.param "router" normal(1.0) : tensor<4x4xf32>
  %r = mt.linear %x, %wr : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %gates, %experts = mt.moe_router %r {topk = 2 : i64, aux_loss_coeff = 1.0e-02 : f64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64} : (tensor<2x3x4xf32>, tensor<2x3x2xi32>) -> (tensor<12x4xf32>, tensor<4xi32>)
  %w = mt.param "w" normal(1.0) : tensor<4x5x4xf32>
  %y = mt.grouped_linear %rows, %counts, %w : (tensor<12x4xf32>, tensor<4xi32>, tensor<4x5x4xf32>) -> tensor<12x5xf32>
  %out = mt.moe_combine %y, %gates, %experts {num_experts = 4 : i64} : (tensor<12x5xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x5xf32>
  %l = mt.cross_entropy %out, %t : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
