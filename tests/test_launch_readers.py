"""`plan explain --from`: every launcher format the planner writes reads back as the same layout and problem, real
launch scripts (shell variables, torchrun sizes) are understood, and bad files are one-line errors (exit 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from cli.options import build_problem, framework_for
from cli.plan_options import PlanOptions
from planner.errors import PlanInputError
from planner.inputs.catalog import load_model
from planner.inputs.launch_readers import layout_for, read_launch_file, resolve_cluster, resolve_model
from planner.inputs.layout import KNOBS
from planner.report import document
from planner.report.explain import complete_layout
from planner.report.launchers import render
from planner.search.search import search

ROOT = Path(__file__).resolve().parents[1]
SUFFIX = {"megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json", "nemo": ".txt"}

# (model, cluster, seq_len, global batch, precision, pins, formats): dense, interleaved pipelines, MoE, context
# parallel with all-to-all, fp8, HSDP and ZeRO-only DeepSpeed plans.
CASES = [
    ("llama3-70b", "h100x512", 8192, 512, "bf16", [], ("megatron", "nemo", "torchtitan")),
    ("llama3-70b", "h100x256", 8192, 512, "bf16", ["tp=4", "pp=4"], ("megatron", "nemo", "torchtitan")),
    ("llama3-8b", "h100x64", 8192, 512, "bf16", [], ("deepspeed", "megatron", "torchtitan")),
    ("mixtral-8x7b", "h100x64", 4096, 512, "bf16", ["ep=8"], ("megatron", "nemo")),
    ("mixtral-8x7b", "h100x64", 4096, 512, "bf16", ["ep=8", "tp=2", "etp=1"], ("megatron", "nemo", "torchtitan")),
    ("llama3-70b", "h100x512", 131072, 64, "bf16", ["cp_comm=a2a"], ("megatron", "nemo")),
    ("llama3-70b", "h100x1024", 8192, 1024, "fp8", ["pp=8"], ("megatron", "nemo", "torchtitan")),
    ("llama3-70b", "h100x256", 8192, 512, "bf16", ["zero=hsdp"], ("torchtitan",)),
    ("llama2-13b", "a100x128", 4096, 512, "bf16", ["recompute=full", "pp=2"], ("megatron", "nemo", "torchtitan")),
]


def _ids(case):
    return f"{case[0]}-{case[1]}-{'+'.join(case[5]) or 'free'}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_every_format_reads_back_as_the_same_layout(case, tmp_path):
    model, cluster, seq, gbs, precision, pins, formats = case
    checked = 0
    for fmt in formats:
        problem = build_problem(PlanOptions(model=model, cluster=cluster, seq_len=seq, global_batch=gbs,
                                            precision=precision, framework=framework_for(None, fmt), fix=tuple(pins)))
        result = search(problem, top=3)
        doc = document.build(result, {})
        for rank, plan in enumerate(result.plans, 1):
            try:
                text = render(doc, fmt, rank)
            except PlanInputError:
                continue  # a plan this launcher cannot express (the launcher says so); the others are checked
            path = tmp_path / f"{fmt}{rank}{SUFFIX[fmt]}"
            path.write_text(text)
            cfg = read_launch_file(str(path))
            assert cfg.dialect == fmt
            assert cfg.ignored == [], (fmt, cfg.ignored)
            # ds_config names neither model nor cluster: they come from the options, as a user would pass them
            opts = (model, cluster) if fmt == "deepspeed" else (None, None)
            m = resolve_model(cfg, opts[0])
            c = resolve_cluster(cfg, opts[1])
            assert (m.name, c.name, c.num_gpus) == (problem.model.name, problem.cluster.name, problem.num_gpus)
            back = complete_layout(problem, layout_for(cfg, m, c.num_gpus)).as_dict()
            want = plan.layout.as_dict()
            if want["tp"] == 1:
                want["sp"] = back["sp"] = 0  # sequence parallelism without TP is no knob at all
            assert {k: back[k] for k in KNOBS} == want, (fmt, rank, text)
            assert (cfg.global_batch, cfg.precision) == (gbs, precision)
            assert cfg.seq_len in (seq, None)  # a ds_config has no sequence length
            checked += 1
    assert checked >= len(formats)  # at least one plan per format read back


def plan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


SCRIPT = """#!/bin/bash
TP=8
PP=4
export GBS=1024
torchrun --nproc_per_node 8 --nnodes 64 --node_rank $NODE_RANK pretrain_gpt.py \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} \\
    --num-layers-per-virtual-pipeline-stage 5 --sequence-parallel --use-distributed-optimizer \\
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 \\
    --group-query-attention --num-query-groups 8 --swiglu --untie-embeddings-and-output-weights --disable-bias-linear \\
    --micro-batch-size 1 --global-batch-size $GBS --seq-length 8192 \\
    --recompute-activations --bf16 --lr 3e-4 --use-fancy-thing --foo-size 3
