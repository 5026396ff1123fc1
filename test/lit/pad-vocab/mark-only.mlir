// RUN: mt-opt %s -mt-pad-vocab="multiple=1" | FileCheck %s

// A multiple of 1 pads nothing, so a table that is not a parameter is left as it is
// (mtc compile runs the pass always, to mark the tables; padding needs parameters).
// CHECK-LABEL: func.func @not_a_parameter
// CHECK: mt.embedding %arg0, %arg1 : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
func.func @not_a_parameter(%table: tensor<30x8xf32>, %tokens: tensor<?x?xi32>) -> tensor<?x?x8xf32> {
  %e = mt.embedding %table, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  return %e : tensor<?x?x8xf32>
}
