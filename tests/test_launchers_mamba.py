"""`--format megatron` for hybrid Mamba models: pretrain_mamba.py flags from the model's own per-layer kinds, and the
refusals for what that script cannot build. tests/test_launchers_real.py feeds the same flags to megatron-core."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from planner.errors import PlanInputError
from planner.report.launchers import render

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf_configs"
GOLDEN = ROOT / "tests" / "golden" / "launchers"
# planner/inputs/architecture.py reads a pattern character as one layer's (mixer, MLP); written out here so that
# the golden document does not depend on that reader
KINDS = {"M": ("mamba", "none"), "*": ("full_attention", "none"), "-": ("none", "dense"), "E": ("none", "moe")}


def hf(name: str) -> dict:
    return json.loads((HF / f"{name}.json").read_text())


def flags_of(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            flag, *values = shlex.split(line)
            assert flag not in out, f"{flag} twice"
            out[flag] = values
    return out


def nemotron_h_doc(**layout: object) -> dict:
    """Nemotron-H 56B (tests/data/hf_configs/nemotron-h-56b.json) on 256 H100s, pp4 with 28/30-layer end stages."""
    cfg = hf("nemotron-h-56b")
    pattern = cfg["hybrid_override_pattern"]
    model = {"name": "nemotron-h-56b", "hidden_size": 8192, "intermediate_size": 32768, "num_hidden_layers": 118,
             "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
             "hidden_act": "relu2", "tie_word_embeddings": False, "max_position_embeddings": 8192,
             "num_local_experts": 0, "num_experts_per_tok": 0, "moe_intermediate_size": 0, "n_shared_experts": 0,
             "first_k_dense_replace": 0, "mamba_num_heads": 256, "mamba_head_dim": 64, "ssm_state_size": 256,
             "n_groups": 8, "layer_types": [KINDS[c][0] for c in pattern],
             "mlp_layer_types": [KINDS[c][1] for c in pattern]}
    lay = {"tp": 8, "pp": 4, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1, "num_microbatches": 64,
           "zero": 1, "recompute": "selective", "sequence_parallel": True, "schedule": "1f1b",
           "first_stage_layers": 28, "last_stage_layers": 30, **layout}
    return {"schema_version": 1, "planner_version": "0.1.0",
            "inputs": {"model": model,
                       "cluster": {"name": "h100x256", "num_gpus": 256, "gpus_per_node": 8, "nvlink_domain": 8},
                       "training": {"seq_len": 8192, "global_batch": 512, "precision": "bf16",
                                    "framework": "megatron-core"},
                       "options": {}},
            "plans": [{"rank": 1, "layout": lay}]}


def test_golden_nemotron_h() -> None:
    text = render(nemotron_h_doc(), "megatron")
    path = GOLDEN / "nemotron-h-56b.megatron.txt"
    if os.environ.get("PLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", ["nemotron-h-56b", "nemotron-3-nano-30b-a3b"])
def test_pattern_and_mamba_flags_are_the_configs(name: str) -> None:
    """The plan CLI on the HF config prints the config's own hybrid_override_pattern, one layer per character, and
    its Mamba-2 shapes."""
    cfg = hf(name)
    proc = run_plan_in_process("-m", str(HF / f"{name}.json"), "-c", "h100x256", "--format", "megatron")
    assert proc.returncode == 0, proc.stderr
    assert "pretrain_mamba.py" in proc.stdout.splitlines()[0]
    flags = flags_of(proc.stdout)
    assert flags["--hybrid-override-pattern"] == [cfg["hybrid_override_pattern"]]
    assert flags["--num-layers"] == [str(len(cfg["hybrid_override_pattern"]))] == [str(cfg["num_hidden_layers"])]
    assert flags["--mamba-state-dim"] == [str(cfg["ssm_state_size"])]
    assert flags["--mamba-head-dim"] == [str(cfg["mamba_head_dim"])]
    assert flags["--mamba-num-groups"] == [str(cfg["n_groups"])]
    assert flags["--mamba-num-heads"] == [str(cfg["mamba_num_heads"])]
    assert flags["--spec"] == ["megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec"]
    assert "--is-hybrid-model" in flags and "--moe-layer-freq" not in flags
    assert flags["--num-query-groups"] == [str(cfg["num_key_value_heads"])] and "--squared-relu" in flags
    assert "--num-virtual-stages-per-pipeline-rank" not in flags  # the framework_mamba_stack rule
    assert flags.get("--recompute-granularity", ["selective"]) == ["selective"]


def test_nemotron_3_moe_flags_are_the_configs() -> None:
    cfg = hf("nemotron-3-nano-30b-a3b")
    proc = run_plan_in_process("-m", str(HF / "nemotron-3-nano-30b-a3b.json"), "-c", "h100x64", "--format",
                               "megatron")
    assert proc.returncode == 0, proc.stderr
    flags = flags_of(proc.stdout)
    assert flags["--num-experts"] == [str(cfg["n_routed_experts"])]
    assert flags["--moe-router-topk"] == [str(cfg["num_experts_per_tok"])]
    assert flags["--moe-ffn-hidden-size"] == [str(cfg["moe_intermediate_size"])]
    assert flags["--moe-shared-expert-intermediate-size"] == [str(cfg["moe_shared_expert_intermediate_size"])]
    assert flags["--moe-router-score-function"] == ["sigmoid"]  # HF NemotronH's router gates by sigmoid


def _refused(doc: dict, field: str, needle: str) -> None:
    with pytest.raises(PlanInputError) as err:
        render(doc, "megatron")
    assert err.value.field == field and needle in str(err.value), str(err.value)


@pytest.mark.parametrize(("layout", "needle"), [
    ({"vpp": 2, "schedule": "interleaved"}, "virtual pipeline"),  # 28/30/30/30 layers split into 2 chunks each
    ({"recompute": "full"}, "no full recompute"),
    ({"recompute": "offload", "offload_layers": 4, "pp": 1, "dp": 32, "num_microbatches": 16,
      "first_stage_layers": None, "last_stage_layers": None}, "no offload recompute"),
])
def test_mamba_stack_refusals(layout: dict, needle: str) -> None:
    """What core_v0.16's MambaStack cannot run: the field is the layout knob, the fix names it."""
    key = next(k for k in ("vpp", "recompute") if k in layout)
    _refused(nemotron_h_doc(**layout), f"plans[0].layout.{key}", needle)


