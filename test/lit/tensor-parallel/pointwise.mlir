// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s

// An op with no tensor-parallel rule of its own that is pointwise (mt.silu) takes its
// operand's layout: a linear feeding it is column-parallel, the next row-parallel, as
// for GELU, and nothing in the pass names it.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[W1:.*]] = mt.param "fc.weight" normal(2.000000e-02) {global_shape = array<i64: 32, 8>, shard_dim = 0 : i64} : tensor<16x8xf32>
// CHECK: %[[IN:.*]] = mt.tp_copy %{{.*}} {grid = @grid, grid_axis = 2 : i64}
// CHECK: %[[H:.*]] = mt.linear %[[IN]], %[[W1]] : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[S:.*]] = mt.silu %[[H]] : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[W2:.*]] = mt.param "proj.weight" normal(2.000000e-02) {global_shape = array<i64: 8, 32>, shard_dim = 1 : i64} : tensor<8x16xf32>
// CHECK: %[[P:.*]] = mt.linear %[[S]], %[[W2]] : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[O:.*]] = shard.all_reduce %[[P]]
// CHECK: return %[[O]]
func.func @mlp(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w1 = mt.param "fc.weight" normal(2.0e-02) : tensor<32x8xf32>
  %h = mt.linear %x, %w1 : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %s = mt.silu %h : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %w2 = mt.param "proj.weight" normal(2.0e-02) : tensor<8x32xf32>
  %o = mt.linear %s, %w2 : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