"""


def test_launch_script_with_variables_is_priced_beside_better_layouts(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    r = plan("explain", "--from", str(script), "--cluster", "h100x512", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "--foo-size" in r.stderr and "--use-fancy-thing" in r.stderr and "--lr" not in r.stderr
    out = json.loads(r.stdout)
    lay = out["yours"]["layout"]
    assert (lay["tp"], lay["pp"], lay["vpp"], lay["dp"], lay["zero"], lay["recompute"], lay["schedule"]) == (
        8, 4, 4, 16, 1, "selective", "interleaved")
    assert out["inputs"]["model"]["name"] == "llama3-70b"  # matched by shape and the 8192-token sequences
    assert out["inputs"]["training"]["global_batch"] == 1024
    best = out["alternatives"][0]
    assert best["rank"] == 1 and best["mfu_gain"] > 0 and best["speedup"] > 1
    assert best["metrics"]["mfu"] == pytest.approx(out["yours"]["metrics"]["mfu"] + best["mfu_gain"], abs=1e-3)
    assert {c["key"] for c in best["changes"]} and all(c["old"] != c["new"] for c in best["changes"])
    text = plan("explain", "--from", str(script), "--cluster", "h100x512")
    assert text.returncode == 0 and "yours tp8 pp4 v4 dp16" in text.stdout and "best" in text.stdout
    assert "points" in text.stdout and "tp 8->" in text.stdout
    again = plan("explain", "--from", str(script), "--cluster", "h100x512", "--format", "json")
    assert again.stdout == r.stdout


@pytest.mark.parametrize("content,name,args,field", [
    ("--tensor-model-parallel-size 8\n", "a.sh", (), "--model"),
    ("--tensor-model-parallel-size 8 --num-layers 80\n", "a.sh", ("--model", "llama3-70b"), "--cluster"),
    ("--tensor-model-parallel-size eight\n", "a.sh", ("--model", "llama3-8b", "--cluster", "h100x64"),
     "--tensor-model-parallel-size"),
    ("--tensor-model-parallel-size 3\n", "a.sh", ("--model", "llama3-8b", "--cluster", "h100x64"), "world size"),
    ("--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --ffn-hidden-size 28672\n", "a.sh",
     ("--model", "llama3-8b", "--cluster", "h100x64"), "num_hidden_layers"),
    ("{not json", "ds.json", ("--model", "llama3-8b", "--cluster", "h100x64"), "invalid JSON"),
    ('{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 3}', "ds.json",
     ("--model", "llama3-8b", "--cluster", "h100x64"), "train_batch_size"),
    ("[parallelism\n", "t.toml", ("--model", "llama3-8b", "--cluster", "h100x64"), "invalid TOML"),
    ("hello world\n", "x.txt", ("--model", "llama3-8b", "--cluster", "h100x64"), "cannot tell"),
    ("", "e.sh", (), "empty"),
])
def test_impossible_files_are_one_line_exit_2(tmp_path, content, name, args, field):
    path = tmp_path / name
    path.write_text(content)
    r = plan("explain", "--from", str(path), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().count("\n") == 0 and field in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_layout_and_from_are_exclusive(tmp_path):
    r = plan("explain", "--model", "llama3-8b", "--cluster", "h100x64")
    assert r.returncode == 2 and "--layout" in r.stderr
    missing = plan("explain", "--from", str(tmp_path / "nope.sh"))
    assert missing.returncode == 2 and "file not found" in missing.stderr


@pytest.mark.parametrize("fmt,framework,offload", [("megatron", "megatron-core", 0.5), ("nemo", "nemo", 0.5),
                                                     ("deepspeed", "deepspeed", 1.0)])
def test_optimizer_offload_and_moments_read_back(fmt, framework, offload, tmp_path):
    """A plan made with --optimizer-offload / --optimizer-moments bf16 is priced with them again by
    `explain --from` on its own launch file (before, the file's flags were ignored and the plan re-priced with
    every optimizer state on the GPU in fp32)."""
    moments = "fp32" if fmt == "deepspeed" else "bf16"  # a ds_config has no switch for bf16 moments
    model, cluster = "llama3-8b", "h100x64"
    r = plan("-m", model, "-c", cluster, "--framework", framework, "--optimizer-offload", str(offload),
             "--optimizer-moments", moments, "--format", fmt)
    assert r.returncode == 0, r.stderr
    path = tmp_path / f"launch{SUFFIX[fmt]}"
    path.write_text(r.stdout)
    cfg = read_launch_file(str(path))
    assert cfg.ignored == [] and cfg.optimizer_offload == offload
    assert cfg.optimizer_moments == (None if moments == "fp32" else "bf16")
    args = ("-m", model, "-c", cluster) if fmt == "deepspeed" else ()
    out = plan("explain", "--from", str(path), *args, "--format", "json")
    training = json.loads(out.stdout)["inputs"]["training"]
    assert (training["optimizer_offload"], training["optimizer_moments"]) == (offload, moments), out.stderr
    # an option given on the command line wins over the file
    out = plan("explain", "--from", str(path), *args, "--optimizer-offload", "0", "--format", "json")
    assert json.loads(out.stdout)["inputs"]["training"]["optimizer_offload"] == 0.0


def test_explain_layout_takes_the_optimizer_options():
    base = ("explain", "-m", "llama3-70b", "-c", "h100x64", "-l", "tp=8,pp=1,zero=1", "--format", "json")
    fp32 = json.loads(plan(*base).stdout)
    bf16 = json.loads(plan(*base, "--optimizer-moments", "bf16").stdout)
    assert bf16["inputs"]["training"]["optimizer_moments"] == "bf16"
    assert bf16["breakdown"]["memory_gib"]["optimizer"] < fp32["breakdown"]["memory_gib"]["optimizer"]
    bad = plan(*base, "--optimizer-moments", "fp16")
    assert bad.returncode == 2 and "--optimizer-moments" in bad.stderr


def test_odd_moment_dtypes_are_named_not_silently_priced(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT.replace("--lr 3e-4", "--lr 3e-4 --use-precision-aware-optimizer --exp-avg-dtype fp16 "
                                     "--exp-avg-sq-dtype fp16 --optimizer-cpu-offload"))
    cfg = read_launch_file(str(script))
    assert cfg.optimizer_moments is None and cfg.optimizer_offload == 1.0  # Megatron-LM's fraction default
    assert any("fp16" in item and "fp32 moments" in item for item in cfg.ignored)


def test_sliding_windows_are_written_and_read_back(tmp_path):
    """gpt-oss alternates 128-token sliding-window and full attention: the megatron flags say so (--window-size
    127,0 as Megatron-Bridge maps HF sliding_window; --window-attn-skip-freq, 1 = windowed) and read back as the
    model's own layer_types; before, the flags described an all-full-attention model."""
    r = plan("-m", "gpt-oss-120b", "-c", "h100x64", "--framework", "megatron-core", "--format", "megatron")
    assert r.returncode == 0, r.stderr
    assert "--window-size 127,0\n" in r.stdout and "--window-attn-skip-freq '([1,0]*18)'\n" in r.stdout
    path = tmp_path / "goss.sh"
    path.write_text(r.stdout)
    cfg = read_launch_file(str(path))
    model = resolve_model(cfg, None)
    assert cfg.ignored == [] and cfg.model_keys["sliding_window"] == model.sliding_window == 128
    assert tuple(cfg.model_keys["layer_types"]) == model.mixer_kinds
    # a script without a plan header builds the model from its flags, windows included
    bare = tmp_path / "bare.sh"
    bare.write_text("\n".join(line for line in r.stdout.splitlines() if not line.startswith("#"))
                    + "\n--vocab-size 201088\n")
    built = resolve_model(read_launch_file(str(bare)), None)
    assert built.mixer_kinds == model.mixer_kinds and built.sliding_window == 128


