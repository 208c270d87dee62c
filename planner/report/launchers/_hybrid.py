"""Megatron-LM flags for hybrid Mamba models (Nemotron-H, Nemotron 3): `pretrain_mamba.py` with
`--hybrid-override-pattern`, and the plans its MambaStack cannot run as priced.

Facts are from megatron-core 0.16.1 (core_v0.16.1 of Megatron-LM), the first release whose pattern alphabet has the
MoE symbol; Megatron-LM main (2026-08) still reads these flags (pretrain_mamba.py forwards to pretrain_hybrid.py and
--hybrid-override-pattern to --hybrid-layer-pattern, megatron/training/arguments.py:743-755).
"""

from __future__ import annotations

from planner.report.launchers._plan import ModelShape, PlanView, refuse

SCRIPT = "pretrain_mamba.py"

# One pattern character per layer (ssm/mamba_hybrid_layer_allocation.py:25-32, Symbols: M Mamba, * attention,
# - MLP, E MoE). Each character is a whole residual block of its own (ssm/mamba_block.py:121-158 builds one module
# per character), so --num-layers counts characters: _allocate_override (mamba_hybrid_layer_allocation.py:72-84)
# raises unless the pattern is exactly num_layers long. The planner reads a Nemotron-H config the same way (one
# layer per character, planner/inputs/architecture.py _hybrid_pattern), so its layer counts carry over unchanged.
SYMBOLS = {("mamba", "none"): "M", ("full_attention", "none"): "*", ("none", "dense"): "-", ("none", "moe"): "E"}

# mamba_builders.py:20-23 raises without a layer spec ("You must provide a valid Mamba layer spec via --spec");
# this is the stack spec examples/mamba/train.sh passes.
SPEC = ("megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec")


def is_hybrid(m: ModelShape) -> bool:
    """The model has state-space layers, which only the Mamba stack (not pretrain_gpt.py) builds."""
    return bool({"mamba", "mamba1"} & set(m.layer_kinds or ()))


def _pairs(m: ModelShape) -> list[tuple[str, str]]:
    """Each layer's (token mixer, MLP). Without mlp_layer_types every layer has an MLP (ModelSpec.mlp_kinds: dense,
    or MoE after the first dense layers), as in Granite 4.0's hybrids."""
    mixers = m.layer_kinds or ("full_attention",) * m.num_layers
    dense = m.first_dense_layers if m.is_moe else m.num_layers
    mlps = m.mlp_kinds or ("dense",) * dense + ("moe",) * (m.num_layers - dense)
    return list(zip(mixers, mlps, strict=False)) if len(mixers) == len(mlps) == m.num_layers else []


def pattern(m: ModelShape) -> str | None:
    """The --hybrid-override-pattern of the model's layers; None where a layer has no single symbol."""
    pairs = _pairs(m)
    chars = [SYMBOLS.get(pair, "") for pair in pairs]
    return "".join(chars) if pairs and all(chars) else None


def flags(view: PlanView) -> list[tuple[str, ...]]:
    """The hybrid-model flags beside the GPT shape flags (check() has passed)."""
    m = view.model
    assert m.mamba is not None  # check() refuses a Mamba model without its shapes
    heads, head_dim, state, groups = m.mamba
    # --is-hybrid-model: the output layer's init and the FLOPs count treat the model as hybrid
    # (transformer_config.py:1585, training.py:578), as Megatron-LM's own Nemotron-H scripts set it.
    return [("--spec", *SPEC), ("--is-hybrid-model",), ("--hybrid-override-pattern", str(pattern(m))),
            # TransformerConfig mamba_* fields (transformer_config.py:846-857), flags generated from them
            ("--mamba-state-dim", str(state)), ("--mamba-head-dim", str(head_dim)),
            ("--mamba-num-groups", str(groups)), ("--mamba-num-heads", str(heads))]


def check(view: PlanView, launcher: str) -> None:
    """Refuse what pretrain_mamba.py cannot build, or would run otherwise than the plan was priced."""
    _check_layers(view, launcher)
    _check_mixer_split(view, launcher)
    _check_stack(view, launcher)


