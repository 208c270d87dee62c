"""Every catalog model's top-1 plan launches in every framework that has a launcher (issue 11, item 4).

`--format megatron|nemo|torchtitan|deepspeed` plans for its framework (planner.inputs.frameworks), so the search may
only rank layouts that framework can run: the launcher must print the top pick (exit 0), never refuse it (exit 2).
Where the framework genuinely cannot fit the model the answer is "nothing feasible" (exit 1), and the cases below
say so with the reason. When megatron-core / DeepSpeed are importable, the printed text also goes through their
own config code (the helpers of tests/test_launchers_real.py).
"""

from __future__ import annotations

import json

import pytest
from conftest import run_plan_in_process

from planner.inputs.frameworks import FRAMEWORK_FOR_FORMAT

# (model, GPUs, seq_len, global batch). h100 x 64 and x 512 for every model, one larger cluster for the big ones.
# Llama 2 has 4096 positions and gpt3-175b 2048 (Megatron refuses longer sequences); the larger clusters get a
# global batch of at least one sequence per GPU, which DeepSpeed's data-parallel-only layouts need.
CASES: list[tuple[str, int, int, int]] = [
    *[(m, n, 4096, 512) for m in ("llama2-7b", "llama2-13b", "llama2-70b") for n in (64, 512)],
    *[(m, n, 8192, 512) for m in ("llama3-8b", "llama3-70b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-72b")
      for n in (64, 512)],
    ("llama3-405b", 64, 8192, 512), ("llama3-405b", 512, 8192, 512), ("llama3-405b", 2048, 8192, 2048),
    ("gpt3-175b", 64, 2048, 512), ("gpt3-175b", 512, 2048, 1536), ("gpt3-175b", 1024, 2048, 2048),
    ("nemotron4-340b", 64, 4096, 512), ("nemotron4-340b", 512, 4096, 1024), ("nemotron4-340b", 1024, 4096, 2048),
    ("deepseek-v3", 64, 4096, 512), ("deepseek-v3", 512, 4096, 2048), ("deepseek-v3", 2048, 4096, 4096),
    # the MoE catalog added for issue 12: sliding-window/sink attention, interleaved MoE layers, fine-grained experts
    *[(m, n, 4096, 512) for m in ("gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama4-maverick", "kimi-k2")
      for n in (64, 512)],
]
FORMATS = ("megatron", "nemo", "torchtitan", "deepspeed")

# (model, GPUs, format) -> why nothing fits. DeepSpeed as its users run it (a Trainer with a ds_config: ZeRO 0-3,
# gradient checkpointing, AutoTP up to 8 with ZeRO <= 2, Ulysses SP; no pipeline, no expert parallelism) fits the
# dense models; MoE models whose every expert is on every data-parallel group's ZeRO-3 shard plus routed activations
# do not, nor does any framework fit a 340B+ dense model on 64 H100s.
NOT_FEASIBLE: dict[tuple[str, int, str], str] = {
    **{("llama3-405b", 64, f): "405B parameters: states alone exceed 64 x 80 GiB at any layout" for f in FORMATS},
    **{("nemotron4-340b", 64, f): "340B parameters: states alone exceed 64 x 80 GiB at any layout" for f in FORMATS},
    # 671B parameters need ~10 TiB of weights, fp32 grads and Adam states; 64 x 80 GiB is 5 TiB.
    **{("deepseek-v3", 64, f): "671B parameters: states alone exceed 64 x 80 GiB at any layout" for f in FORMATS},
    **{("kimi-k2", 64, f): "1T parameters: states alone exceed 64 x 80 GiB at any layout" for f in FORMATS},
    **{("llama4-maverick", 64, f): "400B parameters: ~16 B of states each exceed 64 x 80 GiB" for f in FORMATS},
    **{(m, n, "deepspeed"): "MoE without expert parallelism: ZeRO-3 shards plus every routed copy's activations "
       "exceed 80 GiB" for m, n in (("deepseek-v3", 512), ("deepseek-v3", 2048), ("llama4-maverick", 512),
                                    ("kimi-k2", 512), ("qwen3-235b-a22b", 64))},
}