@pytest.mark.parametrize("config,expected", [
    ("qwen3-next-80b-a3b", ("--experimental-attention-variant gated_delta_net",
                            "--linear-attention-freq '([1,1,1,0]*12)'", "--linear-num-value-heads 32",
                            "--attention-output-gate")),
    ("deepseek-v3.2", ("--experimental-attention-variant dsa", "--dsa-indexer-n-heads 64", "--dsa-indexer-topk 2048",
                       "--no-rope-fusion")),
])
def test_megatron_attention_variants_are_written_and_read_back(config, expected, tmp_path):
    """Qwen3-Next's Gated DeltaNet layers and DeepSeek-V3.2's sparse-attention indexer are Megatron-Core's
    experimental attention variants; the flags carry their shapes and per-layer pattern, and read back as the same
    layers (tests/test_launchers_real.py feeds them to TransformerConfig)."""
    src = str(ROOT / "tests/data/hf_configs" / f"{config}.json")
    r = plan("-m", src, "-c", "h100x1024", "--framework", "megatron-core", "--precision", "fp8", "--seq-len", "4096",
             "--global-batch", "1024", "--format", "megatron")
    assert r.returncode == 0, r.stderr
    for line in expected:
        assert line + "\n" in r.stdout, line
    path = tmp_path / "launch.sh"
    ref = load_model(src)
    path.write_text("\n".join(x for x in r.stdout.splitlines() if not x.startswith("#"))
                    + f"\n--vocab-size {ref.vocab_size}\n")
    cfg = read_launch_file(str(path))
    built = resolve_model(cfg, None)
    assert cfg.ignored == []
    assert built.mixer_kinds == ref.mixer_kinds and built.index_topk == ref.index_topk
    assert (built.linear_num_value_heads, built.attn_output_gate) == (ref.linear_num_value_heads, ref.attn_output_gate)
    # a model of the same shape without those layers is not taken for it (DeepSeek-V3 for V3.2)
    if config == "deepseek-v3.2":
        clash = plan("explain", "--from", str(path), "--model", "deepseek-v3", "--cluster", "h100x1024")
        assert clash.returncode == 2 and "index_topk" in clash.stderr


@pytest.mark.parametrize("config,kind", [("lfm2.5-vl-1.6b", "conv")])
def test_megatron_flags_refuse_layers_they_cannot_describe(config, kind):
    r = plan("-m", str(ROOT / "tests/data/hf_configs" / f"{config}.json"), "-c", "h100x64", "--framework",
             "megatron-core", "--format", "megatron")
    assert r.returncode == 2 and r.stdout == ""
    assert "inputs.model.layer_types" in r.stderr and kind in r.stderr and "--format nemo" in r.stderr


@pytest.mark.parametrize("config,cluster,pins", [("nemotron-h-56b", "h100x256", ["pp=4"]),
                                                 ("nemotron-3-nano-30b-a3b", "h100x64", [])])