def _check_layers(view: PlanView, launcher: str) -> None:
    m = view.model
    if "mamba1" in (m.layer_kinds or ()):
        refuse(view, launcher, "inputs.model.layer_types", "Megatron-Core's Mamba mixer is Mamba-2 (SSD, "
               "ssm/mamba_mixer.py); Mamba-1 layers (Jamba) have no flag", "use --format env for the layout")
    if not _pairs(m):
        refuse(view, launcher, "inputs.model.layer_types", f"layer_types and mlp_layer_types do not list "
               f"{m.num_layers} layers each", "regenerate the plan with `plan --format json`")
    if pattern(m) is None:
        odd = sorted({f"{a}+{b}" for a, b in _pairs(m) if (a, b) not in SYMBOLS})
        refuse(view, launcher, "inputs.model.layer_types", f"{', '.join(odd)} layers have no symbol in "
               "--hybrid-override-pattern, whose layers are each one of Mamba-2 (M), attention (*), MLP (-) or "
               "MoE (E)", "use --format nemo with the model's Megatron-Bridge recipe, or --format env")
    if m.mamba is None:
        refuse(view, launcher, "inputs.model.mamba_num_heads", "Mamba layers without mamba_num_heads, "
               "mamba_head_dim, ssm_state_size and n_groups", "give the model's Mamba-2 keys (HF NemotronHConfig)")
    if m.conv_kernel != 4:  # MambaMixer's d_conv defaults to 4 and mamba_stack_spec does not change it
        refuse(view, launcher, "inputs.model.conv_kernel", f"a {m.conv_kernel}-wide Mamba convolution has no flag "
               "(ssm/mamba_mixer.py d_conv=4)", "use --format env for the layout and set d_conv in the layer spec")
    if m.mtp_layers:  # models/mamba/mamba_model.py (core_v0.16) has no mtp_block_spec
        refuse(view, launcher, "inputs.model.num_nextn_predict_layers", "MambaModel builds no multi-token-"
               "prediction block in core_v0.16; the plan prices one", "use --format nemo with the model's "
               "Megatron-Bridge recipe, or --format env")
    if m.is_mla or m.indexer is not None:  # mamba_stack_spec's attention layer is SelfAttention
        refuse(view, launcher, "inputs.model.kv_lora_rank" if m.is_mla else "inputs.model.index_topk",
               "the Mamba stack's attention layers are plain self-attention (models/mamba/mamba_layer_specs.py)",
               "use --format nemo with the model's Megatron-Bridge recipe, or --format env")


def _check_mixer_split(view: PlanView, launcher: str) -> None:
    """MambaMixer splits heads and groups over TP (mamba_mixer.py:249-262) and heads again over CP
    (mamba_context_parallel.py:97-125); the search rules mixer_heads_divisible_by_tp and mamba_heads_divisible_by_cp
    state both, so a searched plan passes here."""
    assert view.model.mamba is not None  # _check_layers refuses a Mamba model without its shapes
    heads, head_dim, state, groups = view.model.mamba
    tp, cp = view.layout.tp, view.layout.cp
    if heads % groups:
        refuse(view, launcher, "inputs.model.n_groups", f"{heads} Mamba heads do not split into {groups} groups",
               "fix the model's mamba_num_heads / n_groups")
    if heads % tp or groups % tp:
        refuse(view, launcher, "tp", f"{heads} Mamba heads and {groups} groups do not split over tp={tp}",
               "re-plan with tp dividing both")
    local = groups // tp
    if heads % (tp * cp) or (cp % local if local < cp else local % cp):
        refuse(view, launcher, "cp", f"{heads // tp} Mamba heads and {local} groups per TP rank do not split over "
               f"cp={cp}", "re-plan with a cp dividing both (or cp=1)")
    width = 2 * heads * head_dim + 2 * groups * state + heads  # in_proj's output: z, x, B, C and dt
    if view.precision in ("fp8", "fp4") and width % 16:  # mamba_mixer.py:241-245, asserted under fp8
        refuse(view, launcher, "inputs.training.precision", f"the Mamba input projection's width {width} is not "
               "a multiple of 16, which fp8 GEMMs need", "plan with --precision bf16")


def _check_stack(view: PlanView, launcher: str) -> None:
    """What MambaStack (ssm/mamba_block.py, core_v0.16.1) leaves out of the GPT path's pipeline and memory options."""
    lay = view.layout
    if lay.vpp > 1:  # mamba_block.py:173-176
        refuse(view, launcher, "vpp", "the Mamba stack asserts no virtual pipeline stages in core_v0.16",
               "re-plan with --fix vpp=1")
    if lay.stage_split == "embedding_loss":  # _select_layers_for_pipeline_parallel counts decoder layers only
        refuse(view, launcher, "stage_split", "the Mamba stack splits decoder layers only; it does not count the "
               "embedding and the loss as layers", "re-plan with --fix vpp=1")
    if lay.recompute in ("full", "offload"):
        refuse(view, launcher, "recompute", f"the Mamba stack has no {lay.recompute} recompute path (mamba_block.py "
               "builds no checkpointed or offloaded forward; only attention recomputes, selectively)",
               "re-plan with --fix recompute=selective (or none)")
