// RUN: not mt-opt %s -mt-set-capacity="factor=inf" 2>&1 | FileCheck %s
// RUN: not mt-opt %s -mt-set-capacity="factor=1 policy=tokens" 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not mt-opt %s -mt-set-capacity="factor=1" 2>&1 | FileCheck %s --check-prefix=NOROUTER

// CHECK: mt-set-capacity: the capacity factor must be a finite number
// POLICY: mt-set-capacity: the drop policy must be probs or position, not 'tokens'
// NOROUTER: 'mt.moe_dispatch' op mt-set-capacity: the probs policy keeps the slots of the largest gates, but these experts come from no mt.moe_router (use the position policy)
func.func @forward(%x: tensor<2x3x8xf32>, %gates: tensor<2x3x2xf32>, %experts: tensor<2x3x2xi32>) -> tensor<2x3x8xf32> {
  %rows, %counts = mt.moe_dispatch %x, %experts {num_experts = 4 : i64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  %out = mt.moe_combine %rows, %gates, %experts {num_experts = 4 : i64} : (tensor<12x8xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return %out : tensor<2x3x8xf32>
}