def test_pretrain_mamba_commands_read_back(config, cluster, pins, tmp_path):
    """A hybrid's pretrain_mamba.py flags (--hybrid-override-pattern, --mamba-*) read back as the same layout and the
    same layers: with --model the file is checked against the config, without it the flags build the model."""
    src = str(ROOT / "tests/data/hf_configs" / f"{config}.json")
    ref = load_model(src)
    problem = build_problem(PlanOptions(model=src, cluster=cluster, framework="megatron-core", fix=tuple(pins)))
    result = search(problem, top=3)
    doc = document.build(result, {})
    for rank, chosen in enumerate(result.plans, 1):
        path = tmp_path / f"{config}-{rank}.sh"
        path.write_text(render(doc, "megatron", rank))
        cfg = read_launch_file(str(path))
        assert cfg.dialect == "megatron" and cfg.ignored == []
        model = resolve_model(cfg, src)
        back = complete_layout(problem, layout_for(cfg, model, problem.num_gpus)).as_dict()
        want = chosen.layout.as_dict()
        if want["tp"] == 1:
            want["sp"] = back["sp"] = 0
        assert {k: back[k] for k in KNOBS} == want, (rank, path.read_text())
    # no --model and no catalog entry: the flags (plus the vocabulary) build the model, layers and Mamba shapes alike
    bare = tmp_path / "bare.sh"
    bare.write_text("\n".join(x for x in path.read_text().splitlines() if not x.startswith("#"))
                    + f"\n--vocab-size {ref.vocab_size}\n")
    built = resolve_model(read_launch_file(str(bare)), None)
    assert (built.mixer_kinds, built.mlp_kinds) == (ref.mixer_kinds, ref.mlp_kinds)
    assert (built.mamba_num_heads, built.mamba_head_dim, built.ssm_state_size, built.n_groups) == (
        ref.mamba_num_heads, ref.mamba_head_dim, ref.ssm_state_size, ref.n_groups)
    assert (built.num_local_experts, built.shared_ffn) == (ref.num_local_experts, ref.shared_ffn)


def test_pretrain_mamba_pattern_is_checked(tmp_path):
    """Another model's pattern, a pattern of the wrong length or with an unknown symbol: one-line errors, exit 2."""
    nano = str(ROOT / "tests/data/hf_configs/nemotron-3-nano-30b-a3b.json")
    r = plan("-m", str(ROOT / "tests/data/hf_configs/nemotron-h-56b.json"), "-c", "h100x64", "--format", "megatron")
    assert r.returncode == 0, r.stderr
    path = tmp_path / "nh.sh"
    path.write_text(r.stdout)
    clash = plan("explain", "--from", str(path), "--model", nano)
    assert clash.returncode == 2 and "Traceback" not in clash.stderr and "num_hidden_layers" in clash.stderr
    pattern = json.loads((ROOT / "tests/data/hf_configs/nemotron-h-56b.json").read_text())["hybrid_override_pattern"]
    for bad, needle in ((pattern[:-1], "--hybrid-override-pattern"), (pattern[:-1] + "G", "symbols other than")):
        path.write_text(r.stdout.replace(pattern, bad))
        out = plan("explain", "--from", str(path), "--model", str(ROOT / "tests/data/hf_configs/nemotron-h-56b.json"))
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_chunked_attention_launches_while_one_chunk_holds_the_sequence():
    args = ("-m", "llama4-maverick", "-c", "h100x128", "--framework", "megatron-core", "--format", "megatron")
    assert plan(*args, "--seq-len", "8192").returncode == 0  # Llama 4's 8,192-token chunks: plain causal attention
    longer = plan(*args, "--seq-len", "16384", "--global-batch", "256")
    assert longer.returncode == 2 and "attention_chunk_size" in longer.stderr


@pytest.mark.parametrize("fmt,framework,needle", [("megatron", "megatron-core", "--mtp-num-layers 1\n"),
                                                   ("nemo", "nemo", "model.mtp_num_layers=1\n")])
def test_multi_token_prediction_is_launched_as_priced(fmt, framework, needle, tmp_path):
    """DeepSeek-V3 is priced with its MTP block on the last stage; the launch says so and reads back (before, the
    flags built a model without it, lighter on the last stage than the split the plan was costed with)."""
    r = plan("-m", "deepseek-v3", "-c", "h100x1024", "--precision", "fp8", "--seq-len", "4096", "--global-batch",
             "8192", "--framework", framework, "--format", fmt)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout
    path = tmp_path / f"dsv3{SUFFIX[fmt]}"
    path.write_text(r.stdout)
    cfg = read_launch_file(str(path))
    assert cfg.ignored == []
    assert resolve_model(cfg, None).num_nextn_predict_layers == 1


def test_gpt_oss_launches_as_gpt_oss(tmp_path):
    """gpt-oss is not a Llama: its experts compute (up + 1) x quick-GELU(gate) on clamped inputs and carry biases,
    its attention has biases and a learnable sink per head (HF modeling_gpt_oss). The Megatron flags are the ones
    Megatron-Bridge's gpt-oss provider sets (quick-geglu, clamp 7, offset 1, learnable softmax, biases kept), and
    they read back as the same model; before, they built a bias-free SwiGLU model without sinks."""
    r = plan("-m", "gpt-oss-120b", "-c", "h100x64", "--framework", "megatron-core", "--format", "megatron")
    assert r.returncode == 0, r.stderr
    for line in ("--quick-geglu", "--activation-func-clamp-value 7", "--glu-linear-offset 1.0",
                 "--softmax-type learnable"):
        assert line + "\n" in r.stdout
    assert "--swiglu\n" not in r.stdout and "--disable-bias-linear" not in r.stdout
    path = tmp_path / "goss.sh"
    path.write_text(r.stdout)
    keys = read_launch_file(str(path)).model_keys
    model = resolve_model(read_launch_file(str(path)), None)
    assert (keys["hidden_act"], keys["attention_bias"], keys["mlp_bias"], keys["attention_sinks"],
            keys["swiglu_limit"]) == (model.hidden_act, model.attention_bias, model.mlp_bias, model.attention_sinks,
                                      model.swiglu_limit) == ("swigluoai", True, True, True, 7.0)
    # a Llama keeps its bias-free SwiGLU
    llama = plan("-m", "llama3-8b", "-c", "h100x8", "--framework", "megatron-core", "--format", "megatron")
    assert "--swiglu\n" in llama.stdout and "--disable-bias-linear\n" in llama.stdout
    # nor has Nemotron-4 ("no bias terms", its report §2.1); GPT-3 keeps Megatron's biases
    nemotron = plan("-m", "nemotron4-340b", "-c", "h100x1024", "--seq-len", "4096", "--framework", "megatron-core",
                    "--format", "megatron")
    assert "--squared-relu\n" in nemotron.stdout and "--disable-bias-linear\n" in nemotron.stdout
    gpt3 = plan("-m", "gpt3-175b", "-c", "h100x1024", "--seq-len", "2048", "--framework", "megatron-core",
                "--format", "megatron")
    assert gpt3.returncode == 0 and "--disable-bias-linear" not in gpt3.stdout


