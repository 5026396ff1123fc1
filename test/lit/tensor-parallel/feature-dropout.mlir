// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s --check-prefix=FEATURES

// A dropout inside a parallel region draws its mask at global feature indices.
// FEATURES-LABEL: func.func @feature_dropout
// FEATURES: %[[G:.*]] = mt.gelu {{.*}} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// FEATURES: mt.dropout %[[G]] {feature_parallel, rate = 1.000000e-01 : f64, stream = 0 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
func.func @feature_dropout(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w1 = mt.param "fc.weight" normal(2.0e-02) : tensor<32x8xf32>
  %h = mt.linear %x, %w1 : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %g = mt.gelu %h : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %d = mt.dropout %g {rate = 1.0e-01 : f64, stream = 0 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %w2 = mt.param "proj.weight" normal(2.0e-02) : tensor<8x32xf32>
  %o = mt.linear %d, %w2 : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
