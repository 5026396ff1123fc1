#ifndef MT_PASSES_TD
#define MT_PASSES_TD

include "mlir/Pass/PassBase.td"

def MtExpand : Pass<"mt-expand", "::mlir::ModuleOp"> {
  let summary = "Unrolls mt.repeat and numbers the dropout streams";
  let description = [{
    Each `mt.repeat N @block(%x) {prefix = "h"}` becomes N copies of the block's
    body, chained through the residual stream, with parameters renamed
    `h.<i>.<name>`, and every op of a copy gets the copy's layer ordinal `mt.layer`
    (0, 1, … in program order; for nested repeats, the outermost copy's). Block
    functions no longer referenced are erased. Every random op without a `stream` — an
    `mt.dropout`, an `mt.attention` with `dropout` — gets the next free stream number, in
    program order, so masks are reproducible under any layout. Two parameters of one
    name, two random ops of one stream, or a stream past 2^24 - 1 are an error.
  }];
  let dependentDialects = ["::mlir::mt::MtDialect"];
}

def MtPadVocab : Pass<"mt-pad-vocab", "::mlir::ModuleOp"> {
  let summary = "Pads embedding tables to a multiple of a given size";
  let description = [{
    Megatron's `--make-vocab-size-divisible-by` (mtc passes it that flag times tp, as
    Megatron pads): the rows of every table used by `mt.embedding`, and of an untied
    output layer (the weight and bias of the linear whose result is a cross-entropy's
    logits), are rounded up to a multiple of `multiple` and marked with the real rows
    (`vocab_rows`); types are re-inferred, and each cross-entropy whose vocabulary grew
    gets `num_classes` set to the real vocabulary, so the padded logits never enter the
    loss. The padded rows therefore receive no gradient, and padding leaves the real
    rows' initial values as they were (initialisation is by element index). A table
    whose rows are already a multiple is marked all the same.
  }];
  let options = [
    Option<"multiple", "multiple", "int64_t", "128",
           "round the vocabulary up to a multiple of this">
  ];
}

