// RUN: mt-opt %s -split-input-file -mt-expert-parallel="ep=4 dp=4" -verify-diagnostics
// RUN: echo "module {}" | not mt-opt -mt-expert-parallel="ep=3 dp=4" 2>&1 | FileCheck %s --check-prefix=DIVIDE
// DIVIDE: error: mt-expert-parallel: ep 3 must divide the data-parallel ranks (4)

// Six experts do not split over four ranks.
func.func @forward(%rows: tensor<12x8xf32>, %counts: tensor<6xi32>) -> tensor<12x5xf32> {
  %w = mt.param "w" normal(1.0) : tensor<6x5x8xf32>
  // expected-error@+1 {{mt-expert-parallel: 6 experts of 'w' are not divisible by ep 4}}
  %y = mt.grouped_linear %rows, %counts, %w : (tensor<12x8xf32>, tensor<6xi32>, tensor<6x5x8xf32>) -> tensor<12x5xf32>
  return %y : tensor<12x5xf32>
}

// -----

// The experts' weight must be a parameter of the model.
func.func @forward(%rows: tensor<12x8xf32>, %counts: tensor<4xi32>, %w: tensor<4x5x8xf32>) -> tensor<12x5xf32> {
  // expected-error@+1 {{mt-expert-parallel: the experts' weight must be an mt.param}}
  %y = mt.grouped_linear %rows, %counts, %w : (tensor<12x8xf32>, tensor<4xi32>, tensor<4x5x8xf32>) -> tensor<12x5xf32>
  return %y : tensor<12x5xf32>
}
