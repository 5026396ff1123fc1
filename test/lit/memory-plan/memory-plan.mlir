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
