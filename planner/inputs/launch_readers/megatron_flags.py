"""What Megatron-LM (and Megatron-DeepSpeed) flags mean to the planner: the layout knobs and model shapes they set,
the defaults Megatron applies when a script leaves them out, the vocabulary a named tokenizer brings, and the flags
that change nothing the planner prices (data, logging, learning rate, initialisation, kernel fusions).

Sources: Megatron-LM megatron/training/arguments.py (argparse, allow_abbrev=False, so flags match exactly) and the
TransformerConfig dataclass it builds most arguments from (megatron-core transformer_config.py); Megatron-DeepSpeed
(bigscience-workshop/Megatron-DeepSpeed) megatron/arguments.py for the flags only it has.
"""

from __future__ import annotations

# Flag -> layout knob (values as --fix takes them).
KNOBS = {
    "--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp", "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep", "--num-virtual-stages-per-pipeline-rank": "vpp",
    "--virtual-pipeline-model-parallel-size": "vpp", "--micro-batch-size": "mbs",
}
# Flag -> Hugging Face config key (integers).
SHAPE = {
    "--num-layers": "num_hidden_layers", "--hidden-size": "hidden_size", "--ffn-hidden-size": "intermediate_size",
    "--num-attention-heads": "num_attention_heads", "--num-query-groups": "num_key_value_heads",
    "--kv-channels": "head_dim", "--max-position-embeddings": "max_position_embeddings",
    "--num-experts": "num_local_experts", "--moe-router-topk": "num_experts_per_tok",
    "--moe-ffn-hidden-size": "moe_intermediate_size",
}
# Multi-latent attention shapes, read with --multi-latent-attention; Megatron-LM's defaults where a script leaves
# one out (arguments.py: --q-lora-rank None = no query compression, --kv-lora-rank 32, --qk-head-dim 128,
# --qk-pos-emb-head-dim 64, --v-head-dim 128).
MLA_SHAPE = {"--q-lora-rank": ("q_lora_rank", 0), "--kv-lora-rank": ("kv_lora_rank", 32),
             "--qk-head-dim": ("qk_nope_head_dim", 128), "--qk-pos-emb-head-dim": ("qk_rope_head_dim", 64),
             "--v-head-dim": ("v_head_dim", 128)}
# Gated DeltaNet and DeepSeek sparse-attention shapes (Megatron-LM flag -> HF key).
LINEAR_SHAPE = {"--linear-conv-kernel-dim": "linear_conv_kernel_dim", "--linear-key-head-dim": "linear_key_head_dim",
                "--linear-value-head-dim": "linear_value_head_dim", "--linear-num-key-heads": "linear_num_key_heads",
                "--linear-num-value-heads": "linear_num_value_heads"}
DSA_SHAPE = {"--dsa-indexer-n-heads": "index_n_heads", "--dsa-indexer-head-dim": "index_head_dim",
             "--dsa-indexer-topk": "index_topk"}
# Mamba-2 shapes of pretrain_mamba.py (TransformerConfig mamba_* fields, megatron-core transformer_config.py:846-857)
# -> HF NemotronHConfig keys, with Megatron-Core's defaults where a script leaves a flag out (heads: None there,
# hidden x expand 2 / head dim in ssm/mamba_mixer.py:186-239).
MAMBA_SHAPE = {"--mamba-state-dim": ("ssm_state_size", 128), "--mamba-head-dim": ("mamba_head_dim", 64),
               "--mamba-num-groups": ("n_groups", 8), "--mamba-num-heads": ("mamba_num_heads", None)}
# Megatron-Core values of data_parallel_sharding_strategy and cp_comm_type; Bridge (the nemo reader) takes the same.
FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
CP_COMM = {"p2p": "ring", "a2a": "a2a", "a2a+p2p": "a2a+p2p"}
# Megatron's default modules for selective recompute (TransformerConfig.recompute_modules, transformer_config.py
# __post_init__: None -> ["core_attn"]).
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
# Vocabulary sizes of tokenizers a script names without --vocab-size, before Megatron pads them: GPT-2's BPE
# (openai gpt2 vocab.json, 50,257 entries; Megatron's GPT2BPETokenizer.vocab_size = len(encoder)).
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}
GPT2_VOCAB_FILES = ("gpt2-vocab.json",)
# Entry points that train a decoder-only language model.
ENTRY_SCRIPTS = ("pretrain_gpt.py", "pretrain_mamba.py", "pretrain_gpt_core.py", "pretrain_hybrid.py")
OTHER_ENTRIES = ("pretrain_bert.py", "pretrain_t5.py", "pretrain_vlm.py", "pretrain_retro.py", "pretrain_ict.py",
                 "pretrain_vision_classify.py")

