// RUN: mt-opt %models/gpt-mini.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-pipeline-assign="stages=2" -mt-autodiff -mt-pipeline-partition | FileCheck %s

// gpt-mini's 4 layers on 2 stages: the embeddings and layers 0-1 on stage 0, layers 2-3
// and the loss on stage 1. Each stage has a forward and a backward function; a forward
// returns what it sends (the activation, or the loss) and then its stash, which its
// backward takes after the gradient it receives. Parameters appear where they are used:
// the tied embedding in both stages.
// CHECK-LABEL: func.func @forward_0(%arg0: tensor<1x8xi32>, %arg1: tensor<1x8xi32>) -> (tensor<1x8x128xf32>,
// CHECK: mt.param "wte"
// CHECK: mt.param "h.0.ln_1.weight"
// CHECK-NOT: mt.param "h.2.
// CHECK: return
// CHECK-LABEL: func.func @backward_0(%arg0: tensor<1x8xi32>, %arg1: tensor<1x8xi32>, %arg2: tensor<1x8x128xf32>,
// CHECK: mt.embedding_grad
// CHECK: mt.param_grad "wte"
// CHECK: return{{$}}
// CHECK-LABEL: func.func @forward_1(%arg0: tensor<1x8xi32>, %arg1: tensor<1x8xi32>, %arg2: tensor<1x8x128xf32>) -> (tensor<f32>,
// CHECK-NOT: mt.param "h.1.
// CHECK: mt.param "h.2.ln_1.weight"
// CHECK: mt.cross_entropy
// The stash includes the activation this stage received.
// CHECK: return {{.*}}%arg2 :
// CHECK-LABEL: func.func @backward_1(%arg0: tensor<1x8xi32>, %arg1: tensor<1x8xi32>,
// CHECK: mt.cross_entropy_grad
// CHECK: mt.param_grad "wte"
// CHECK: return %{{.*}} : tensor<1x8x128xf32>
