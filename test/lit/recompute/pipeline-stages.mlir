// RUN: mt-opt %models/gpt-mini.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-pipeline-assign="stages=2" -mt-autodiff -mt-recompute="granularity=full layers=3" -mt-pipeline-partition | FileCheck %s
// RUN: mt-opt %models/gpt-mini.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-pipeline-assign="stages=2" -mt-autodiff -mt-recompute="granularity=full method=block layers=1" -mt-pipeline-partition | FileCheck %s --check-prefix=BLOCK

// Recomputation groups count layers within a pipeline stage. gpt-mini's 4 layers on 2
// stages with groups of 3: each stage's 2 layers form one group (a group of layers 0-2
// would straddle the stages), recomputed in its backward from the stage's stashed input
// (beside the mask of the embedding's dropout, which lies outside the layers).
// CHECK-LABEL: func.func @backward_0
// CHECK-SAME: %[[IN0:[a-z0-9]+]]: tensor<1x8x128xf32>, %{{[a-z0-9]+}}: tensor<1x8x128xi8>) {
// CHECK: mt.layer_norm %[[IN0]], {{.*}}mt.layer = 0
// CHECK: mt.layer_norm {{.*}}mt.layer = 1
// CHECK: mt.layer_norm_grad
// CHECK-LABEL: func.func @backward_1
// CHECK: mt.layer_norm_grad
// CHECK: mt.layer_norm %{{.*}}mt.layer = 2
// CHECK: mt.layer_norm {{.*}}mt.layer = 3
// CHECK: mt.layer_norm_grad

// Block recomputation of one layer recomputes the first layer of each stage (0 and 2),
// and keeps layers 1 and 3.
// BLOCK-LABEL: func.func @backward_0
// BLOCK-NOT: mt.layer_norm {{.*}}mt.layer = 1
// BLOCK: mt.layer_norm {{.*}}mt.layer = 0
// BLOCK-NOT: mt.layer_norm {{.*}}mt.layer = 1
// BLOCK-LABEL: func.func @backward_1
// BLOCK-NOT: mt.layer_norm {{.*}}mt.layer = 3
// BLOCK: mt.layer_norm {{.*}}mt.layer = 2
// BLOCK-NOT: mt.layer_norm {{.*}}mt.layer = 3
// BLOCK: return
