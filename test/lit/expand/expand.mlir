// RUN: mt-opt %s -split-input-file -mt-expand | FileCheck %s

// The block is written once; expansion chains three copies through the residual
// stream, renames each layer's parameters and numbers the dropout streams in order.
module {
  func.func private @block(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
    %w = mt.param "fc.weight" normal(2.0e-02) : tensor<8x8xf32>
    %y = mt.linear %x, %w : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
    %d = mt.dropout %y {rate = 1.0e-01 : f64} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    %r = mt.add %x, %d : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    return %r : tensor<?x?x8xf32>
  }
  // CHECK-NOT: func.func private @block
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
    // CHECK: mt.dropout %{{.*}} {rate = 5.000000e-01 : f64, stream = 0 : i64}
    %x0 = mt.dropout %x {rate = 5.0e-01 : f64} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    // CHECK: %[[W0:.*]] = mt.param "h.0.fc.weight" normal
    // CHECK: %[[Y0:.*]] = mt.linear %[[X0:.*]], %[[W0]]
    // CHECK: %[[D0:.*]] = mt.dropout %[[Y0]] {{.*}}stream = 1
    // CHECK: %[[R0:.*]] = mt.add %[[X0]], %[[D0]]
    // CHECK: %[[W1:.*]] = mt.param "h.1.fc.weight"
    // CHECK: %{{.*}} = mt.linear %[[R0]], %[[W1]]
    // CHECK: stream = 2
    // CHECK: %[[W2:.*]] = mt.param "h.2.fc.weight"
    // CHECK: mt.linear %{{.*}}, %[[W2]]
    // CHECK: stream = 3
    // CHECK: %[[R2:.*]] = mt.add
    // CHECK-NOT: mt.repeat
    // CHECK: return %[[R2]]
    %y = mt.repeat 3 @block(%x0) {prefix = "h"} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// Nested repeats compose their prefixes, whatever order the functions come in; the
// layer ordinals count the outermost copies in program order, then the plain repeat's.
// CHECK-LABEL: func.func @nested
// CHECK: mt.param "o.0.i.0.w" ones {mt.layer = 0 : i64}
// CHECK: mt.param "o.0.i.1.w" ones {mt.layer = 0 : i64}
// CHECK: mt.param "o.1.i.0.w" ones {mt.layer = 1 : i64}
// CHECK: mt.param "o.1.i.1.w" ones {mt.layer = 1 : i64}
// CHECK: mt.param "p.0.w" ones {mt.layer = 2 : i64}
// CHECK-NOT: mt.param
// CHECK: return
module {
  func.func @nested(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = mt.repeat 2 @outer(%x) {prefix = "o"} : (tensor<4xf32>) -> tensor<4xf32>
    %z = mt.repeat 1 @inner(%y) {prefix = "p"} : (tensor<4xf32>) -> tensor<4xf32>
    return %z : tensor<4xf32>
  }
  func.func private @outer(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = mt.repeat 2 @inner(%x) {prefix = "i"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func private @inner(%x: tensor<4xf32>) -> tensor<4xf32> {
    %w = mt.param "w" ones : tensor<4xf32>
    %s = mt.add %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}