def test_mamba_context_parallel_split() -> None:
    """MambaMixer's CP split (mamba_context_parallel.py): heads over tp x cp; each TP rank's groups split over cp,
    or cp a multiple of them (the group state is then repeated)."""
    doc = nemotron_h_doc(tp=2, cp=8, dp=4, num_microbatches=128)  # 4 groups per TP rank, repeated over 8 CP ranks
    assert "--context-parallel-size 8\n" in render(doc, "megatron")
    doc["inputs"]["model"]["n_groups"] = 16  # 8 groups per TP rank, one per CP rank
    assert "--mamba-num-groups 16\n" in render(doc, "megatron")
    doc["inputs"]["model"].update(n_groups=8, mamba_num_heads=24)  # 12 heads per TP rank over 8 CP ranks: no
    _refused(doc, "plans[0].layout.cp", "cp=8")


@pytest.mark.parametrize(("change", "field", "needle"), [
    ({"layer_types": ["mamba1"] * 118, "mamba_expand": 2, "mamba_dt_rank": 512}, "inputs.model.layer_types",
     "Mamba-1"),
    ({"mlp_layer_types": ["moe" if i % 2 == 0 else "dense" for i in range(118)], "num_local_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 1024}, "inputs.model.layer_types", "mamba+moe"),
    # no mlp_layer_types: an MLP follows every mixer (Granite 4.0's hybrids), two blocks in one layer
    ({"mlp_layer_types": None}, "inputs.model.layer_types", "mamba+dense"),
    ({"conv_kernel": 8}, "inputs.model.conv_kernel", "convolution"),
    ({"num_nextn_predict_layers": 1}, "inputs.model.num_nextn_predict_layers", "multi-token"),
    ({"n_groups": 3}, "inputs.model.n_groups", "groups"),
    ({"n_groups": 4}, "plans[0].layout.tp", "4 groups do not split over tp=8"),  # mamba_mixer.py ngroups % tp
])
def test_what_pretrain_mamba_cannot_build_is_refused(change: dict, field: str, needle: str) -> None:
    doc = nemotron_h_doc()
    doc["inputs"]["model"].update(change)
    _refused(doc, field, needle)


def test_fp8_mamba_projection_width() -> None:
    doc = nemotron_h_doc()
    doc["inputs"]["training"]["precision"] = "fp8"
    assert "--fp8-format hybrid\n" in render(doc, "megatron")  # 2 x 16384 + 2 x 8 x 256 + 256 = 37120 = 16 x 2320
    doc["inputs"]["model"]["mamba_num_heads"] = 248  # 2 x 15872 + 4096 + 248 = 36088, not a multiple of 16
    _refused(doc, "inputs.training.precision", "multiple of 16")


def test_short_convolutions_are_still_refused() -> None:
    proc = run_plan_in_process("-m", str(HF / "lfm2.5-vl-1.6b.json"), "-c", "h100x64", "--format", "megatron")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "conv" in proc.stderr and "pretrain_mamba.py" in proc.stderr and "inputs.model.layer_types" in proc.stderr


def test_latent_moe_width_is_launched_and_read_back(tmp_path) -> None:
    """Nemotron 3's LatentMoE (moe_latent_size, priced by the planner) is --moe-latent-size, and reads back."""
    from planner.inputs.launch_readers import read_launch_file

    cfg = dict(hf("nemotron-3-nano-30b-a3b"), moe_latent_size=1024)
    src = tmp_path / "latent.json"
    src.write_text(json.dumps(cfg))
    proc = run_plan_in_process("-m", str(src), "-c", "h100x64", "--format", "megatron")
    assert proc.returncode == 0, proc.stderr
    assert flags_of(proc.stdout)["--moe-latent-size"] == ["1024"]
    script = tmp_path / "latent.sh"
    script.write_text(proc.stdout)
    assert read_launch_file(str(script)).model_keys["moe_latent_size"] == 1024
