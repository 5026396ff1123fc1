// RUN: mt-opt %s -split-input-file -mt-memory-plan="alignment=64" | FileCheck %s

// A chain of 64-byte values: each lives until its user, so two slots suffice and the
// arena peaks at 128 bytes. Parameters live outside the arena.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: mt.arena_bytes = 128 : i64, mt.arg_offsets = array<i64: 0>
// CHECK: mt.param "w" ones : tensor<16xf32>
// CHECK: mt.add {{.*}} {mt.offsets = array<i64: 64>}
// CHECK: mt.gelu {{.*}} {mt.offsets = array<i64: 0>}
// CHECK: mt.gelu {{.*}} {mt.offsets = array<i64: 64>}
func.func @chain(%a: tensor<16xf32>) -> tensor<16xf32> {
  %w = mt.param "w" ones : tensor<16xf32>
  %b = mt.add %a, %w : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %c = mt.gelu %b : (tensor<16xf32>) -> tensor<16xf32>
  %d = mt.gelu %c : (tensor<16xf32>) -> tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// x is saved for backward, so it stays put while y and z come and go around it.
// CHECK-LABEL: func.func @saved
// CHECK-SAME: mt.arena_bytes = 384 : i64, mt.arg_offsets = array<i64: 0>
// CHECK: %[[X:.*]] = mt.gelu %arg0 {mt.offsets = array<i64: 128>}
// CHECK: %[[Y:.*]] = mt.gelu %[[X]] {mt.offsets = array<i64: 0>}
// CHECK: %[[Z:.*]] = mt.gelu %[[Y]] {mt.offsets = array<i64: 256>}
// CHECK: mt.gelu_grad %[[Z]], %[[X]] {mt.offsets = array<i64: 0>}
func.func @saved(%a: tensor<32xf32>) -> tensor<32xf32> {
  %x = mt.gelu %a : (tensor<32xf32>) -> tensor<32xf32>
  %y = mt.gelu %x : (tensor<32xf32>) -> tensor<32xf32>
  %z = mt.gelu %y : (tensor<32xf32>) -> tensor<32xf32>
  %dx = mt.gelu_grad %z, %x : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
  return %dx : tensor<32xf32>
}

// -----

// Slots round up to the alignment (the 24-byte argument takes 64 bytes), while the
// peak is the last byte a tensor occupies: 64 + 12.
// CHECK-LABEL: func.func @aligned
// CHECK-SAME: mt.arena_bytes = 76 : i64, mt.arg_offsets = array<i64: 0>
// CHECK: mt.bias_grad %arg0 {mt.offsets = array<i64: 64>} : (tensor<2x3xf32>) -> tensor<3xf32>
func.func @aligned(%g: tensor<2x3xf32>) -> tensor<3xf32> {
  %b = mt.bias_grad %g : (tensor<2x3xf32>) -> tensor<3xf32>
  return %b : tensor<3xf32>
}

// -----

// The fused loss writes its gradient over the logits, their last reader: one buffer for
// both (at 256), so the arena holds x, the logits or their gradient, and the targets
// and then the result at 512: 768 bytes (1,024 with a buffer of its own).
// CHECK-LABEL: func.func @loss_in_place
// CHECK-SAME: mt.arena_bytes = 768 : i64, mt.arg_offsets = array<i64: 0, 512>
// CHECK: %[[L:.*]] = mt.gelu %arg0 {mt.offsets = array<i64: 256>}
// CHECK: mt.cross_entropy_with_grad %{{.*}}, %[[L]], %arg1 {mt.offsets = array<i64: 640, 256>}
// CHECK: mt.gelu_grad {{.*}} {mt.offsets = array<i64: 512>}
func.func @loss_in_place(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  %l = mt.gelu %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %loss, %dl = mt.cross_entropy_with_grad %seed, %l, %t : (tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x8xf32>)
  %g = mt.gelu_grad %dl, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %g : tensor<2x4x8xf32>
}

// -----

// Logits read after the gradient (here by a GELU) keep their buffer: the gradient gets
// its own.
// CHECK-LABEL: func.func @read_later
// CHECK: %[[L:.*]] = mt.gelu %arg0 {mt.offsets = array<i64: 256>}
// CHECK: mt.cross_entropy_grad %{{.*}}, %[[L]], %arg1 {mt.offsets = array<i64: 0>}
// CHECK: mt.gelu %[[L]] {mt.offsets = array<i64: 512>}
func.func @read_later(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %l = mt.gelu %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dl = mt.cross_entropy_grad %seed, %l, %t : (tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %again = mt.gelu %l : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %dl, %again : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// An argument's buffer is the caller's: the gradient never takes it.
// CHECK-LABEL: func.func @argument_logits
// CHECK-SAME: mt.arg_offsets = array<i64: 0, 512>
// CHECK: mt.cross_entropy_grad {{.*}} {mt.offsets = array<i64: 256>}
func.func @argument_logits(%l: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dl = mt.cross_entropy_grad %seed, %l, %t : (tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  return %dl : tensor<2x4x8xf32>
}
