// RUN: not mt-opt %models/gpt-mini.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-pipeline-assign="stages=3" 2>&1 | FileCheck %s --check-prefix=UNEVEN
// RUN: not mt-opt %models/gpt-mini.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-pipeline-partition 2>&1 | FileCheck %s --check-prefix=NOSTEP
// UNEVEN: gpt-mini.mlir:{{[0-9]+}}:{{[0-9]+}}: error: mt-pipeline-assign: 4 layers do not split evenly over 3 pipeline stages x 1 virtual stages
// NOSTEP: mt-pipeline-partition: no @train_step (run mt-autodiff first)
