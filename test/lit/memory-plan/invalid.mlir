// RUN: mt-opt %s -split-input-file -mt-memory-plan -verify-diagnostics

// expected-error@+1 {{mt-memory-plan: argument 0 of type 'tensor<?x4xf32>' needs a static shape (run mt-specialize first)}}
func.func @dynamic(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  return %a : tensor<?x4xf32>
}