def _deep_json(n: int) -> str:
    return '{"zero_optimization": ' + '{"a": ' * n + "1" + "}" * n + "}"


@pytest.mark.parametrize("name,content,args,needle", [
    ("deep.json", _deep_json(100_000), ("--model", "llama3-8b", "--cluster", "h100x8"), "nested too deeply"),
    ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000 + "\n", ("--model", "llama3-8b", "--cluster", "h100x8"),
     "nested too deeply"),
    ("deep.yaml", "model: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
     ("--model", "llama3-8b", "--cluster", "h100x8"), "nested too deeply"),
    ("keys.yaml", "model:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(400)) + "  " * 401 + "x: 1\n",
     ("--model", "llama3-8b", "--cluster", "h100x8"), "none of the keys"),
    ("junk.sh", "\x00\x01\xff\xfe binary", (), "UTF-8"),
    ("big.json", " " * (5 * 1024 * 1024), (), "larger than"),
    ("neg.sh", "pretrain_gpt.py --tensor-model-parallel-size -2 --num-layers 2\n", ("--model", "llama3-8b"),
     "--tensor-model-parallel-size"),
    ("neg-layers.sh", "pretrain_gpt.py --num-layers -32 --hidden-size 4096 --num-attention-heads 32\n", (),
     "--num-layers"),
    ("zero-experts.sh", "pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-experts 0 "
     "--moe-router-topk 2 --vocab-size 100\n", ("--cluster", "h100x8"), "--num-experts"),
    ("layout.sh", "pretrain_gpt.py --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "
     "'(t|)*99999999999' --num-layers 2\n", ("--model", "llama3-8b"), "--pipeline-model-parallel-layout"),
    ("freq.sh", "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-experts 2 "
     "--moe-layer-freq '__import__(\"os\")' --vocab-size 100\n", ("--cluster", "h100x8"), "--moe-layer-freq"),
    ("stage.json", '{"zero_optimization": {"stage": 7}, "train_micro_batch_size_per_gpu": 1}',
     ("--model", "llama3-8b", "--cluster", "h100x8"), "zero_optimization.stage"),
    ("degree.toml", "[parallelism]\ntensor_parallel_degree = -1\n", ("--model", "llama3-8b", "--cluster", "h100x8"),
     "parallelism.tp"),
    ("nemo.yaml", "model: [1, 2]\n", ("--model", "llama3-8b", "--cluster", "h100x8"), "section of fields"),
    ("md.md", "# a guide\n\nno code here\n", (), "fenced shell block"),
])
def test_hostile_launch_files_are_one_line_exit_2(tmp_path, name, content, args, needle):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8", "surrogateescape") if "\x00" not in content else
                     b"\x00\x01\xff\xfe binary")
    r = plan("explain", "--from", str(path), *args)
    assert r.returncode == 2, (r.returncode, r.stderr[-400:])
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("warning:")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr[-400:]
    assert r.stdout == ""


DENSE_MIXTRAL_SHAPE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                       "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
                       "--swiglu --untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
                       "--global-batch-size 64 --seq-length 4096 --bf16 {extra}\n")


def test_a_dense_script_is_never_taken_for_a_moe_model(tmp_path):
    """Mixtral's attention and MLP widths without --num-experts are a dense model: not mixtral-8x7b. With its
    vocabulary stated, no catalog model has that exact shape and the model is built from the flags (said so);
    without it, the one catalog model of that shape (Llama 3 8B) gives the vocabulary, and that is said too."""
    path = tmp_path / "dense.sh"
    path.write_text(DENSE_MIXTRAL_SHAPE.format(extra="--vocab-size 32000"))
    cfg = read_launch_file(str(path))
    built = resolve_model(cfg, None)
    assert not built.is_moe and built.vocab_size == 32000 and built.name == "dense"
    assert any("built from the file" in d for d in cfg.defaults)
    path.write_text(DENSE_MIXTRAL_SHAPE.format(extra=""))
    cfg = read_launch_file(str(path))
    assert resolve_model(cfg, None).name == "llama3-8b"
    assert any("vocabulary 128256 from the catalog's llama3-8b" in d for d in cfg.defaults)
    with pytest.raises(PlanInputError) as raised:
        resolve_model(cfg, "mixtral-8x7b")
    assert raised.value.field == "num_local_experts"
    moe = tmp_path / "moe.sh"
    moe.write_text(DENSE_MIXTRAL_SHAPE.format(extra="--num-experts 8 --moe-router-topk 2"))
    assert resolve_model(read_launch_file(str(moe)), None).name == "mixtral-8x7b"


