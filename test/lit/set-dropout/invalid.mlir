// RUN: mt-opt %s -split-input-file -mt-set-dropout="hidden=0" -verify-diagnostics
// RUN: not mt-opt %s -mt-set-dropout="attention=1" 2>&1 | FileCheck %s --check-prefix=RATE
// RUN: not mt-opt %s -mt-set-dropout="hidden=1.5" 2>&1 | FileCheck %s --check-prefix=HIDDEN

// RATE: mt-set-dropout: attention rate 1 must be less than 1
// HIDDEN: mt-set-dropout: hidden rate 1.5 must be less than 1

// After mt-autodiff a dropout's mask feeds its gradient, and a gradient repeats the
// attention's rate: too late to change either.
func.func @step(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi8>) {
  // expected-error@+1 {{is part of a gradient: mt-set-dropout sets a model's rates, before mt-autodiff}}
  %y, %mask = mt.dropout %x {rate = 1.000000e-01 : f64, keep_mask} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi8>)
  return %y, %mask : tensor<2x3xf32>, tensor<2x3xi8>
}

// -----

func.func @step_attention(%g: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>, %o: tensor<2x4x8xf32>) -> tensor<2x4x24xf32> {
  // expected-error@+1 {{is part of a gradient: mt-set-dropout sets a model's rates, before mt-autodiff}}
  %d = mt.attention_grad %g, %qkv, %o {causal, dropout = 1.000000e-01 : f64, heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return %d : tensor<2x4x24xf32>
}