# Flags read by the Megatron reader's own code (beyond the tables above).
HANDLED = {
    "--cuda-graph-impl", "--enable-cuda-graph", "--external-cuda-graph", "--cuda-graph-modules", "--cuda-graph-scope",
    "--global-batch-size", "--seq-length", "--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--recompute-activations", "--recompute-modules", "--checkpoint-activations", "--checkpoint-num-layers",
    "--cp-comm-type", "--hierarchical-context-parallel-sizes", "--use-tp-pp-dp-mapping", "--swiglu", "--squared-relu",
    "--quick-geglu",
    "--group-query-attention", "--untie-embeddings-and-output-weights", "--multi-latent-attention",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--num-layers-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout", "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute",
    "--cpu-offloading-num-layers", "--cpu-offloading", "--fine-grained-activation-offloading", "--offload-modules",
    "--moe-router-score-function", "--moe-router-pre-softmax", "--moe-router-num-groups", "--moe-router-group-topk",
    "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp4-format", "--expert-tensor-parallel-size",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    # the embedding/loss-as-layer split follows from pp and vpp (planner.inputs.layout.embedding_loss_split)
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer", "--exp-avg-dtype",
    "--exp-avg-sq-dtype", "--main-grads-dtype", "--main-params-dtype", "--optimizer", "--window-size",
    "--window-attn-skip-freq", "--mtp-num-layers", "--activation-func-clamp-value", "--glu-linear-offset",
    "--softmax-type", "--add-qkv-bias", "--attention-output-gate", "--experimental-attention-variant",
    "--linear-attention-freq", "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
    "--moe-router-force-load-balancing",
    "--hybrid-override-pattern", "--hybrid-layer-pattern", "--moe-latent-size", "--vocab-size",
    "--make-vocab-size-divisible-by", "--tokenizer-type", "--tokenizer-model", "--vocab-file",
    "--rampup-batch-size", "--step-batch-size-schedule", "--disable-bias-linear",
    # Megatron-DeepSpeed
    "--deepspeed", "--deepspeed_config", "--deepspeed-config", "--zero-stage", "--deepspeed-activation-checkpointing",
    "--pad-vocab-size-to", "--partition-activations", "--no-pipeline-parallel", "--cpu-optimizer",
    "--pp-partition-method",
}
# Flags that change nothing the planner prices: data and tokenizer files, logging and checkpoints, learning-rate
# schedule and optimizer hyper-parameters, initialisation, dropout, position-embedding flavour, kernel fusions and
# overlap switches the framework profiles already assume on, and launcher plumbing.
QUIET = {
    "--overlap-grad-reduce", "--overlap-param-gather", "--no-gradient-accumulation-fusion", "--ckpt-format",
    "--moe-flex-dispatcher-backend", "--nnodes", "--nproc-per-node", "--nproc_per_node",
    "--moe-token-dispatcher-type", "--moe-grouped-gemm", "--fp8-amax-history-len", "--fp8-amax-compute-algo",
    "--fp8-param-gather", "--fp4-recipe", "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters",
    "--lr-warmup-samples", "--lr-warmup-fraction", "--lr-warmup-init", "--lr-decay-iters", "--lr-decay-samples",
    "--train-iters", "--train-samples", "--weight-decay", "--clip-grad", "--adam-beta1", "--adam-beta2", "--adam-eps",
    "--init-method-std", "--data-path", "--split", "--merge-file", "--save", "--load", "--save-interval",
    "--eval-interval", "--eval-iters", "--log-interval", "--tensorboard-dir", "--seed", "--position-embedding-type",
    "--normalization", "--rotary-base", "--rotary-percent", "--rotary-scaling-factor",
    "--use-rotary-position-embeddings", "--attention-dropout", "--hidden-dropout", "--norm-epsilon",
    "--no-masked-softmax-fusion", "--use-flash-attn",
    "--attention-backend", "--distributed-backend", "--transformer-impl", "--use-mcore-models", "--wandb-project",
    "--wandb-exp-name", "--exit-duration-in-mins", "--master_addr", "--master_port", "--master-addr",
    "--master-port", "--node_rank", "--node-rank", "--rdzv_id", "--rdzv_backend", "--rdzv_endpoint", "--rdzv-id",
    "--rdzv-backend", "--rdzv-endpoint", "--log-throughput", "--distributed-timeout-minutes", "--no-position-embedding",
    "--data-cache-path", "--mock-data", "--no-load-optim", "--no-load-rng", "--use-checkpoint-args",
    "--bias-swiglu-fusion", "--no-bias-swiglu-fusion", "--timing-log-level", "--log-timers-to-tensorboard",
    "--moe-aux-loss-coeff", "--moe-router-load-balancing-type", "--manual-gc",
    "--manual-gc-interval", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
    "--spec", "--is-hybrid-model",  # pretrain_mamba.py's layer spec; hybrid init scaling and FLOPs accounting
    "--apply-layernorm-1p", "--decoupled-lr", "--decoupled-min-lr", "--calculate-per-token-loss",
    "--tiktoken-pattern", "--no-create-attention-mask-in-dataloader", "--no-mmap-bin-files", "--num-workers",
    "--profile", "--profile-step-start", "--profile-step-end", "--profile-ranks", "--log-memory-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-num-zeros-in-grad", "--log-params-norm", "--logging-level",
    "--no-check-for-nan-in-loss-and-grad", "--auto-detect-ckpt-format", "--dist-ckpt-strictness",
    "--no-save-optim", "--enable-experimental", "--qk-layernorm", "--mscale", "--mscale-all-dim",
    "--moe-router-topk-scaling-factor", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate",
    "--moe-router-dtype", "--moe-permute-fusion", "--moe-router-fusion", "--moe-router-padding-for-quantization",
    "--mtp-loss-scaling-factor", "--init-model-with-meta-device", "--te-rng-tracker", "--use-nccl-ub",
    "--fsdp-double-buffer", "--megatron-fsdp-main-grads-dtype", "--reuse-grad-buf-for-mxfp8-param-ag",
    "--tokenizer-name-or-path", "--tokenizer-metadata", "--embed-layernorm", "--sync-tp-duplicated-parameters",
    "--abort-on-unmet-fused-kernel-constraints", "--kill-switch-path", "--tensorboard-queue-size",
    "--log-batch-size-to-tensorboard", "--train-weighted-split-paths-path", "--valid-weighted-split-paths-path",
    "--valid-num-workers", "--data-impl", "--codecarbon-dir", "--loss-scale", "--loss-scale-window",
    "--initial-loss-scale", "--min-loss-scale", "--hysteresis", "--no-load-args",
    "--universal-checkpoint", "--wandb-save-dir", "--eval-micro-batch-size", "--wandb-entity",
    "--rope-scaling-factor", "--use-rope-scaling", "--rope-type", "--no-rope-fusion", "--disable-vision-class-token",
    "--no-persist-layer-norm", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
    "--train-data-path", "--valid-data-path", "--test-data-path", "--dataloader-type", "--reset-position-ids",
    "--reset-attention-mask", "--eod-mask-loss", "--save-retain-interval", "--non-persistent-save-interval",
    "--non-persistent-ckpt-type", "--async-save", "--ckpt-fully-parallel-save", "--ckpt-fully-parallel-load",
    "--ckpt-assume-constant-structure", "--use-dist-ckpt", "--load-main-params-from-ckpt", "--finetune",
    "--override-opt_param-scheduler", "--use-checkpoint-opt_param-scheduler", "--start-weight-decay",
    "--end-weight-decay", "--weight-decay-incr-style", "--log-progress", "--log-straggler", "--log-energy",
    "--log-world-size-to-tensorboard", "--log-loss-scale-to-tensorboard", "--log-learning-rate-to-tensorboard",
}