def test_mtp_is_priced_only_where_the_file_runs_it(tmp_path):
    """DeepSeek-V3's catalog entry trains one MTP layer; a Megatron script without --mtp-num-layers and torchtitan's
    DeepSeek-V3 (no MTP module) are priced without it, and say so."""
    guide = ROOT / "tests/data/launch_files/megatron/deepseek-v3-gb200-reproduce-guide.md"
    cfg = read_launch_file(str(guide))
    assert cfg.mtp_layers == 0 and resolve_model(cfg, None).num_nextn_predict_layers == 0
    assert resolve_model(read_launch_file(str(guide)), "deepseek-v3").num_nextn_predict_layers == 0
    sbatch = ROOT / "tests/data/launch_files/megatron/sbatch_mfsdp_deepseek_v3.sh"
    assert resolve_model(read_launch_file(str(sbatch)), None).num_nextn_predict_layers == 1
    toml = ROOT / "tests/data/launch_files/torchtitan/models/deepseek_v3_671b.toml"
    cfg = read_launch_file(str(toml))
    assert resolve_model(cfg, None).num_nextn_predict_layers == 0 and "MTP" in " ".join(cfg.defaults)


@pytest.mark.parametrize("name,content,cluster,want", [
    # DeepSpeed fills the missing batch key from the other two and the data-parallel world (runtime/config.py)
    ("a.json", '{"train_batch_size": 256}', "h100x8", (256, 32, 1)),
    ("b.json", '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}', "h100x16", (128, 4, 2)),
    ("c.json", '{"train_batch_size": 512, "gradient_accumulation_steps": 4}', "h100x16", (512, 8, 4)),
    ("d.json", '{"train_batch_size": 300, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}',
     "h100x64", "train_batch_size"),
    # torchtitan: the global batch defaults to local x dp and must be a multiple of it (accumulation)
    ("e.toml", "[training]\nlocal_batch_size = 2\nglobal_batch_size = 64\n", "h100x8", (64, 2, None)),
    ("f.toml", "[training]\nlocal_batch_size = 2\nglobal_batch_size = 20\n", "h100x8", "training.global_batch_size"),
    ("g.toml", "[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n", "h100x8",
     (32, 8, None)),
])
def test_batches_complete_as_each_framework_completes_them(tmp_path, name, content, cluster, want):
    path = tmp_path / name
    path.write_text(content)
    cfg = read_launch_file(str(path))
    model = resolve_model(cfg, "llama3-8b")
    gpus = resolve_cluster(cfg, cluster).num_gpus
    if isinstance(want, str):
        with pytest.raises(PlanInputError) as raised:
            layout_for(cfg, model, gpus)
        assert raised.value.field == want
        return
    lay = layout_for(cfg, model, gpus)
    assert (cfg.global_batch, lay["mbs"], cfg.grad_accum) == want
    assert cfg.defaults  # the completed value is said


def test_a_megatron_deepspeed_script_whose_ds_config_is_not_an_object_is_one_error(tmp_path):
    """The ds_config a Megatron-DeepSpeed script writes goes through the DeepSpeed reader's own loader: a JSON list is
    a one-line error naming the flag, not an internal error."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\ncat > ds.json <<EOT\n[1, 2]\nEOT\n"
                      "deepspeed pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                      "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 "
                      "--deepspeed --deepspeed_config ds.json\n")
    with pytest.raises(PlanInputError, match="expected a JSON object"):
        read_launch_file(str(script))


MOE_SCRIPT = """torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
    --tensor-model-parallel-size 1 --expert-model-parallel-size 16 --num-layers 48 --hidden-size 2048 \\
    --ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention --num-query-groups 4 --kv-channels 128 \\
    --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --swiglu --untie-embeddings-and-output-weights \\
    --disable-bias-linear --micro-batch-size 1 --global-batch-size 1024 --seq-length 4096 --vocab-size 151936 \\
    --moe-grouped-gemm --use-distributed-optimizer --bf16 {graphs}
"""


@pytest.mark.parametrize("graphs, priced, modules", [
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope moe_router moe_preprocess", "per-layer",
     ["moe_router", "moe_preprocess"]),
    ("--cuda-graph-impl local --cuda-graph-modules attn moe_router moe_preprocess", "per-layer",
     ["attn", "moe_router", "moe_preprocess"]),
    ("--external-cuda-graph", "per-layer", None),  # deprecated: transformer_engine, the whole layer where it can
    ("--cuda-graph-impl full_iteration", "full-iteration", None),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", "full-iteration", None),  # the deprecated module
    ("--cuda-graph-modules attn", "none", None),  # modules without an implementation capture nothing
    ("", "none", None),
])
def test_megatron_cuda_graph_flags_are_priced(tmp_path, graphs, priced, modules):
    """Megatron-LM's --cuda-graph-impl / --cuda-graph-modules (and their deprecated spellings) reach the plan's
    training, so `explain --from` prices the host time the file's graphs remove."""
    script = tmp_path / "moe.sh"
    script.write_text(MOE_SCRIPT.format(graphs=graphs))
    r = plan("explain", "--from", str(script), "--cluster", "h100x16", "--model", "qwen3-30b-a3b", "--format", "json")
    assert r.returncode == 0, r.stderr
    training = json.loads(r.stdout)["inputs"]["training"]
    assert training["cuda_graphs"] == priced
    assert training["cuda_graph_modules"] == modules
    assert "--cuda-graph" not in r.stderr and "external-cuda-graph" not in r.stderr  # read, not ignored


