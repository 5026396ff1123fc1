// RUN: not mt-opt %s -mt-set-capacity="factor=inf" 2>&1 | FileCheck %s
// RUN: not mt-opt %s -mt-set-capacity="factor=1 policy=tokens" 2>&1 | FileCheck %s --check-prefix=POLICY

// CHECK: mt-set-capacity: the capacity factor must be a finite number
// POLICY: mt-set-capacity: the drop policy must be probs or position, not 'tokens'
func.func @forward(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  return %x : tensor<2x3x8xf32>
}