def MtSetDropout : Pass<"mt-set-dropout", "::mlir::ModuleOp"> {
  let summary = "Sets the model's dropout rates";
  let description = [{
    Megatron's `--attention-dropout` and `--hidden-dropout`: `attention` becomes the
    probability dropout of every `mt.attention`, `hidden` the rate of every
    `mt.dropout` (on the embeddings and after each block's two sublayers). A rate of 0
    removes the dropout: the attribute from `mt.attention`, the `mt.dropout` op
    itself. A negative option (the default) leaves that kind as the model has it.
  }];
  let options = [
    Option<"attention", "attention", "double", "-1.0",
           "the attention probabilities' dropout rate, in [0, 1); negative: the model's">,
    Option<"hidden", "hidden", "double", "-1.0",
           "every mt.dropout's rate, in [0, 1); negative: the model's">
  ];
}

def MtSetCapacity : Pass<"mt-set-capacity", "::mlir::ModuleOp"> {
  let summary = "Sets the experts' capacity factor of every mixture of experts";
  let description = [{
    Megatron-Core's `--moe-expert-capacity-factor` f and `--moe-token-drop-policy`: each
    expert keeps at most ceil(f·B·S·k/E) of the slots routed to it by each dispatch (the
    tokens one rank holds of a micro-batch); the others pass through their token's
    residual only. With the `probs` policy (Megatron's default) it keeps those of the
    largest gates: an `mt.moe_drop` of the router's gates and experts comes before the
    dispatch and the combine, which read its experts. With `position` it keeps the
    first in token then slot order: every `mt.moe_dispatch` and `mt.moe_combine` (and
    their gradients) takes `capacity_factor` f. A factor of 0 makes every mixture
    dropless (no capacity, no drop); a negative one (the default) leaves the model's.
  }];
  let options = [
    Option<"factor", "factor", "double", "-1.0",
           "the capacity factor, > 0; 0: dropless; negative: the model's">,
    Option<"policy", "policy", "std::string", "\"probs\"",
           "which slots an expert keeps: probs (the largest gates) or position (the first)">
  ];
}

def MtSpecialize : Pass<"mt-specialize", "::mlir::ModuleOp"> {
  let summary = "Fixes the batch and sequence dimensions and re-infers every type";
  let description = [{
    The public functions' integer inputs [?, ?] become [micro-batch-size,
    seq-length]; every op's result type is then inferred again, so an impossible
    shape (a sequence longer than the position table) is reported at the op. An
    attention's sliding window as long as the sequence or longer is dropped: it masks
    nothing the causal mask does not. A seq-length of 0 takes the length of the model's
    position table. With `precision`, every parameter (and so every activation) takes
    that float type; losses and softmax statistics stay in f32 (f64 for f64). Under bf16
    and f16 the parameters are the 16-bit compute copies: the runtime keeps the f32
    master weights, gradients and optimizer state.
  }];
  let options = [
    Option<"microBatchSize", "micro-batch-size", "int64_t", "1", "sequences per micro-batch">,
    Option<"seqLength", "seq-length", "int64_t", "0",
           "tokens per sequence (0: the model's positions)">,
    Option<"precision", "precision", "std::string", "\"\"",
           "parameter element type: f32, f64, bf16 or f16 (empty: as written)">
  ];
}

def MtTensorParallel : Pass<"mt-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Megatron's tensor (and sequence) parallel layout of a specialized step";
  let description = [{
    Partitions the forward function over the tensor-parallel axis of the rank grid
    `shard.grid @grid(shape = dp x cp x tp)`, as Megatron-LM lays out a GPT (Shoeybi et al.
    2019), each op by its own rule (TensorParallelOpInterface; an Mt_Pointwise op takes
    its operands' layout): a linear whose result feeds an Mt_ColumnParallelConsumer
    (attention, GELU, SiLU, the loss) is column-parallel (weight rows
    split, whole heads per rank), a linear that reads a split tensor is row-parallel
    (weight columns split, its partial sums all-reduced, its bias added once after), the
    embedding table and the tied output layer are split over the vocabulary, and the
    cross-entropy is computed from each shard's statistics, so the full logits never
    exist on one rank. Entering a parallel region is `mt.tp_copy`, leaving it
    `shard.all_reduce`: two of each per layer, whose gradient rules give the two
    backward all-reduces.

    With `sequence-parallel` (Korthikanti et al. 2022), the regions between them —
    LayerNorm, dropout, residual adds — hold 1/tp of the sequence: entering becomes
    `shard.all_gather` and leaving `shard.reduce_scatter` along the sequence, and the
    replicated parameters used there are marked `tp_grad_reduce`, as are mt.qk_norm's
    weights in any layout (each rank normalises its own heads).

    A mixture of experts stays in the stream, per token (Megatron-Core's expert tensor
    parallelism of 1): its router's linear and its experts' weights are whole on every
    rank. Under sequence parallelism each rank routes its block of the sequence, and a
    router's load-balancing loss counts the whole sequence's routing: its slots per
    expert (mt.moe_count) all-reduced over the tp axis (shareRouterLoad).

    Runs after mt-specialize (shapes are static) and before mt-autodiff.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel size">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel size (the grid's first axis)">,
    Option<"cp", "cp", "int64_t", "1", "context-parallel size (the grid's second axis)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "shard LayerNorm, dropout and residual regions along the sequence">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def MtContextParallel : Pass<"mt-context-parallel", "::mlir::ModuleOp"> {
  let summary = "Megatron's context parallelism: every activation holds 1/cp of the sequence";
  let description = [{
    Splits the sequence of a specialized step over the context-parallel axis of the
    rank grid `shard.grid @grid(shape = dp x cp x tp)`, as Megatron-Core's
    `--context-parallel-size` does, balanced for causal attention: the sequence is cut
    into 2·cp chunks and context rank r holds chunks r and 2·cp − 1 − r. The tokens and
    targets become each rank's share [B, S/cp] (the runtime cuts the batch), so every
    activation follows; the ops that depend on positions (position embeddings, rotary,
    dropout masks) are marked `context_parallel` and take their rows' own positions.
    Attention gathers the group's keys and values (the all-gather form, LLaMA 3's):
    a `shard.all_gather` of the fused QKV along dimension 0 over the cp axis, then
    `mt.context_order` into sequence order, and the attention computes this rank's
    queries over the whole sequence; their gradients are the order's inverse and a
    `shard.reduce_scatter`. With `comm-type=p2p` attention keeps its rank's QKV and is
    marked `ring` (and keeps its rows' statistics, which each ring step merges): the
    shares' keys and values come round a ring of the group instead (Megatron's
    `--cp-comm-type p2p`). Parameters' gradients are partial per context rank and are
    reduced with the data-parallel ones (the runtime folds cp into that group).
    A mixture of experts routes each rank's share; a router's load-balancing loss counts
    the whole sequence's routing by its slots per expert (mt.moe_count), all-reduced over
    the cp axis (shareRouterLoad), and weighs cp times, as the loss is the mean of the
    shares'.

    Refuses a sequence that 2·cp does not divide, and attention it cannot split (the
    unfused chain). Runs after mt-specialize and before mt-tensor-parallel.
  }];
  let options = [
    Option<"cp", "cp", "int64_t", "1", "context-parallel size">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel size (the grid's first axis)">,
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel size (the grid's last axis)">,
    Option<"commType", "comm-type", "std::string", "\"all-gather\"",
           "how attention reaches the other shares' keys and values: all-gather or p2p">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def MtExpertParallel : Pass<"mt-expert-parallel", "::mlir::ModuleOp"> {
  let summary = "Megatron's expert parallelism: each rank holds E/ep of a mixture's experts";
  let description = [{
    Cuts each `mt.grouped_linear` weight [E, out, in] along its experts over the
    expert-parallel group (`expert_parallel`, shard_dim 0: expert rank r holds experts
    [r·E/ep, (r+1)·E/ep)), as Megatron-Core's `--expert-model-parallel-size` places
    them; the group is ep consecutive ranks of the data-parallel ones, which read
    different micro-batches. After each `mt.moe_dispatch` an `mt.moe_exchange` sends
    the rows to the ranks of their experts (the all-to-all dispatch), which the experts'
    GEMMs then read by its routing; before each `mt.moe_combine` of the same tokens an
    `mt.moe_exchange_back` returns the results. Each is the other's gradient. The
    experts' gradients are then reduced over the ranks holding the same experts (the
    runtime's expert-data-parallel group), the others' over all data-parallel ranks.

    Refuses ep not dividing dp, and experts that ep does not divide. Runs after
    mt-specialize.
  }];
  let options = [
    Option<"ep", "ep", "int64_t", "1", "expert-parallel size">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel size (× cp), which ep divides">
  ];
}

def MtPipelineAssign : Pass<"mt-pipeline-assign", "::mlir::ModuleOp"> {
  let summary = "Assigns every forward op its virtual pipeline stage (mt.stage)";
  let description = [{
    Layers (the `mt.layer` ordinals of mt-expand) split evenly over `stages` x `chunks`
    virtual stages, chunk c of pipeline stage s being virtual stage c·stages + s; what
    precedes the first layer (the embeddings) goes to the first, what follows the last
    (final LayerNorm, output layer, loss) to the last. Layers that do not divide are
    refused with the numbers. Runs before mt-autodiff, which gives backward ops their
    forward op's stage. An uneven split is asked for explicitly: `first-stage-layers`
    and/or `last-stage-layers` (Megatron's --decoder-first/last-pipeline-num-layers)
    fix those stages' counts, and the remaining layers split evenly over the others.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "1", "pipeline-parallel size">,
    Option<"chunks", "chunks", "int64_t", "1", "virtual stages (model chunks) per stage">,
    Option<"firstStageLayers", "first-stage-layers", "int64_t", "0",
           "layers on the first stage (0: an even split)">,
    Option<"lastStageLayers", "last-stage-layers", "int64_t", "0",
           "layers on the last stage (0: an even split)">
  ];
}

def MtPipelinePartition : Pass<"mt-pipeline-partition", "::mlir::ModuleOp"> {
  let summary = "Splits the training step into a forward and a backward function per virtual stage";
  let description = [{
    After mt-autodiff (and mt-recompute): @train_step becomes @forward_<v> and
    @backward_<v> for every virtual stage v. Forward v takes (tokens, targets, the
    activation from v − 1) and returns (the activation for v + 1, or the loss; then the
    stash: what backward v will need); backward v takes (tokens, targets, the gradient
    from v + 1, the stash) and returns the gradient for v − 1. Parameters are copied into
    every function that uses them. Anything else crossing stages is refused.
  }];
}

def MtAutodiff : Pass<"mt-autodiff", "::mlir::ModuleOp"> {
  let summary = "Turns @forward into @train_step: the loss and every parameter's gradient";
  let description = [{
    Reverse-mode differentiation from the per-op gradient rules of
    DifferentiableOpInterface. Only values that depend on a parameter and reach the
    loss are differentiated; gradients of values used more than once are summed; each
    contribution to a parameter's gradient goes to `mt.param_grad` as soon as it is
    computed (the runtime accumulates), so no partial sum stays alive. Backward ops
    reference only the forward values their rules need: those are the saved
    activations.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the function returning the loss">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MtUnfuseAttention : Pass<"mt-unfuse-attention", "::mlir::ModuleOp"> {
  let summary = "Rewrites fused attention as attention_probs -> dropout -> attention_context";
  let description = [{
    The unfused chain materialises the [B, heads, S, S] probabilities; autodiff then
    keeps them, their dropout mask and the dropped probabilities for backward — the
    activations Korthikanti et al. (2022) count for attention without recomputation,
    and the path selective recomputation re-runs in backward. Run after
    mt-tensor-parallel: a head-parallel attention's probabilities are this rank's
    block of the heads, and their dropout draws its mask at global indices.
  }];
}

def MtRecompute : Pass<"mt-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: trade backward FLOPs for activation memory";
  let description = [{
    Runs on the training step, after mt-autodiff. A recomputed unit's forward ops are
    copied in front of the first backward op that needs one of their results, and the
    backward reads the copies, so the originals die at their last forward use
    (Korthikanti et al. 2022; Megatron's `--recompute-granularity`).

    - `selective`: the core attention of mt-unfuse-attention's chain (probabilities,
      their dropout, the product with V), whose s×s tensors are then not kept; the
      attention's output, which the projection keeps anyway, is. Fused attention keeps
      no s×s tensor to begin with (its backward recomputes them) and is refused here.
    - `full`: whole layers (block copies, by the `mt.layer` ordinals of mt-expand), which
      then keep only their input. `method=uniform` recomputes groups of `layers`
      consecutive layers, keeping only each group's input; `method=block` recomputes
      the first `layers` layers one by one and keeps everything of the others. Both
      count within each virtual pipeline stage (`mt.stage`), as Megatron does.

    Whatever the granularity, sequence-parallel all-gathers are run again in backward
    rather than keeping their whole-sequence results (as Megatron does).

    Dropout masks come back identical: they are counter-based. The GEMM FLOPs the copies
    add are written to the function as `mt.recompute_gemm_flops`.
  }];
  let options = [
    Option<"granularity", "granularity", "std::string", "\"none\"", "none, selective or full">,
    Option<"method", "method", "std::string", "\"uniform\"", "uniform or block (full only)">,
    Option<"layers", "layers", "int64_t", "1",
           "layers per group (uniform) or layers recomputed (block)">
  ];
}

def MtFuseEpilogues : Pass<"mt-fuse-epilogues", "::mlir::ModuleOp"> {
  let summary = "Folds GELU and its gradient into the GEMMs beside them";
  let description = [{
    Runs on the differentiated step, after recomputation and pipeline partition (each
    function on its own), so the forward copies recomputation makes are fused too.

    - `mt.linear` whose result is read by exactly one `mt.gelu` becomes
      `mt.linear_gelu`, with both results: the activation, and the pre-activation that
      every other reader reads (GELU's gradient, a pipeline stash). Megatron's bias-GELU
      fusion, as cuBLASLt's GELU epilogue with its auxiliary output runs it in 16 bits.
    - `mt.linear_grad_input` whose result is read only by one `mt.gelu_grad`, as its
      incoming gradient, becomes `mt.linear_grad_input_gelu` (cuBLASLt's DGELU
      epilogue): dy·W is never stored.

    Both pairs must carry the same placement attributes (`mt.layer`, `mt.stage`,
    `mt.recomputed`), and GELU its tanh form (cuBLASLt's epilogues compute no other);
    a pair that differs, or an exact GELU (`approximate = "none"`), is left as it is. The CPU backend runs a fused
    op as the pair, bit for bit; the memory plan sees one buffer fewer per fused
    backward pair.
  }];
}

def MtFuseBiasGrad : Pass<"mt-fuse-bias-grad", "::mlir::ModuleOp"> {
  let summary = "Sums bias gradients in the weight gradients' GEMMs";
  let description = [{
    On the differentiated step (after recomputation and pipeline partition, each
    function on its own): an `mt.linear_grad_weight` and an `mt.bias_grad` of the same
    dy, in one block with the same placement attributes (`mt.layer`, `mt.stage`,
    `mt.recomputed`) and the same `accumulate`, become one
    `mt.linear_grad_weight_bias`: at the earlier one's place where the later one's
    operands are defined by then, else at the later one's where nothing reads the
    earlier one's result before it. Left as they are: a pair that could not be placed so,
    a dy with two weight gradients in its block and placement, and a pair of which one
    result alone is read by one `mt.param_grad` alone (mt-fuse-grad-accumulation, which
    runs after, would then have added one into its parameter's gradient and not the
    other; the fused op accumulates both or neither).

    The GEMM sums the bias gradient as it reads dy (cuBLASLt's BGRADB epilogue, as
    Transformer Engine's weight gradient does): one launch and one read of dy fewer per
    linear with a bias. The CPU backend runs the fused op as the pair, bit for bit; the
    CUDA backend falls back to the pair's kernels where cuBLASLt has no algorithm.
  }];
}

def MtKeepAttentionStats : Pass<"mt-keep-attention-stats", "::mlir::ModuleOp"> {
  let summary = "Keeps the rows' statistics of fused attention for its gradient";
  let description = [{
    Flash attention's backward forms the probabilities again from each query row's
    log-sum-exp, which the forward computes anyway: every `mt.attention` whose output an
    `mt.attention_grad` of the same qkv reads gets `keep_stats` (a second result,
    [B, heads, S] in the loss's type), and the gradient takes it. Without them the
    backward has to run the forward again (cuDNN's needs them). Runs on the
    differentiated step after recomputation (a recomputed attention keeps its own) and
    before pipeline partition (a stage's statistics are stashed with its output).
  }];
}

def MtFuseCrossEntropy : Pass<"mt-fuse-cross-entropy", "::mlir::ModuleOp"> {
  let summary = "Computes the loss and its gradient in one pass over the logits";
  let description = [{
    Megatron's cross-entropy loss fusion, on the differentiated step: an
    `mt.cross_entropy` and the `mt.cross_entropy_grad` of the same logits, targets and
    classes in one function become `mt.cross_entropy_with_grad` at the loss's place.
    The loss gradient is the loss seed (moved before the loss; it has no operands), so
    the gradient is computed while the logits are read for the loss, and written over
    them (mt-memory-plan gives both one buffer where nothing reads the logits later):
    the logits are read twice per step instead of four or five times, and one buffer of
    their size is never held.

    A pipeline's last stage computes the loss in its forward program and the gradient in
    its backward one: there the pair stays, and the stashed logits, an argument of the
    backward program, keep their buffer beside the gradient's. The vocabulary-parallel
    loss (statistics, gather, merge) reads each rank's logits once for the statistics
    and once for the gradient already, and writes the gradient over them.
  }];
}

def MtFuseBiasDropoutAdd : Pass<"mt-fuse-bias-dropout-add", "::mlir::ModuleOp"> {
  let summary = "Joins a residual branch's bias, dropout and add into one op";
  let description = [{
    Megatron's bias-dropout-add fusion, on the differentiated step (after recomputation
    and pipeline partition, each function on its own): an `mt.dropout` whose result only
    an `mt.add` reads becomes, with that add, `mt.bias_dropout_add` of the dropout's
    input and the add's other operand (the residual), at the add's place; an
    `mt.bias_add` only the dropout reads (a row-parallel linear's bias under tensor
    parallelism) joins it. The dropout's mask, rate and stream are kept, so the draw is
    the same; its gradient is unchanged. The ops must carry the same placement
    attributes, and the mask's readers must come after the add.

    One kernel instead of two or three: the dropped tensor is never stored, and x is
    read once. The CPU backend runs the ops in turn; the GPU kernel rounds each step as
    they store it: the pair's bits on both.
  }];
}

def MtFuseNormGradAdd : Pass<"mt-fuse-norm-grad-add", "::mlir::ModuleOp"> {
  let summary = "Sums the residual stream's gradient in the norms' gradients";
  let description = [{
    In a pre-norm block the residual stream's gradient is the sum of what flows past a
    sublayer and the input gradient of that sublayer's norm: an `mt.add` of an
    `mt.layer_norm_grad`'s (or `mt.rms_norm_grad`'s) input gradient, read by nothing
    else, and a value defined before the norm's gradient becomes that gradient's
    `residual_grad` operand, and the add is gone. The norm's kernel adds it as it
    writes its input gradient, each rounded as the two ops store them: the pair's bits,
    on the CPU (which runs them in turn) and on the GPU, one launch and one pass over the
    tensor fewer per norm.
  }];
}

def MtFuseGradAccumulation : Pass<"mt-fuse-grad-accumulation", "::mlir::ModuleOp"> {
  let summary = "Adds weight gradients straight into the parameters' gradients";
  let description = [{
    Megatron's gradient-accumulation fusion, on the differentiated step: an op whose
    weight gradients (GradAccumulatingOpInterface: mt.linear_grad_weight, mt.bias_grad,
    both results of mt.linear_grad_weight_bias, the weight and bias gradients of
    mt.layer_norm_grad and mt.rms_norm_grad) are each
    read by one `mt.param_grad` alone gets `accumulate`: it adds them into the
    parameters' gradients itself, in the accumulator type (f32 under bf16 and f16, which
    the results' types then say), as the GEMM's C = A·B + C and the column sums' last
    step. The `mt.param_grad` becomes no instruction, and the result no buffer
    (mt-memory-plan places none): one launch and one tensor fewer per weight, and no
    rounding of the gradient to 16 bits before it is added.

    An op of which any weight gradient has another reader (a sum of two contributions)
    is left as it is. The CPU backend computes the gradient into a temporary of the
    accumulator type and adds it: in f32 and f64, the unfused pair bit for bit.
  }];
}

def MtMemoryPlan : Pass<"mt-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Assigns every activation a static offset in one arena";
  let description = [{
    Lifetimes come from program order (a value lives from its definition to its last
    use; function arguments from the start). Buffers are placed greedily, largest
    first, at the lowest offset free for their whole lifetime, aligned to
    `alignment` bytes. Results carry `mt.offsets`; the function carries
    `mt.arena_bytes`, the highest byte any tensor occupies: the peak the runtime's
    arena will reach. Parameters are not in
    the arena: they live in persistent weight storage.

    A result an op may write over one of its operands (`InPlaceOpInterface`: the
    cross-entropy gradients over their logits) takes that operand's buffer when the
    operand is an op's result of the same type that nothing reads after this op.
    A weight gradient its op adds into the parameter's gradient (`accumulate`) is that
    gradient, outside the arena: its offset is -1.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "256", "byte alignment of every buffer">
  ];
}

#endif