def test_an_unknown_cuda_graph_implementation_is_one_line_exit_2(tmp_path):
    script = tmp_path / "moe.sh"
    script.write_text(MOE_SCRIPT.format(graphs="--cuda-graph-impl cudnn"))
    r = plan("explain", "--from", str(script), "--cluster", "h100x16", "--model", "qwen3-30b-a3b")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--cuda-graph-impl" in r.stderr


@pytest.mark.parametrize("name, text, priced, modules", [
    ("bridge.txt", "model.tensor_model_parallel_size=1 model.expert_model_parallel_size=16 "
     "model.cuda_graph_impl=transformer_engine model.cuda_graph_scope=[moe_router,moe_preprocess]\n",
     "per-layer", ["moe_router", "moe_preprocess"]),
    ("bridge.txt", "model.expert_model_parallel_size=16 model.cuda_graph_impl=none\n", "none", None),
    ("nemo1.yaml", "trainer: {num_nodes: 2, devices: 8, precision: bf16-mixed}\n"
     "model: {micro_batch_size: 1, global_batch_size: 1024, encoder_seq_length: 4096, expert_model_parallel_size: 16,"
     " enable_cuda_graph: true}\n", "per-layer", None),
])
def test_nemo_cuda_graph_keys_are_read(tmp_path, name, text, priced, modules):
    path = tmp_path / name
    path.write_text(text)
    cfg = read_launch_file(str(path))
    assert cfg.cuda_graphs == priced
    assert (list(cfg.cuda_graph_modules) if cfg.cuda_graph_modules else None) == modules
    assert not any("cuda_graph" in i for i in cfg.ignored)


@pytest.mark.parametrize("fmt, framework", [("megatron", "megatron-core"), ("nemo", "nemo")])
@pytest.mark.parametrize("graphs", [("--cuda-graphs", "per-layer", "--cuda-graph-modules", "moe_router,moe_preprocess"),
                                    ("--cuda-graphs", "per-layer"), ("--cuda-graphs", "full-iteration"), ()])
def test_launch_files_carry_the_cuda_graphs_they_were_priced_with(tmp_path, fmt, framework, graphs):
    """What the plan priced (the host time graphs remove) is what the file launches: the launchers write
    --cuda-graph-impl / --cuda-graph-modules (Bridge: model.cuda_graph_impl / model.cuda_graph_scope) and the
    readers take them back."""
    problem = ("--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--seq-len", "4096", "--global-batch", "1024",
               "--framework", framework)
    made = plan(*problem, *graphs, "--format", fmt)
    assert made.returncode == 0, made.stderr
    path = tmp_path / ("run.sh" if fmt == "megatron" else "run.txt")
    path.write_text(made.stdout)
    back = plan("explain", "--from", str(path), "--cluster", "h100x16", "--model", "qwen3-30b-a3b", "--format", "json")
    assert back.returncode in (0, 1), back.stderr
    training = json.loads(back.stdout)["inputs"]["training"]
    said = dict(zip(graphs[::2], graphs[1::2], strict=True))
    assert training["cuda_graphs"] == said.get("--cuda-graphs", "none")
    modules = said.get("--cuda-graph-modules")
    if modules:
        assert training["cuda_graph_modules"] == modules.split(",")
    elif said.get("--cuda-graphs") == "per-layer":  # the default scope, written as the modules it prices
        assert training["cuda_graph_modules"] == ["attn", "moe_router", "moe_preprocess"]


def test_a_yaml_of_megatron_flags_reads_as_the_command_line_its_launcher_builds():
    """Megatron-MoE-ModelZoo's model_configs: `true` is a bare switch, `false` is left out, a value of several words
    is several arguments (sbatch_benchmarking.sh's yq), and variables stay for --set."""
    from planner.inputs.launch_readers import megatron_flags_yaml

    text = ("ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --tensor-model-parallel-size: ${TP}\n"
            "  --use-distributed-optimizer: true\n  --moe-router-pre-softmax: false\n"
            "  --recompute-modules: moe_act layernorm\n")
    line = " ".join(megatron_flags_yaml(text).replace("\\\n", " ").split())
    assert line == ("pretrain_gpt.py --tensor-model-parallel-size ${TP} --use-distributed-optimizer "
                    "--recompute-modules moe_act layernorm")
    assert megatron_flags_yaml("trainer: {devices: 8}\nmodel: {micro_batch_size: 1}\n") is None  # NeMo's YAML


def test_a_script_without_an_entry_point_is_refused_for_that_not_for_its_quotes(tmp_path):
    """A wrapper that builds its flags elsewhere (a multi-line quoted yq expression, then a sourced file) runs no
    pretrain_gpt.py plan can read: the error says so, not that a quote is open (bash allows newlines in quotes)."""
    script = tmp_path / "sbatch.sh"
    script.write_text("#!/bin/bash\nPARAMS=$(yq '... comments=\"\" | .MODEL_ARGS | to_entries | .[] |\n"
                      "    [.key + \" \" + .value] | join(\"\")' ${PATH_TO_YAML})\nsource ./runtime.conf\n")
    r = plan("explain", "--from", str(script), "--cluster", "h100x8")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot tell which launcher" in r.stderr and "pretrain_gpt.py" in r.stderr and "quote" not in r.stderr


