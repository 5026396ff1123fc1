// RUN: not mt-opt %s -mt-set-capacity="factor=inf" 2>&1 | FileCheck %s

// CHECK: mt-set-capacity: the capacity factor must be a finite number
func.func @forward(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  return %x : tensor<2x3x8xf32>
}
