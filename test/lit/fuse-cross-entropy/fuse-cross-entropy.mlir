// RUN: mt-opt %s -split-input-file -mt-fuse-cross-entropy | FileCheck %s

// The loss and its gradient become one op at the loss's place; the seed moves before it.
// CHECK-LABEL: func.func @step
// CHECK: %[[SEED:.*]] = arith.constant {mt.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[LOSS:.*]], %[[DL:.*]] = mt.cross_entropy_with_grad %[[SEED]], %{{.*}}, %arg1 {num_classes = 7 : i64} : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3x8xf32>)
// CHECK-NOT: mt.cross_entropy
// CHECK: mt.gelu_grad %[[DL]]
// CHECK: return %[[LOSS]]
func.func @step(%x: tensor<2x3x8xf32>, %t: tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3x8xf32>) {
  %l = mt.gelu %x : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %loss = mt.cross_entropy %l, %t {num_classes = 7 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
  %seed = arith.constant {mt.loss_seed} dense<1.0> : tensor<f32>
  %dl = mt.cross_entropy_grad %seed, %l, %t {num_classes = 7 : i64} : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  %dx = mt.gelu_grad %dl, %x : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %loss, %dx : tensor<f32>, tensor<2x3x8xf32>
}

// -----

// A pipeline's backward program holds the gradient alone (the loss is in the forward):
// nothing to fuse.
// CHECK-LABEL: func.func @backward
// CHECK: mt.cross_entropy_grad
// CHECK-NOT: mt.cross_entropy_with_grad
func.func @backward(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>) -> tensor<2x3x8xf32> {
  %seed = arith.constant {mt.loss_seed} dense<1.0> : tensor<f32>
  %dl = mt.cross_entropy_grad %seed, %l, %t : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  return %dl : tensor<2x3x8xf32>
}

// -----

// The gradient of another loss (other targets, other classes) is not this loss's.
// CHECK-LABEL: func.func @other_targets
// CHECK: mt.cross_entropy %arg0, %arg1
// CHECK: mt.cross_entropy_grad %{{.*}}, %arg0, %arg2
// CHECK: mt.cross_entropy_grad %{{.*}}, %arg0, %arg1 {num_classes = 5 : i64}
// CHECK-NOT: mt.cross_entropy_with_grad
func.func @other_targets(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %u: tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %loss = mt.cross_entropy %l, %t : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %a = mt.cross_entropy_grad %seed, %l, %u : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  %b = mt.cross_entropy_grad %seed, %l, %t {num_classes = 5 : i64} : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  return %loss, %a, %b : tensor<f32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// -----

// A loss gradient computed after the loss from it (not a seed) cannot move before it.
// CHECK-LABEL: func.func @computed_seed
// CHECK: mt.cross_entropy %arg0
// CHECK: mt.cross_entropy_grad
// CHECK-NOT: mt.cross_entropy_with_grad
func.func @computed_seed(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>) -> tensor<2x3x8xf32> {
  %loss = mt.cross_entropy %l, %t : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
  %seed = arith.addf %loss, %loss : tensor<f32>
  %dl = mt.cross_entropy_grad %seed, %l, %t : (tensor<f32>, tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  return %dl : tensor<2x3x8xf32>
}
