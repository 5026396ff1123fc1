#ifndef MT_OPS_TD
#define MT_OPS_TD

include "dialects/mt/MtBase.td"
include "dialects/mt/MtInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"

def Mt_FloatTensor : RankedTensorOf<[F32, F64, BF16, F16]>;
def Mt_IndexTensor : RankedTensorOf<[I32, I64]>;
def Mt_MaskTensor : RankedTensorOf<[I8]>;

// An op whose result types follow from its operands and attributes. The verifier
// re-infers them, so a wrong declared type is reported with both shapes, and
// mt-specialize can re-derive every type once batch and sequence are fixed.
// It is an instruction of the plan, encoded by name unless `plan` says otherwise.
class Mt_ShapedOp<string mnemonic, list<Trait> traits = [],
                  Trait plan = Mt_PlanOpInterface>
    : Mt_Op<mnemonic, !listconcat([InferTypeOpAdaptor, plan], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

class Mt_GradOp<string mnemonic, list<Trait> traits = [],
                Trait plan = Mt_PlanOpInterface>
    : Mt_ShapedOp<mnemonic, !listconcat([Pure], traits), plan>;

// An op whose plan encoding adds to the one by name.
def Mt_CustomPlanEncoding : DeclareOpInterfaceMethods<Mt_PlanOpInterface, ["encodeInstruction"]>;

// The key/value heads of an op over a fused QKV: kv_heads, or, without it, one per head
// (the head count, or dimension 1 of the attention probabilities).
def Mt_KeyValueHeads {
  code methods = [{
    int64_t getKeyValueHeads() { return getKvHeads() ? *getKvHeads() : getHeads(); }
  }];
}
def Mt_ProbsKeyValueHeads {
  code methods = [{
    int64_t getKeyValueHeads() {
      return getKvHeads() ? *getKvHeads()
                          : ::llvm::cast<::mlir::ShapedType>(getProbs().getType()).getDimSize(1);
    }
  }];
}

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

def Mt_ParamOp : Mt_Op<"param"> {
  let summary = "a named, trained parameter with its initialisation rule";
  let arguments = (ins StrAttr:$name, Mt_InitKind:$init, OptionalAttr<F64Attr>:$std,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                       OptionalAttr<I64Attr>:$shard_dim, UnitAttr:$tp_grad_reduce,
                       OptionalAttr<I64Attr>:$vocab_rows, UnitAttr:$expert_parallel);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$name $init (`(` $std^ `)`)? attr-dict `:` type($result)";
  let hasVerifier = 1;
  let description = [{
    `mt.param "attn.qkv.weight" normal(2.0e-02) : tensor<2304x768xf32>`. Inside a
    block repeated by `mt.repeat`, names get the repeat's prefix and layer index
    (`h.3.attn.qkv.weight`). Initial values are a function of (seed, name, element
    index), so no layout changes them.

    After mt-tensor-parallel, a sharded parameter's type is its local block: block
    `tp rank` of `global_shape` along `shard_dim`. `tp_grad_reduce` marks a
    replicated parameter whose gradient each tensor-parallel rank computes only in
    part (under sequence parallelism, or the weights of mt.qk_norm, which every head
    shares): the runtime sums it over the group.

    `vocab_rows` marks a vocabulary table padded by mt-pad-vocab: only its first
    `vocab_rows` rows (of the global shape) are the model's; the rest are padding that
    no token reads and no loss counts, so a checkpoint may hold any number of them.

    `expert_parallel` marks a mixture of experts' weight cut by mt-expert-parallel: its
    block along `shard_dim` 0 is `expert rank`'s, and its gradient reduces over the ranks
    that hold the same experts.
  }];
}

def Mt_ParamGradOp : Mt_Op<"param_grad", [Mt_PlanOpInterface]> {
  let summary = "accumulates the gradient of the named parameter";
  let description = [{
    Written by mt-autodiff once every use of the parameter has been differentiated;
    the runtime adds the value into the parameter's persistent gradient buffer. Where
    the value is the weight gradient of an op that accumulates
    (GradAccumulatingOpInterface), that op has added it already.
  }];
  let arguments = (ins StrAttr:$name, AnyStaticShapeTensor:$grad);
  let assemblyFormat = "$name `,` $grad attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

def Mt_RepeatOp : Mt_Op<"repeat", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "applies a block function `count` times to the residual stream";
  let description = [{
    `%y = mt.repeat 12 @block(%x) {prefix = "h"}`: the block is written once; its
    parameters become `h.0.*` … `h.11.*` when mt-expand unrolls it.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$count,
                       FlatSymbolRefAttr:$callee, StrAttr:$prefix,
                       Mt_FloatTensor:$input);
  let results = (outs Mt_FloatTensor:$result);
  let assemblyFormat =
      "$count $callee `(` $input `)` attr-dict `:` functional-type($input, $result)";
}

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

def Mt_EmbeddingOp : Mt_ShapedOp<"embedding", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "rows of a [V, H] table gathered by token ids: [B, S] -> [B, S, H]";
  let arguments = (ins Mt_FloatTensor:$table, Mt_IndexTensor:$ids, UnitAttr:$vocab_parallel);
  let results = (outs Mt_FloatTensor:$result);
  let description = [{
    With `vocab_parallel`, the table is this tensor-parallel rank's block of rows;
    ids outside it give zero rows, so the group's sum is the full lookup.
  }];
}

def Mt_PositionEmbeddingOp : Mt_ShapedOp<"position_embedding", [Pure,
    Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "adds learned positions: x[b, s, :] + table[s, :]";
  let description = [{
    With `sequence_parallel`, x is this tensor-parallel rank's block of the sequence,
    which starts at position rank × S_local. With `context_parallel` (cp, set by
    mt-context-parallel), the sequence x holds (or its block) is this context-parallel
    rank r's share: chunks r and 2·cp − 1 − r of 2·cp, whose positions it takes.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$table,
                       UnitAttr:$sequence_parallel, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LayerNormOp : Mt_ShapedOp<"layer_norm", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "layer normalisation over the last dimension, with weight and bias";
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$weight,
                       Mt_FloatTensor:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
}

def Mt_RmsNormOp : Mt_ShapedOp<"rms_norm", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "RMS normalisation over the last dimension, with weight (LLaMA)";
  let description = [{
    y = x / sqrt(mean(x²) + epsilon) · w (Zhang & Sennrich 2019): layer_norm without
    the mean's subtraction and without a bias.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
}

def Mt_LinearOp : Mt_ShapedOp<"linear", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "y = x·Wᵀ (+ b), x: [..., K], W: [N, K], b: [N]";
  let description = [{
    Weights are stored [out, in], so a tied output embedding is the input embedding
    table itself.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$weight,
                       Optional<Mt_FloatTensor>:$bias);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LinearGeluOp : Mt_ShapedOp<"linear_gelu", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "pre = x·Wᵀ (+ b), result = gelu(pre): a linear with GELU as its epilogue";
  let description = [{
    Written by mt-fuse-epilogues in place of a linear whose only forward reader is a
    GELU. Both results are kept: `pre` for GELU's gradient, `result` for the next
    linear's weight gradient, as the unfused pair keeps them. One kernel writes both
    (cuBLASLt's GELU epilogue with its auxiliary output), so `pre` is not read back.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$weight,
                       Optional<Mt_FloatTensor>:$bias);
  let results = (outs Mt_FloatTensor:$pre, Mt_FloatTensor:$result);
}

def Mt_AddOp : Mt_ShapedOp<"add", [Pure, Mt_Pointwise, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "elementwise sum of two tensors of one type (residual add)";
  let arguments = (ins Mt_FloatTensor:$lhs, Mt_FloatTensor:$rhs);
  let results = (outs Mt_FloatTensor:$result);
}

// GELU's form: "tanh", the approximation GPT-2 and Megatron compute, or "none", x·Φ(x)
// exactly (BERT; PyTorch's default). plan.fbs's GeluApproximation, by name.
def Mt_GeluApproximation : ConfinedAttr<DefaultValuedStrAttr<StrAttr, "tanh">,
    [AttrConstraint<CPred<"::llvm::is_contained({\"tanh\", \"none\"}, "
                          "::llvm::cast<::mlir::StringAttr>($_self).getValue())">,
                    "\"tanh\" or \"none\"">]>;

def Mt_GeluOp : Mt_ShapedOp<"gelu", [Pure, Mt_Pointwise, Mt_ColumnParallelConsumer,
    Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "GELU, x·Φ(x), exact or by the tanh approximation (`approximate`)";
  let arguments = (ins Mt_FloatTensor:$input, Mt_GeluApproximation:$approximate);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_SiluOp : Mt_ShapedOp<"silu", [Pure, Mt_Pointwise, Mt_ColumnParallelConsumer,
    Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "SiLU (swish), x·σ(x): the gate of LLaMA's SwiGLU";
  let arguments = (ins Mt_FloatTensor:$input);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_SwigluOp : Mt_ShapedOp<"swiglu", [Pure, Mt_Pointwise, Mt_ColumnParallelConsumer,
    Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "SwiGLU's gating, silu(gate)·up (Shazeer 2020), element by element";
  let description = [{
    The two halves of LLaMA's MLP input projection, each the result of its own linear
    (Hugging Face's gate_proj and up_proj), so that tensor parallelism splits both
    column-parallel and every rank holds matching blocks of the two. Backward keeps gate
    and up, as Megatron's fused SwiGLU keeps its fc1 output.
  }];
  let arguments = (ins Mt_FloatTensor:$gate, Mt_FloatTensor:$up);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_AttentionOp : Mt_ShapedOp<"attention", [Pure, Mt_ColumnParallelConsumer,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>],
    Mt_CustomPlanEncoding> {
  let summary = "scaled dot-product attention of a fused QKV: [B, S, (heads + 2·kv_heads)·d] -> [B, S, heads·d]";
  let description = [{
    The last dimension of `qkv` is laid out by key/value group: (group, {the group's
    heads/kv_heads queries, its key, its value}, d), as Megatron lays out grouped-query
    attention, so splitting it across tensor-parallel ranks splits whole groups. Without
    `kv_heads` every head has its own key and value: (head, {q, k, v}, d).
    `kv_heads = 1` is multi-query attention (Shazeer 2019), 1 < kv_heads < heads
    grouped-query attention (Ainslie et al. 2023).
    Scores are scaled by 1/sqrt(d); `causal` masks future positions, and a `window` of w
    (causal only) the keys more than w − 1 positions back as well: each query sees its
    own position and the w − 1 before it (Mistral's and Hugging Face's `sliding_window`
    w; Megatron's `--window-size` (w − 1, 0)). With
    `dropout`, the attention probabilities are dropped at that rate with the keep mask
    of `stream` (numbered by mt-expand), drawn per element of the global [B, heads, S,
    S] probabilities; `head_parallel` (set by mt-tensor-parallel) says the heads are
    this rank's block of them. The fused op keeps no s×s tensor: its gradient
    recomputes the probabilities and regenerates the mask. mt-unfuse-attention
    rewrites it into the chain attention_probs → dropout → attention_context.

    With `keep_stats` (set by mt-keep-attention-stats for the gradient's sake), a second
    result `stats` [B, heads, S] in the loss's type holds each query row's log-sum-exp
    of its scaled, masked scores (before any dropout), from which the gradient forms the
    probabilities again without running the forward twice: flash attention's backward.

    With `context_parallel` (cp, set by mt-context-parallel), `qkv` holds the whole
    sequence S of the context-parallel group, in order, and the op computes the queries
    of this rank r's share only: chunks r and 2·cp − 1 − r of 2·cp, so the result (and
    `stats`) has S/cp rows, and each causal query sees the keys up to its own position
    (Megatron's load-balanced context parallelism, the all-gather form). With `ring`
    as well, `qkv` is this rank's share only, and the keys and values of the others'
    shares come round a ring of the context-parallel group, one share a step, each
    step's partial attention merged by its rows' log-sum-exp (ring attention, Megatron's
    `p2p` form); the plan's opcode is RingAttention, which the executor runs with the
    communicator.
  }];
  let arguments = (ins Mt_FloatTensor:$qkv, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$dropout,
                       OptionalAttr<I64Attr>:$stream, UnitAttr:$head_parallel,
                       UnitAttr:$keep_stats, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel,
                       UnitAttr:$ring, OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window);
  let results = (outs Mt_FloatTensor:$result, Optional<Mt_FloatTensor>:$stats);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_AttentionProbsOp : Mt_ShapedOp<"attention_probs", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "softmax(QKᵀ/sqrt(d)) of a fused QKV (mt.attention's layout): [B, heads, S, S]";
  let description = [{ Masked as mt.attention masks, by `causal` and `window`. }];
  let arguments = (ins Mt_FloatTensor:$qkv, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads, UnitAttr:$causal,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_AttentionContextOp : Mt_ShapedOp<"attention_context", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "probabilities times V: [B, heads, S, S] x [B, S, (heads + 2·kv_heads)·d] -> [B, S, heads·d]";
  let arguments = (ins Mt_FloatTensor:$probs, Mt_FloatTensor:$qkv, OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads);
  let results = (outs Mt_FloatTensor:$result);
  let extraClassDeclaration = Mt_ProbsKeyValueHeads.methods;
}

def Mt_RotaryOp : Mt_ShapedOp<"rotary", [Pure, Mt_ColumnParallelConsumer, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "rotary position embedding of the queries and keys of a fused QKV";
  let description = [{
    The last dimension of `qkv` [B, S, (heads + 2·kv_heads)·d] is laid out by key/value
    group: (group, {the group's heads/kv_heads query heads, its key, its value}, d), as
    Megatron's grouped-query attention lays it out; with kv_heads = heads (the default)
    that is attention's (head, {q, k, v}, d). Every query and key head is rotated at its
    position p (0 ≤ p < S) as Hugging Face's LLaMA and Megatron do (Su et al. 2021):
    dims i and i + d/2 form pair i, turned by the angle p·theta^(−2i/d); values pass
    through. `scaling_factor` adds LLaMA 3.1's frequency scaling (with
    `low_freq_factor`, `high_freq_factor` and `original_positions`). `inverse` turns the
    other way: the op's gradient, as a rotation's inverse is its transpose. With
    `context_parallel` (cp), the rows are this context-parallel rank's share of the
    sequence (mt.position_embedding's), turned at their own positions.
  }];
  let arguments = (ins Mt_FloatTensor:$qkv, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta,
                       OptionalAttr<F64Attr>:$scaling_factor,
                       DefaultValuedAttr<F64Attr, "1.0">:$low_freq_factor,
                       DefaultValuedAttr<F64Attr, "4.0">:$high_freq_factor,
                       ConfinedAttr<DefaultValuedAttr<I64Attr, "8192">, [IntPositive]>:$original_positions,
                       UnitAttr:$inverse, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_QkNormOp : Mt_ShapedOp<"qk_norm", [Pure, Mt_ColumnParallelConsumer, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "RMS normalisation of each query and key head of a fused QKV (Qwen3's)";
  let description = [{
    Megatron's --qk-layernorm with RMSNorm, as Qwen3 normalises: each query
    head's d values of `qkv` (mt.rotary's layout, by key/value group) become
    x / sqrt(mean(x²) + epsilon) · query_weight, each key head's likewise with
    key_weight (both [d], shared by every head and every group); values pass through.
    Under tensor parallelism each rank holds whole groups, so the weights' gradients are
    sums over this rank's heads, summed over the group (tp_grad_reduce).
  }];
  let arguments = (ins Mt_FloatTensor:$qkv, Mt_FloatTensor:$query_weight,
                       Mt_FloatTensor:$key_weight, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_DropoutOp : Mt_ShapedOp<"dropout", [Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "inverted dropout with a counter-based mask";
  let description = [{
    The keep mask is a function of (seed, step, micro-batch, `stream`, global element
    index), so every layout and every recomputation draws the same one. mt-expand
    numbers the streams. With `keep_mask` (set by mt-autodiff on every dropout of the
    step it differentiates), the op also returns the mask, one byte per element, which the
    gradient reads, as Megatron keeps it. With `sequence_parallel`
    (`feature_parallel`), the input is this rank's block of dimension 1 (the sequence;
    the heads of attention probabilities) (of the last dimension), and the mask is
    drawn at the elements' global indices. With `context_parallel` (cp), dimension 1
    is (a block of) this context-parallel rank's share of the sequence
    (mt.position_embedding's).
  }];
  let arguments = (ins Mt_FloatTensor:$input, F64Attr:$rate,
                       OptionalAttr<I64Attr>:$stream, UnitAttr:$sequence_parallel,
                       UnitAttr:$feature_parallel, UnitAttr:$keep_mask, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result, Optional<Mt_MaskTensor>:$mask);
  let hasVerifier = 1;
}

def Mt_CrossEntropyOp : Mt_ShapedOp<"cross_entropy", [Pure, Mt_ColumnParallelConsumer,
    Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "mean softmax cross-entropy of logits [B, S, V] against targets [B, S]";
  let description = [{
    With `num_classes`, only the first `num_classes` logits take part (the rest are
    vocabulary padding).
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Mt_IndexTensor:$targets,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_BiasAddOp : Mt_ShapedOp<"bias_add", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "x + b over the last dimension (a row-parallel linear's bias, added once)";
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$bias);
  let results = (outs Mt_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Tensor parallelism (written by mt-tensor-parallel)
//===----------------------------------------------------------------------===//

def Mt_TpCopyOp : Mt_ShapedOp<"tp_copy", [Pure,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "enters a tensor-parallel region: identity forward, all-reduce backward";
  let description = [{
    Megatron's f operator (Shoeybi et al. 2019): every rank of the group reads the same
    x; the gradients each computes are partial, so backward sums them over `grid`
    axis `grid_axis` (an upstream `shard.all_reduce`).
  }];
  let arguments = (ins Mt_FloatTensor:$input, FlatSymbolRefAttr:$grid, I64Attr:$grid_axis);
  let results = (outs Mt_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Context parallelism (written by mt-context-parallel)
//===----------------------------------------------------------------------===//

def Mt_ContextOrderOp : Mt_ShapedOp<"context_order", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "context-parallel shares gathered by rank [cp·B, S/cp, F] -> the sequence in order [B, S, F]";
  let description = [{
    Each context-parallel rank r holds chunks r and 2·cp − 1 − r of the 2·cp chunks of
    every sequence; a `shard.all_gather` of the shares along dimension 0 stacks them by
    rank, and this op puts the chunks in sequence order. With `inverse`, back: the
    gradient, which a `shard.reduce_scatter` then sums into each rank's share.
  }];
  let arguments = (ins Mt_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$context_parallel,
                       UnitAttr:$inverse);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_CrossEntropyStatsOp : Mt_ShapedOp<"cross_entropy_stats", [Pure, Mt_CostOpInterface],
    Mt_CustomPlanEncoding> {
  let summary = "per row of a vocabulary shard: [max, Σexp(x − max), target logit]";
  let description = [{
    Vocabulary-parallel cross-entropy (Megatron), step 1 of 2: logits [..., V/t] hold
    this rank's classes. The result [3, M] (M rows) is gathered over the group, so the
    full logits never exist on one rank. `num_classes` counts the real (unpadded)
    classes of the whole vocabulary.
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Mt_IndexTensor:$targets,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_CrossEntropyMergeOp : Mt_ShapedOp<"cross_entropy_merge", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>]> {
  let summary = "the mean loss from every shard's gathered statistics [3t, M]";
  let description = [{
    Step 2 of 2. The logits and targets are operands so that the gradient rule can
    compute this rank's dlogits directly.
  }];
  let arguments = (ins Mt_FloatTensor:$stats, Mt_FloatTensor:$logits, Mt_IndexTensor:$targets,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_VocabParallelCrossEntropyGradOp : Mt_GradOp<"vocab_parallel_cross_entropy_grad",
    [Mt_CostOpInterface, DeclareOpInterfaceMethods<Mt_InPlaceOpInterface>],
    Mt_CustomPlanEncoding> {
  let summary = "this rank's dlogits of the vocabulary-parallel cross-entropy";
  let description = [{
    One pass over this rank's logits, from the merged statistics; the gradient may take
    the logits' buffer (their last reader).
  }];
  let arguments = (ins Mt_FloatTensor:$loss_grad, Mt_FloatTensor:$logits,
                       Mt_IndexTensor:$targets, Mt_FloatTensor:$stats,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Gradient ops (written by mt-autodiff)
//===----------------------------------------------------------------------===//

def Mt_EmbeddingGradOp : Mt_GradOp<"embedding_grad", [Mt_CostOpInterface]> {
  let summary = "scatter-adds [B, S, H] gradients into a [num_embeddings, H] table";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_IndexTensor:$ids,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_embeddings,
                       UnitAttr:$vocab_parallel);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_PositionEmbeddingGradOp : Mt_GradOp<"position_embedding_grad", [Mt_CostOpInterface]> {
  let summary = "sums [B, S, H] gradients over the batch into a [num_positions, H] table";
  let arguments = (ins Mt_FloatTensor:$grad,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_positions,
                       UnitAttr:$sequence_parallel, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LayerNormGradOp : Mt_GradOp<"layer_norm_grad", [
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getOtherFlops"]>,
    DeclareOpInterfaceMethods<Mt_GradAccumulatingOpInterface, ["getFirstWeightGradient"]>]> {
  let summary = "gradients of layer_norm: input, weight and bias";
  let description = [{
    With `residual_grad` (mt-fuse-norm-grad-add), the input gradient is that plus the
    norm's own, rounded as the two ops store them: the residual stream's gradient summed
    in the norm's kernel.
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input,
                       Mt_FloatTensor:$weight, Optional<Mt_FloatTensor>:$residual_grad,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$input_grad, Mt_FloatTensor:$weight_grad,
                      Mt_FloatTensor:$bias_grad);
  let hasVerifier = 1;
}

def Mt_RmsNormGradOp : Mt_GradOp<"rms_norm_grad", [
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getOtherFlops"]>,
    DeclareOpInterfaceMethods<Mt_GradAccumulatingOpInterface, ["getFirstWeightGradient"]>]> {
  let summary = "gradients of rms_norm: input and weight";
  let description = [{
    With `residual_grad`, the input gradient is that plus the norm's own, as
    mt.layer_norm_grad's.
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input,
                       Mt_FloatTensor:$weight, Optional<Mt_FloatTensor>:$residual_grad,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$input_grad, Mt_FloatTensor:$weight_grad);
  let hasVerifier = 1;
}

def Mt_QkNormGradOp : Mt_GradOp<"qk_norm_grad", [Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_GradAccumulatingOpInterface, ["getFirstWeightGradient"]>]> {
  let summary = "gradients of qk_norm: the fused QKV's, the query weight's and the key weight's";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$qkv, Mt_FloatTensor:$query_weight,
                       Mt_FloatTensor:$key_weight, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$input_grad, Mt_FloatTensor:$query_weight_grad,
                      Mt_FloatTensor:$key_weight_grad);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_LinearGradInputOp : Mt_GradOp<"linear_grad_input",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "dx = dy·W, dy: [..., N], W: [N, K]";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$weight);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LinearGradInputGeluOp : Mt_GradOp<"linear_grad_input_gelu",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms", "getOtherFlops"]>]> {
  let summary = "dpre = (dy·W)·gelu'(pre), dy: [..., N], W: [N, K], pre: [..., K]";
  let description = [{
    Written by mt-fuse-epilogues in place of a linear's input gradient whose only
    reader is the gradient of the GELU in front of that linear: GELU's derivative
    applied as the GEMM's epilogue (cuBLASLt's DGELU), so dy·W is never stored.
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$weight, Mt_FloatTensor:$pre);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LinearGradWeightOp : Mt_GradOp<"linear_grad_weight",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
     Mt_GradAccumulatingOpInterface]> {
  let summary = "dW = dyᵀ·x summed over leading dims, dy: [..., N], x: [..., K]";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_BiasGradOp : Mt_GradOp<"bias_grad", [Mt_CostOpInterface,
    Mt_GradAccumulatingOpInterface]> {
  let summary = "db = dy summed over all but the last dimension";
  let arguments = (ins Mt_FloatTensor:$grad, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_LinearGradWeightBiasOp : Mt_GradOp<"linear_grad_weight_bias",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
     Mt_GradAccumulatingOpInterface]> {
  let summary = "(dW, db) = (dyᵀ·x, dy summed over all but the last dimension)";
  let description = [{
    Written by mt-fuse-bias-grad in place of an mt.linear_grad_weight and an
    mt.bias_grad of the same dy: the bias gradient summed as the weight gradient's GEMM
    reads dy (cuBLASLt's BGRADB epilogue), so dy is read once. Its results are the
    pair's, in their types.
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input, UnitAttr:$accumulate);
  let results = (outs Mt_FloatTensor:$weight_grad, Mt_FloatTensor:$bias_grad);
}

def Mt_GeluGradOp : Mt_GradOp<"gelu_grad", [Mt_CostOpInterface]> {
  let summary = "dx = dy·gelu'(x), GELU's form that of its forward";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input,
                       Mt_GeluApproximation:$approximate);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_SiluGradOp : Mt_GradOp<"silu_grad", [Mt_CostOpInterface]> {
  let summary = "dx = dy·silu'(x) = dy·σ(x)·(1 + x·(1 − σ(x)))";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_SwigluGradOp : Mt_GradOp<"swiglu_grad", [Mt_CostOpInterface]> {
  let summary = "dgate = dy·up·silu'(gate), dup = dy·silu(gate)";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$gate, Mt_FloatTensor:$up);
  let results = (outs Mt_FloatTensor:$gate_grad, Mt_FloatTensor:$up_grad);
}

def Mt_AttentionGradOp : Mt_GradOp<"attention_grad",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>], Mt_CustomPlanEncoding> {
  let summary = "dqkv of attention from dy, the saved qkv and the saved output";
  let description = [{
    With `stats`, the forward's rows' log-sum-exp (mt.attention's `keep_stats`): the
    probabilities are formed from them rather than normalised again. With
    `context_parallel`, as the forward's: dqkv covers the whole sequence of qkv (the
    queries' rows outside this rank's share are zero); with `ring`, the shares' keys and
    values go round the ring again, each with its gradient, which comes home after a
    last step (RingAttentionGrad).
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$qkv,
                       Mt_FloatTensor:$output, Optional<Mt_FloatTensor>:$stats,
                       ConfinedAttr<I64Attr, [IntPositive]>:$heads, OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads,
                       UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$dropout, OptionalAttr<I64Attr>:$stream,
                       UnitAttr:$head_parallel, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel,
                       UnitAttr:$ring, OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = Mt_KeyValueHeads.methods;
}

def Mt_AttentionProbsGradOp : Mt_GradOp<"attention_probs_grad",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "dqkv (q and k parts; v zero) from dprobs, the saved probs and qkv";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$probs, Mt_FloatTensor:$qkv,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads);
  let results = (outs Mt_FloatTensor:$result);
  let extraClassDeclaration = Mt_ProbsKeyValueHeads.methods;
}

def Mt_AttentionContextGradOp : Mt_GradOp<"attention_context_grad",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "dprobs = dy·Vᵀ and dqkv (v part; q and k zero) = probsᵀ·dy";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$probs, Mt_FloatTensor:$qkv,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$kv_heads);
  let results = (outs Mt_FloatTensor:$probs_grad, Mt_FloatTensor:$qkv_grad);
  let extraClassDeclaration = Mt_ProbsKeyValueHeads.methods;
}

def Mt_DropoutGradOp : Mt_GradOp<"dropout_grad", [Mt_CostOpInterface]> {
  let summary = "dx = dy·mask/(1 − rate), with the mask the forward kept";
  let description = [{
    Without `mask`, the mask is drawn again from `stream` (with the forward's
    `sequence_parallel` / `feature_parallel`): mt-recompute uses this form where keeping
    a recomputed dropout only for its mask would mean recomputing its input.
  }];
  let arguments = (ins Mt_FloatTensor:$grad, Optional<Mt_MaskTensor>:$mask, F64Attr:$rate,
                       OptionalAttr<I64Attr>:$stream, UnitAttr:$sequence_parallel,
                       UnitAttr:$feature_parallel, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
}

def Mt_CrossEntropyGradOp : Mt_GradOp<"cross_entropy_grad", [Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_InPlaceOpInterface>]> {
  let summary = "dlogits = dloss·(softmax(logits) − onehot(targets)) / (B·S)";
  let description = [{
    The gradient may take the logits' buffer (the logits' last reader).
  }];
  let arguments = (ins Mt_FloatTensor:$loss_grad, Mt_FloatTensor:$logits,
                       Mt_IndexTensor:$targets,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Fused ops (written by the fusion passes)
//===----------------------------------------------------------------------===//

def Mt_BiasDropoutAddOp : Mt_ShapedOp<"bias_dropout_add", [
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getOtherFlops"]>]> {
  let summary = "residual + dropout(x (+ bias)), with dropout's mask";
  let description = [{
    Written by mt-fuse-bias-dropout-add in place of an `mt.dropout` whose result only an
    `mt.add` reads, with the residual the add's other operand, and the `mt.bias_add` in
    front of the dropout where only the dropout reads it (Megatron's bias-dropout-add
    fusion): one kernel reads x, the bias and the residual and writes the sum and the
    mask. The mask, the rate and the stream are the dropout's (its draw is the same);
    each step's result is rounded to the storage type as the unfused ops store it, so
    the CPU backend, running the ops in turn, and the GPU give the pair's bits.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_FloatTensor:$residual,
                       Optional<Mt_FloatTensor>:$bias, F64Attr:$rate,
                       OptionalAttr<I64Attr>:$stream, UnitAttr:$sequence_parallel,
                       UnitAttr:$feature_parallel, UnitAttr:$keep_mask, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$context_parallel);
  let results = (outs Mt_FloatTensor:$result, Optional<Mt_MaskTensor>:$mask);
  let hasVerifier = 1;
}

def Mt_CrossEntropyWithGradOp : Mt_ShapedOp<"cross_entropy_with_grad", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getBytesMoved"]>,
    DeclareOpInterfaceMethods<Mt_InPlaceOpInterface>]> {
  let summary = "the mean cross-entropy and its dlogits, in one pass over the logits";
  let description = [{
    Written by mt-fuse-cross-entropy in place of `mt.cross_entropy` and its
    `mt.cross_entropy_grad` (Megatron's cross-entropy loss fusion): the loss gradient
    is the loss seed, known before the loss is, so one kernel reads each row of logits
    for its softmax statistics, writes the row's loss, and writes the row's gradient
    over the logits (`dlogits` may take their buffer). The CPU backend runs it as the
    pair, bit for bit.
  }];
  let arguments = (ins Mt_FloatTensor:$loss_grad, Mt_FloatTensor:$logits,
                       Mt_IndexTensor:$targets,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$num_classes);
  let results = (outs Mt_FloatTensor:$loss, Mt_FloatTensor:$dlogits);
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

// Each token of [B, S, ...] chooses `topk` of `num_experts` experts; its slots are
// dispatched as rows sorted by expert (within an expert by token, then slot): N =
// B·S·topk rows, of which counts[e] are expert e's. Dropless unless a dispatch and its
// combine have a `capacity_factor`: then the rows past the kept ones are zero.

def Mt_MoeRouterOp : Mt_ShapedOp<"moe_router", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, DeclareOpInterfaceMethods<Mt_TensorParallelOpInterface>]> {
  let summary = "top-k gating of router logits [B, S, E] -> (gates, experts) [B, S, k]";
  let description = [{
    Each token's `topk` experts are those of the largest logits, ties to the lower
    expert index, listed in that order. Its gates are the softmax over those k logits
    (Mixtral's), or with `pre_softmax` the softmax over all E probabilities, the top k
    of them taken as they are. With `aux_loss_coeff` c > 0 the router's gradient also
    carries the load-balancing loss of Switch Transformer, as Megatron-Core defines it:
    c·E/(k·T²)·Σ_e n_e·Σ_t p_te over the T tokens of the micro-batch, p the softmax over
    all E logits and n_e the slots routed to expert e. That loss is not part of the
    returned loss: its gradient is added to the logits' (scaled as the loss seed is),
    as Megatron's auxiliary-loss scaler adds it, so every layout carries it unchanged.

    When the op sees only a share of the micro-batch's tokens (sequence or context
    parallelism), `load` [E] is n_e over all of them, summed over the ranks that share
    it, and T is Σ_e n_e / k; only the gradient reads it (mt-tensor-parallel and
    mt-context-parallel write it: shareRouterLoad, Collectives.h).
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Optional<Mt_IndexTensor>:$load,
                       ConfinedAttr<I64Attr, [IntPositive]>:$topk,
                       UnitAttr:$pre_softmax,
                       DefaultValuedAttr<F64Attr, "0.0">:$aux_loss_coeff);
  let results = (outs Mt_FloatTensor:$gates, Mt_IndexTensor:$experts);
}

def Mt_MoeRouterGradOp : Mt_GradOp<"moe_router_grad", [Mt_CostOpInterface]> {
  let summary = "dlogits from dgates, with the load-balancing loss's gradient";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$logits,
                       Mt_IndexTensor:$experts, Optional<Mt_IndexTensor>:$load,
                       ConfinedAttr<I64Attr, [IntPositive]>:$topk,
                       UnitAttr:$pre_softmax,
                       DefaultValuedAttr<F64Attr, "0.0">:$aux_loss_coeff);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_MoeCountOp : Mt_ShapedOp<"moe_count", [Pure, Mt_CostOpInterface, Mt_PerToken]> {
  let summary = "experts [B, S, k] -> the slots routed to each expert [E]";
  let description = [{
    n_e of the load-balancing loss for a share of the tokens: what shareRouterLoad
    (Collectives.h) sums over the ranks sharing a micro-batch, before any capacity drops.
  }];
  let arguments = (ins Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts);
  let results = (outs Mt_IndexTensor:$counts);
}

def Mt_MoeDropOp : Mt_ShapedOp<"moe_drop", [Pure, Mt_CostOpInterface, Mt_PerToken],
    Mt_CustomPlanEncoding> {
  let summary = "(gates, experts [B, S, k]) -> experts with the slots each expert drops as -1";
  let description = [{
    Megatron-Core's `probs` token drop policy: with `capacity_factor` f each expert keeps
    at most ceil(f·B·S·k/E) of the op's slots, those of the largest gates (of equal gates,
    the earlier slot in token then slot order); a dropped slot's expert becomes -1, which
    `moe_dispatch` gives no row and `moe_combine` adds nothing for. Its result has no
    gradient: a dropped slot's gate gets none through the combine.
  }];
  let arguments = (ins Mt_FloatTensor:$gates, Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       F64Attr:$capacity_factor);
  let results = (outs Mt_IndexTensor:$result);
  let extraClassDeclaration = [{
    /// The slots each expert keeps of this op's tokens.
    int64_t getCapacity() {
      return ::mlir::mt::expertCapacity(getExperts(), getNumExperts(), getCapacityFactor());
    }
  }];
}

def Mt_MoeDispatchOp : Mt_ShapedOp<"moe_dispatch", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, Mt_PerToken],
    Mt_CustomPlanEncoding> {
  let summary = "tokens [B, S, H] -> (rows [B·S·k, H] sorted by expert, counts [E])";
  let description = [{
    With `capacity_factor` f each expert keeps at most ceil(f·B·S·k/E) of the op's slots:
    the first, in token then slot order (Megatron-Core's `position` drop policy); a
    dropped slot gets no row and `moe_combine` of the same `capacity_factor` adds
    nothing for it. A slot of expert -1 (dropped by `moe_drop`) gets no row
    either. The rows stay B·S·k, those past the kept ones zero; `counts` are the
    kept rows per expert. Every combine of the same experts must have the same factor.
  }];
  let arguments = (ins Mt_FloatTensor:$input, Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       OptionalAttr<F64Attr>:$capacity_factor);
  let results = (outs Mt_FloatTensor:$rows, Mt_IndexTensor:$counts);
  let extraClassDeclaration = [{
    /// The slots each expert keeps of this op's tokens (0: every one).
    int64_t getCapacity() {
      return ::mlir::mt::expertCapacity(getExperts(), getNumExperts(), getCapacityFactor());
    }
  }];
}

def Mt_MoeDispatchGradOp : Mt_GradOp<"moe_dispatch_grad", [Mt_CostOpInterface],
    Mt_CustomPlanEncoding> {
  let summary = "dx [B, S, H]: each token's slots' row gradients summed, slot by slot";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       OptionalAttr<F64Attr>:$capacity_factor);
  let results = (outs Mt_FloatTensor:$result);
  let extraClassDeclaration = [{
    /// The slots each expert keeps of this op's tokens (0: every one).
    int64_t getCapacity() {
      return ::mlir::mt::expertCapacity(getExperts(), getNumExperts(), getCapacityFactor());
    }
  }];
}

def Mt_GroupedLinearOp : Mt_ShapedOp<"grouped_linear", [Pure,
    DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, Mt_PerToken]> {
  let summary = "rows [N, I] by expert: expert e's counts[e] rows times w[e]ᵀ, w [E, O, I]";
  let arguments = (ins Mt_FloatTensor:$input, Mt_IndexTensor:$counts, Mt_FloatTensor:$weight);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_GroupedLinearGradInputOp : Mt_GradOp<"grouped_linear_grad_input",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "dx [N, I]: expert e's rows of dy times w[e]";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_IndexTensor:$counts, Mt_FloatTensor:$weight);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_GroupedLinearGradWeightOp : Mt_GradOp<"grouped_linear_grad_weight",
    [DeclareOpInterfaceMethods<Mt_CostOpInterface, ["getGemms"]>]> {
  let summary = "dw [E, O, I]: dw[e] = dyᵀ·x over expert e's rows";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$input, Mt_IndexTensor:$counts);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_MoeExchangeOp : Mt_ShapedOp<"moe_exchange", [Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, Mt_PerToken]> {
  let summary = "expert parallelism: dispatched rows to the ranks of their experts";
  let description = [{
    Written by mt-expert-parallel after `mt.moe_dispatch`. The `expert_parallel` ranks
    of the expert group each hold E/ep consecutive experts; a rank's rows [N, H], sorted
    by expert, go to the ranks of their experts (the runtime's all-to-all, the counts
    first), and this rank's experts' rows of every rank arrive, expert-major (within an
    expert by source rank): [ep·N, H], the most that can come, the rows past those
    counted zero. `routing` [ep, E/ep] counts each source's rows per local expert: the
    counts `mt.grouped_linear` takes (an expert's rows, their sum over the sources), and
    what `mt.moe_exchange_back` sends the results back by.
  }];
  let arguments = (ins Mt_FloatTensor:$rows, Mt_IndexTensor:$counts,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$expert_parallel);
  let results = (outs Mt_FloatTensor:$result, Mt_IndexTensor:$routing);
}

def Mt_MoeExchangeBackOp : Mt_ShapedOp<"moe_exchange_back", [Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, Mt_PerToken]> {
  let summary = "expert parallelism: the experts' results [ep·N, H] back to their tokens' ranks";
  let arguments = (ins Mt_FloatTensor:$rows, Mt_IndexTensor:$counts, Mt_IndexTensor:$routing,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$expert_parallel);
  let results = (outs Mt_FloatTensor:$result);
}

def Mt_MoeCombineOp : Mt_ShapedOp<"moe_combine", [Pure, Mt_CostOpInterface,
    DeclareOpInterfaceMethods<Mt_DifferentiableOpInterface>, Mt_PerToken],
    Mt_CustomPlanEncoding> {
  let summary = "y [B, S, H] = Σ over each token's slots of gate·its row, slot by slot";
  let arguments = (ins Mt_FloatTensor:$rows, Mt_FloatTensor:$gates, Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       OptionalAttr<F64Attr>:$capacity_factor);
  let results = (outs Mt_FloatTensor:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The slots each expert keeps of this op's tokens (0: every one).
    int64_t getCapacity() {
      return ::mlir::mt::expertCapacity(getExperts(), getNumExperts(), getCapacityFactor());
    }
  }];
}

def Mt_MoeCombineGradOp : Mt_GradOp<"moe_combine_grad", [Mt_CostOpInterface],
    Mt_CustomPlanEncoding> {
  let summary = "drows = gate·dy of each slot's token, dgates = dy·row";
  let arguments = (ins Mt_FloatTensor:$grad, Mt_FloatTensor:$rows, Mt_FloatTensor:$gates,
                       Mt_IndexTensor:$experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       OptionalAttr<F64Attr>:$capacity_factor);
  let results = (outs Mt_FloatTensor:$rows_grad, Mt_FloatTensor:$gates_grad);
  let extraClassDeclaration = [{
    /// The slots each expert keeps of this op's tokens (0: every one).
    int64_t getCapacity() {
      return ::mlir::mt::expertCapacity(getExperts(), getNumExperts(), getCapacityFactor());
    }
  }];
}

#endif