RUN_RECIPE_SCRIPT = """#!/bin/bash
IMAGE=${IMAGE:-}
if [ -z "$IMAGE" ]; then
    echo "set IMAGE"
    exit 1
fi
for CONFIG in "2,4" "4,2"; do
    IFS=',' read -r TP PP <<< "$CONFIG"
    OVERRIDES=" \\
        model.tensor_model_parallel_size=$TP \\
        model.pipeline_model_parallel_size=$PP \\
        train.global_batch_size=128 train.micro_batch_size=1 \\
        checkpoint.save=/results/tp${TP}_pp${PP} \\
    "
    CMD="python /opt/Megatron-Bridge/scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config $OVERRIDES"
    srun --container-image=$IMAGE bash -c "$CMD"
done
"""


def test_a_bridge_script_is_read_as_bash_runs_its_run_recipe_command(tmp_path):
    """Megatron-Bridge's examples build run_recipe.py's overrides in multi-line strings inside a loop and run them
    through `srun ... bash -c` (examples/models/*/slurm_pretrain.sh, in the launch-file corpus): the reader follows
    the script as bash would, says where it exits before launching, names the variable an override leaves unset,
    and names the recipe whose own settings are not in the file."""
    path = tmp_path / "pretrain.sh"
    path.write_text(RUN_RECIPE_SCRIPT)
    with pytest.raises(PlanInputError, match="exits at line 5"):
        read_launch_file(str(path))
    with pytest.raises(PlanInputError) as unset:
        read_launch_file(str(path), given={"IMAGE": "x.sqsh"})
    assert unset.value.field == "model.tensor_model_parallel_size" and "--set TP=" in unset.value.fix
    cfg = read_launch_file(str(path), given={"IMAGE": "x.sqsh", "TP": "2", "PP": "4"})
    assert cfg.dialect == "nemo" and cfg.layout["tp"] == 2 and cfg.layout["pp"] == 4 and cfg.global_batch == 128
    assert any("llama3_8b_pretrain_config" in d for d in cfg.doubts)
    assert not any("checkpoint.save" in i for i in cfg.ignored)  # a quiet section, whatever its variables


def test_zero_over_one_data_rank_is_run_anyway_and_a_bad_stage_split_is_not():
    """Megatron-LM's gpt-oss example (the launch-file corpus) passes --use-distributed-optimizer with PP equal to the
    world size: a ZeRO stage over one data-parallel rank, which shards nothing and runs (the search's canonical rule
    is said met, not broken), and 12 layers on 8 stages, which Megatron refuses (still broken)."""
    path = Path(__file__).resolve().parent / "data" / "launch_files" / "megatron" / "gptoss" / "02_train.sh"
    out = run_plan_in_process("explain", "--from", str(path), "--cluster", "h100x8", "--format", "json")
    assert out.returncode == 1, out.stderr  # the file's layout breaks a rule (README, exit codes)
    yours = json.loads(out.stdout)["yours"]
    assert [r["rule"] for r in yours["broken_rules"]] == ["stage_split_launchable"] and not yours["feasible"]
    assert [m["rule"] for m in yours["met_by_file"]] == ["sharding_needs_replicas"]
    text = run_plan_in_process("explain", "--from", str(path), "--cluster", "h100x8").stdout
    assert "sharding_needs_replicas: met by the file's ZeRO stage over one data-parallel rank" in " ".join(text.split())


@pytest.mark.parametrize(("tokenizer", "refused"), [("mistralai/Mistral-7B-v0.1", True),
                                                    ("meta-llama/Meta-Llama-3-8B", False)])
def test_a_shape_match_borrows_no_vocabulary_from_another_models_tokenizer(tmp_path, tokenizer, refused):
    """Mistral 7B's trunk is Llama 3 8B's shape: a launch that names the Mistral tokenizer and no vocabulary size is
    refused (field vocab_size) rather than priced with Llama 3's vocabulary; naming Llama 3's own tokenizer borrows
    the catalog's, and says so (the NeMo-Framework-Launcher Mistral 7B config in the corpus is the real file)."""
    script = tmp_path / "train.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 1 --num-layers 32 --hidden-size 4096 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu "
        "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
        f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {tokenizer}\n")
    cfg = read_launch_file(str(script))
    if refused:
        with pytest.raises(PlanInputError) as raised:
            resolve_model(cfg, None)
        assert raised.value.field == "vocab_size" and tokenizer in raised.value.message
    else:
        assert resolve_model(cfg, None).name == "llama3-8b"
        assert any("vocabulary 128256 from the catalog's llama3-8b" in d for d in cfg.defaults)


def test_llm_foundry_yaml_reads_as_composer_runs_it(tmp_path):
    """llm-foundry's MPT-7B YAML (the corpus's, byte for byte) with --set: a variable reference resolves everywhere
    it is used, SHARD_GRAD_OP is ZeRO-2, and `auto` micro-batches (settled at run time) are refused naming the key."""
    path = Path(__file__).resolve().parent / "data" / "launch_files" / "llm-foundry" / "mpt-7b.yaml"
    cfg = read_launch_file(str(path), given={"variables.max_seq_len": "4096",
                                             "fsdp_config.sharding_strategy": "SHARD_GRAD_OP"})
    assert (cfg.dialect, cfg.framework, cfg.seq_len, cfg.layout["zero"]) == ("llm-foundry", "llm-foundry", 4096, 2)
    assert cfg.model_keys["max_position_embeddings"] == 4096
    with pytest.raises(PlanInputError) as raised:
        read_launch_file(str(path), given={"device_train_microbatch_size": "auto"})
    assert raised.value.field == "device_train_microbatch_size"
    out = run_plan_in_process("explain", "--from", str(path), "--cluster", "h100x64", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["inputs"]["training"]["framework"] == "llm-foundry"
