// RUN: mt-opt %s -split-input-file -mt-set-dropout="hidden=0" -verify-diagnostics
// RUN: not mt-opt %s -mt-set-dropout="attention=1" 2>&1 | FileCheck %s --check-prefix=RATE
// RUN: not mt-opt %s -mt-set-dropout="hidden=1.5" 2>&1 | FileCheck %s --check-prefix=HIDDEN

// RATE: mt-set-dropout: attention rate 1 must be less than 1
// HIDDEN: mt-set-dropout: hidden rate 1.5 must be less than 1

// After mt-autodiff a dropout's mask feeds its gradient: too late to change the rate.
func.func @step(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi8>) {
  // expected-error@+1 {{keeps its mask for a gradient: mt-set-dropout sets a model's rates, before mt-autodiff}}
  %y, %mask = mt.dropout %x {rate = 1.000000e-01 : f64, keep_mask} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi8>)
  return %y, %mask : tensor<2x3xf32>, tensor<2x3xi8>
}
