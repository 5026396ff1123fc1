// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s

// LLaMA's MLP: rms_norm, the gate and up projections (both column-parallel, so each
// rank holds matching blocks of the two), swiglu on those blocks, and the down
// projection (row-parallel). The norm's weight is replicated.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[NW:.*]] = mt.param "norm.weight" ones : tensor<8xf32>
// CHECK: %[[N:.*]] = mt.rms_norm %{{.*}}, %[[NW]] : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// Both projections read one copy of the normed input (so backward all-reduces its
// gradient once, as for Megatron's fused projection).
// CHECK: %[[WG:.*]] = mt.param "gate_proj.weight" normal(2.000000e-02) {global_shape = array<i64: 32, 8>, shard_dim = 0 : i64} : tensor<16x8xf32>
// CHECK: %[[IN:.*]] = mt.tp_copy %[[N]]
// CHECK: %[[G:.*]] = mt.linear %[[IN]], %[[WG]] : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: mt.tp_copy
// CHECK: %[[WU:.*]] = mt.param "up_proj.weight" normal(2.000000e-02) {global_shape = array<i64: 32, 8>, shard_dim = 0 : i64} : tensor<16x8xf32>
// CHECK: %[[U:.*]] = mt.linear %[[IN]], %[[WU]] : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[S:.*]] = mt.swiglu %[[G]], %[[U]] : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[WD:.*]] = mt.param "down_proj.weight" normal(2.000000e-02) {global_shape = array<i64: 8, 32>, shard_dim = 1 : i64} : tensor<8x16xf32>
// CHECK: %[[D:.*]] = mt.linear %[[S]], %[[WD]] : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK: shard.all_reduce %[[D]]
func.func @mlp(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %nw = mt.param "norm.weight" ones : tensor<8xf32>
  %n = mt.rms_norm %x, %nw : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %wg = mt.param "gate_proj.weight" normal(2.0e-02) : tensor<32x8xf32>
  %g = mt.linear %n, %wg : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %wu = mt.param "up_proj.weight" normal(2.0e-02) : tensor<32x8xf32>
  %u = mt.linear %n, %wu : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %s = mt.swiglu %g, %u : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %wd = mt.param "down_proj.weight" normal(2.0e-02) : tensor<8x32xf32>
  %d = mt.linear %s, %wd : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
  %r = mt.add %x, %d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}