def _args(model: str, gpus: int, seq: int, gbs: int) -> tuple[str, ...]:
    return ("--model", model, "--cluster", f"h100x{gpus}", "--seq-len", str(seq), "--global-batch", str(gbs),
            "--top", "1")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("model", "gpus", "seq", "gbs"), CASES, ids=[f"{m}-h100x{n}" for m, n, _, _ in CASES])
def test_top_pick_launches(model: str, gpus: int, seq: int, gbs: int, fmt: str) -> None:
    proc = run_plan_in_process(*_args(model, gpus, seq, gbs), "--format", fmt)
    assert proc.returncode != 2, f"the launcher refused the top pick of its own framework:\n{proc.stderr}"
    reason = NOT_FEASIBLE.get((model, gpus, fmt))
    if reason is None:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip()
    else:
        assert proc.returncode == 1, f"expected nothing feasible ({reason}), got exit {proc.returncode}"
        assert "no feasible plan" in proc.stderr and "memory_fits" in proc.stderr, proc.stderr


def _json_doc(model: str, gpus: int, seq: int, gbs: int, fmt: str) -> tuple[dict, str]:
    """The plan document for the framework `fmt` implies, and the launcher text printed for the same problem."""
    args = _args(model, gpus, seq, gbs)
    doc = run_plan_in_process(*args, "--framework", FRAMEWORK_FOR_FORMAT[fmt], "--format", "json")
    text = run_plan_in_process(*args, "--format", fmt)
    assert doc.returncode == 0 and text.returncode == 0, doc.stderr + text.stderr
    return json.loads(doc.stdout), text.stdout


# A spread of shapes for the real validators: dense GQA, MHA, MoE with EP, MLA, the largest dense models.
REAL = [c for c in CASES if (c[0], c[1]) in {("llama3-8b", 64), ("llama3-70b", 512), ("mixtral-8x7b", 64),
                                             ("mixtral-8x22b", 512), ("gpt3-175b", 1024), ("llama3-405b", 2048),
                                             ("nemotron4-340b", 1024), ("deepseek-v3", 2048),
                                             ("llama2-13b", 512), ("gpt-oss-120b", 512), ("qwen3-235b-a22b", 512),
                                             ("llama4-maverick", 512), ("kimi-k2", 512)}]


@pytest.mark.parametrize(("model", "gpus", "seq", "gbs"), REAL, ids=[f"{m}-h100x{n}" for m, n, _, _ in REAL])
def test_top_pick_passes_megatron_core(mcore, model: str, gpus: int, seq: int, gbs: int) -> None:
    from test_launchers_real import megatron_check

    from planner.report.launchers import render

    doc, text = _json_doc(model, gpus, seq, gbs, "megatron")
    assert render(doc, "megatron") == text, "the printed flags are not the planned layout's"
    megatron_check(doc)


DS_REAL = [c for c in CASES if (c[0], c[1], "deepspeed") not in NOT_FEASIBLE
           and c[0] in ("llama2-7b", "llama3-8b", "mixtral-8x7b", "llama2-13b", "gpt3-175b", "llama3-70b")]


@pytest.mark.parametrize(("model", "gpus", "seq", "gbs"), DS_REAL, ids=[f"{m}-h100x{n}" for m, n, _, _ in DS_REAL])
def test_top_pick_passes_deepspeed(deepspeed_pkg, monkeypatch, model: str, gpus: int, seq: int, gbs: int) -> None:
    from test_launchers_real import deepspeed_config, ds_config_of

    doc, text = _json_doc(model, gpus, seq, gbs, "deepspeed")
    lay = doc["plans"][0]["layout"]
    parsed = deepspeed_config(ds_config_of(text), lay["dp"], monkeypatch)
    assert parsed.train_batch_size == gbs
    assert parsed.zero_optimization_stage == lay["zero"]
    assert parsed.tensor_parallel_config.autotp_size == (lay["tp"] if lay["tp"] > 1 else 0)
    assert lay["pp"] == lay["ep"] == 1 and lay["recompute"] in ("none", "full")
    assert ("--gradient_checkpointing" in text) == (lay["recompute"] == "full")


@pytest.fixture(scope="module")
def mcore():
    pytest.importorskip("torch", reason="megatron-core needs torch")
    return pytest.importorskip("megatron.core.transformer.transformer_config", reason="megatron-core not installed")


@pytest.fixture(scope="module")
def deepspeed_pkg():
    pytest.importorskip("torch", reason="DeepSpeed needs torch")
    return pytest.importorskip("deepspeed.runtime.config", reason="DeepSpeed not installed")


def test_docs_capability_table_matches_frameworks() -> None:
    """docs/commands.md's framework table is capability_table(), pasted."""
    from pathlib import Path

    from planner.inputs.frameworks import capability_table

    text = (Path(__file__).resolve().parent.parent / "docs" / "commands.md").read_text()
    start = text.index("<!-- capability table: generated by planner.inputs.frameworks.capability_table() -->\n")
    block = text[text.index("\n", start) + 1:text.index("<!-- end capability table -->")]
    assert block == capability_table(), "docs/commands.md's framework table is stale: paste capability_table() into it"


def test_llama70b_on_512_h100_launches_with_deepspeed() -> None:
    """Issue 24: `plan --model llama70b --cluster h100x512 --format deepspeed` exits 0 with a launch a DeepSpeed user
    runs: the ds_config in a here-document and a launcher running the Trainer script on it."""
    proc = run_plan_in_process("--model", "llama70b", "--cluster", "h100x512", "--format", "deepspeed")
    assert proc.returncode == 0, proc.stderr
    assert "cat > ds_config.json <<'EOF'" in proc.stdout
    launch = [line for line in proc.stdout.splitlines() if line.startswith(("deepspeed ", "accelerate launch "))]
    assert len(launch) == 1 and "train.py" in launch[0] and "--deepspeed ds_config.json" in proc.stdout


def test_deepspeed_hints_do_not_loop() -> None:
    """The "nothing feasible" hints for a DeepSpeed plan name only what DeepSpeed can change (it has no pipeline,
    expert parallelism or fp8), and following the first gives a plan."""
    args = ("--model", "llama4-maverick", "--cluster", "h100x512", "--seq-len", "4096", "--format", "deepspeed")
    proc = run_plan_in_process(*args)
    assert proc.returncode == 1, proc.stderr
    (hints,) = [line for line in proc.stderr.splitlines() if "would help:" in line]
    for knob in ("pp=", "ep=", "fp8"):
        assert knob not in hints, hints
    assert "--param-offload --optimizer-offload 1" in hints
    again = run_plan_in_process(*args, "--optimizer-offload", "1")
    assert again.returncode == 0, again.stderr
    # the stack is what binds here (no pipeline or expert parallelism): the launchers that have them are named
    assert "--format megatron or --format torchtitan (deepspeed runs no pipeline parallelism" in hints


def test_deepspeed_batch_hint_is_a_multiple_of_the_data_parallel_ranks() -> None:
    """AutoTP and Ulysses leave at least 64 data-parallel ranks of 512 GPUs (tp x cp divides the 8 KV heads), so a
    batch of 700 fits no layout; the hint is the nearest batch that does."""
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x512", "--global-batch", "700",
                               "--format", "deepspeed")
    assert proc.returncode == 1, proc.stderr
    assert "--global-batch 704 (the nearest batch with a plan)" in proc.stderr


@pytest.mark.parametrize(("fmt", "model", "precision"), [("deepspeed", "llama3-8b", "fp8"),
                                                         ("torchtitan", "llama3-8b", "fp4"),
                                                         ("torchtitan", "mixtral-8x7b", "fp8")])
def test_precision_a_framework_lacks_is_a_bad_input(fmt: str, model: str, precision: str) -> None:
    proc = run_plan_in_process("--model", model, "--cluster", "h100x64", "--precision", precision, "--format", fmt)
    assert proc.returncode == 2 and "--precision" in proc.stderr, proc.stderr
    assert "cannot express" not in proc.stderr  # refused before the search, not by the launcher


def test_nemo_fp8_top_pick_uses_the_distributed_optimizer() -> None:
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--precision", "fp8", "--format", "nemo")
    assert proc.returncode == 0, proc.stderr
