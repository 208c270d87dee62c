"""Bad input, tried as a careless or hostile user would: every case is ONE line on stderr naming the file (or flag),
the field and the fix, exit code 2, and never a traceback. Files are read with safe loaders only.

Also the scale cases (100,000 GPUs, 1,000 layers, 1M tokens, 1,024 experts) as functional tests, and the time limit.
Timings for those live in the report, not here: the suite must not be flaky on a slow machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.catalog import load_cluster, load_model, model_from_mapping
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec
from planner.search.search import search

ROOT = Path(__file__).resolve().parents[1]
GOOD_MODEL = ("hidden_size: 1024\nnum_hidden_layers: 8\nnum_attention_heads: 16\nintermediate_size: 4096\n"
              "vocab_size: 32000\n")


def plan_subprocess(*args: str) -> subprocess.CompletedProcess:
    """The real entry point in a fresh interpreter (what a user runs)."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def plan(*args: str) -> subprocess.CompletedProcess:
    return run_plan_in_process(*args)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stderr, r.stdout[:500])
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    assert "(fix: " in line, line
    for needle in needles:
        assert needle in line, (needle, line)
    assert r.stdout == ""
    return line


# --- model files -------------------------------------------------------------------------------------------------
MODEL_FILES = {
    # name: (file bytes, words the single error line must contain)
    "empty.yaml": (b"", ["empty"]),
    "blank.yaml": (b"  \n\n  \t\n", ["empty"]),
    "empty-mapping.json": (b"{}", ["hidden_size", "Field required", "add 'hidden_size"]),
    "malformed.yaml": (b"hidden_size: [1, 2\n", ["invalid YAML", "line 2"]),
    "malformed.json": (b'{"hidden_size": 4096,', ["invalid JSON", "line 1"]),
    "tabs.yaml": (b"hidden_size:\t\t4096\n\tx: 1\n", ["invalid YAML"]),
    "list.yaml": (b"- 1\n- 2\n", ["expected a mapping", "list"]),
    "scalar.yaml": (b"just words\n", ["expected a mapping", "str"]),
    "wrong-type.yaml": (GOOD_MODEL.replace("1024\n", "'big'\n", 1).encode(), ["hidden_size", "whole number"]),
    "negative.yaml": (GOOD_MODEL.replace("hidden_size: 1024", "hidden_size: -1024").encode(),
                      ["hidden_size", "greater than 0", "above 0"]),
    "zero-layers.yaml": (GOOD_MODEL.replace("num_hidden_layers: 8", "num_hidden_layers: 0").encode(),
                         ["num_hidden_layers", "above 0"]),
    "fractional.yaml": (GOOD_MODEL.replace("num_hidden_layers: 8", "num_hidden_layers: 8.5").encode(),
                        ["num_hidden_layers", "whole number"]),
    "vocab-1.yaml": (GOOD_MODEL.replace("vocab_size: 32000", "vocab_size: 1").encode(), ["vocab_size", "above 1"]),
    "heads.yaml": (GOOD_MODEL.replace("num_attention_heads: 16", "num_attention_heads: 15").encode(),
                   ["divisible by num_attention_heads", "head_dim"]),
    "kv-heads.yaml": ((GOOD_MODEL + "num_key_value_heads: 5\n").encode(), ["num_key_value_heads"]),
    "absurd-layers.yaml": (GOOD_MODEL.replace("num_hidden_layers: 8", "num_hidden_layers: " + "9" * 30).encode(),
                           ["num_hidden_layers", "at most 10,000,000"]),
    "absurd-experts.yaml": ((GOOD_MODEL + "num_local_experts: 1000000000000000000000\nnum_experts_per_tok: 2\n")
                            .encode(), ["num_local_experts", "at most"]),
    "absurd-vocab.yaml": (GOOD_MODEL.replace("vocab_size: 32000", "vocab_size: 1" + "0" * 400).encode(),
                          ["vocab_size", "at most"]),
    "huge-int.yaml": (GOOD_MODEL.replace("hidden_size: 1024", "hidden_size: " + "9" * 5000).encode(),
                      ["unreadable value", "digits"]),
    "bad-date.yaml": (GOOD_MODEL.replace("hidden_size: 1024", "hidden_size: 2024-13-45").encode(),
                      ["unreadable value"]),
    "nan.yaml": (GOOD_MODEL.replace("hidden_size: 1024", "hidden_size: .nan").encode(), ["hidden_size", "finite"]),
    "inf.json": (json.dumps({"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
                             "intermediate_size": 4096, "vocab_size": 32000, "published_params": 1e999}).encode(),
                 ["published_params", "finite"]),
    "bool.yaml": (GOOD_MODEL.replace("hidden_size: 1024", "hidden_size: yes").encode(),
                  ["hidden_size", "not true/false"]),
    "activation.yaml": ((GOOD_MODEL + "hidden_act: banana\n").encode(), ["hidden_act", "banana"]),
    "moe-no-topk.yaml": ((GOOD_MODEL + "num_local_experts: 8\n").encode(), ["num_experts_per_tok"]),
    "mla-no-dims.yaml": ((GOOD_MODEL + "kv_lora_rank: 512\n").encode(), ["kv_lora_rank", "v_head_dim"]),
    "int-key.yaml": ((GOOD_MODEL + "1: 2\n").encode(), ["key 1 is not text"]),
    "null-key.yaml": ((GOOD_MODEL + "null: 2\n").encode(), ["key None is not text"]),
    "typo-required.yaml": (GOOD_MODEL.replace("num_hidden_layers", "num_hiden_layers").encode(),
                           ["num_hidden_layers", "rename 'num_hiden_layers' to 'num_hidden_layers'"]),
    "gpt2.json": (b'{"n_layer": 12, "n_embd": 768}', ["n_layer"]),
    "python-tag.yaml": (b'!!python/object/apply:os.system ["touch PWNED_BY_PLAN"]\n', ["refused YAML tag", "tag"]),
    "python-tag-value.yaml": (b'hidden_size: !!python/object/apply:os.system ["touch PWNED_BY_PLAN"]\n',
                              ["refused YAML tag"]),
    "python-name.yaml": (b"hidden_size: !!python/name:os.system\n", ["refused YAML tag"]),
    "deep.yaml": (b"[" * 50_000 + b"]" * 50_000, ["nested too deeply"]),
    "deep.json": (b"[" * 50_000 + b"]" * 50_000, ["nested too deeply"]),
    "non-utf8.yaml": (b"\xff\xfe\x00hidden_size: 1\n", ["not UTF-8"]),
    "latin1.yaml": ("name: caf\u00e9\n".encode("latin-1") + GOOD_MODEL.encode(), ["not UTF-8"]),
    "newline-value.yaml": ((GOOD_MODEL + 'vocab_size: "a\\nb"\n').encode(), ["vocab_size", "'a\\nb'"]),
}


@pytest.mark.parametrize("name", sorted(MODEL_FILES))
def test_bad_model_file_in_process(tmp_path, name):
    data, needles = MODEL_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(PlanInputError) as info:
        load_model(str(path))
    line = info.value.one_line()
    assert "\n" not in line
    assert str(path) in line or "..." in line
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "PWNED_BY_PLAN").exists() and not (ROOT / "PWNED_BY_PLAN").exists()


@pytest.mark.parametrize("name", ["empty.yaml", "malformed.json", "negative.yaml", "python-tag.yaml", "deep.json",
                                  "non-utf8.yaml", "huge-int.yaml", "bool.yaml", "int-key.yaml",
                                  "typo-required.yaml"])
def test_bad_model_file_cli(tmp_path, name):
    data, needles = MODEL_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    r = plan("--model", str(path), "--cluster", "h100x8")
    assert_one_line_error(r, str(path), *needles)
    assert not (tmp_path / "PWNED_BY_PLAN").exists()


@pytest.mark.parametrize("name", ["python-tag.yaml", "deep.json"])
def test_bad_model_file_real_process(tmp_path, name):
    data, needles = MODEL_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    assert_one_line_error(plan_subprocess("--model", str(path), "--cluster", "h100x8"), str(path), *needles)
    assert not (tmp_path / "PWNED_BY_PLAN").exists() and not (ROOT / "PWNED_BY_PLAN").exists()


def test_yaml_tags_never_execute(tmp_path):
    marker = tmp_path / "executed"
    for i, tag in enumerate(("!!python/object/apply:os.system", "!!python/object/new:os.system",
                             "!!python/object/apply:subprocess.call")):
        path = tmp_path / f"m{i}.yaml"
        path.write_text(f"hidden_size: {tag} [\"touch {marker}\"]\n")
        with pytest.raises(PlanInputError, match="refused YAML tag"):
            load_model(str(path))
    assert not marker.exists()


def test_unknown_keys_warn_once_with_did_you_mean(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_MODEL + "num_hidden_layer: 8\nfrobnicate: 1\n")
    r = plan("--model", str(path), "--cluster", "h100x8", "--top", "1", "-f", "json")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("warning: ") and str(path) in lines[0]
    assert "did you mean 'num_hidden_layers'" in lines[0] and "'frobnicate'" in lines[0]


def test_hostile_key_count_is_one_bounded_line(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_MODEL + "".join(f"junk{i}: {i}\n" for i in range(20_000)))
    r = plan("--model", str(path), "--cluster", "h100x8", "--top", "1", "-f", "json")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 500 and "more" in lines[0]


def test_huge_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"# padding\n" * 600_000)
    r = plan("--model", str(path), "--cluster", "h100x8")
    assert_one_line_error(r, str(path), "larger than the limit")


def test_endless_device_is_refused():
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(PlanInputError, match="larger than the limit"):
        load_model("/dev/zero")


def test_directory_instead_of_file(tmp_path):
    d = tmp_path / "model.yaml"
    d.mkdir()
    r = plan("--model", str(d), "--cluster", "h100x8")
    assert_one_line_error(r, str(d), "directory")
    r = plan("--model", "llama8b", "--cluster", str(d))
    assert_one_line_error(r, str(d), "directory")


def test_missing_file(tmp_path):
    r = plan("--model", str(tmp_path / "nope.json"), "--cluster", "h100x8")
    assert_one_line_error(r, "nope.json", "file not found")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_MODEL)
    path.chmod(0)
    try:
        r = plan("--model", str(path), "--cluster", "h100x8")
        assert_one_line_error(r, str(path), "permission denied")
    finally:
        path.chmod(0o644)


def test_unreadable_file_even_as_root(tmp_path, monkeypatch):
    """The permission-denied path, simulated so that it also runs where chmod does not block reads (root)."""
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_MODEL)

    real_open = Path.open

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(PlanInputError) as info:
        load_model(str(path))
    line = info.value.one_line()
    assert str(path) in line and "permission denied" in line and "(fix: " in line


def test_overlong_path_and_control_characters():
    r = plan("--model", "a/" * 3000 + "config.json", "--cluster", "h100x8")
    line = assert_one_line_error(r, "config.json")
    assert len(line) < 400
    r = plan("--model", "llama\nhack", "--cluster", "h100x8")
    assert_one_line_error(r, "--model", "llama\\nhack")


def test_empty_references():
    assert_one_line_error(plan("--model", "", "--cluster", "h100x8"), "--model", "empty")
    assert_one_line_error(plan("--model", "llama8b", "--cluster", "  "), "--cluster", "empty")


# --- cluster files -----------------------------------------------------------------------------------------------
CLUSTER_FILES = {
    "no-gpu.yaml": ("nodes: 8\n", ["gpu", "missing"]),
    "no-nodes.yaml": ("gpu: h100\n", ["nodes", "missing"]),
    "typo-nodes.yaml": ("gpu: h100\nnode: 8\n", ["nodes", "rename 'node' to 'nodes'"]),
    "zero-nodes.yaml": ("gpu: h100\nnodes: 0\n", ["nodes", "positive integer"]),
    "negative-nodes.yaml": ("gpu: h100\nnodes: -3\n", ["nodes"]),
    "bool-nodes.yaml": ("gpu: h100\nnodes: true\n", ["nodes"]),
    "bool-gpus.yaml": ("gpu: h100\nnum_gpus: true\n", ["num_gpus", "not true/false"]),
    "absurd-gpus.yaml": ("gpu: h100\nnum_gpus: 1000000000000000000000000000000\n", ["num_gpus", "at most"]),
    "float-gpus.yaml": ("gpu: h100\nnum_gpus: 1.0e+30\n", ["num_gpus"]),
    "zero-per-node.yaml": ("gpu: h100\nnodes: 8\ngpus_per_node: 0\n", ["gpus_per_node"]),
    "zero-network.yaml": ("gpu: h100\nnodes: 8\nnetwork_gbps: 0\n", ["network_gbps", "at least"]),
    "tiny-network.yaml": ("gpu: h100\nnodes: 8\nnetwork_gbps: 1.0e-300\n", ["network_gbps", "at least"]),
    "inf-network.yaml": ("gpu: h100\nnodes: 8\nnetwork_gbps: .inf\n", ["network_gbps", "finite"]),
    "undersubscribed.yaml": ("gpu: h100\nnodes: 8\noversubscription: 0.5\n", ["oversubscription"]),
    "zero-domain.yaml": ("gpu: h100\nnodes: 8\nnvlink_domain: 0\n", ["nvlink_domain"]),
    "unknown-gpu.yaml": ("gpu: zz9\nnodes: 8\n", ["gpu", "unknown GPU 'zz9'"]),
    "gpu-list.yaml": ("gpu: [1, 2]\nnodes: 8\n", ["gpu", "catalog key or a mapping"]),
    "partial-gpu.yaml": ("gpu: {memory_gib: 80}\nnodes: 8\n", ["gpu.bf16_tflops", "Field required"]),
    "negative-gpu.yaml": ("gpu: {key: h100, memory_gib: -1}\nnodes: 8\n", ["gpu.memory_gib"]),
    "slow-gpu.yaml": ("gpu: {key: h100, bf16_tflops: 1.0e-300}\nnodes: 8\n", ["gpu.bf16_tflops", "at least"]),
    "efficiency.yaml": ("gpu: {key: h100, matmul_efficiency: 2}\nnodes: 8\n", ["gpu.matmul_efficiency", "at most 1"]),
    "list.yaml": ("- h100\n", ["expected a mapping"]),
    "tag.yaml": ("gpu: !!python/object/apply:os.getcwd []\nnodes: 8\n", ["refused YAML tag"]),
}


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_bad_cluster_file(tmp_path, name):
    text, needles = CLUSTER_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PlanInputError) as info:
        load_cluster(str(path))
    line = info.value.one_line()
    assert str(path) in line and "(fix: " in line
    for needle in needles:
        assert needle in line, (needle, line)


def test_bad_cluster_file_cli(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER_FILES["tiny-network.yaml"][0])
    assert_one_line_error(plan("--model", "llama8b", "--cluster", str(path)), str(path), "network_gbps")


def test_inline_gpu_unknown_key_warns(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("gpu: {key: h100, memroy_gib: 100}\nnodes: 2\n")
    cluster = load_cluster(str(path))
    assert cluster.num_gpus == 16 and cluster.gpu.memory_gib == 80
    err = capsys.readouterr().err
    assert "gpu: unknown key ignored: 'memroy_gib' (did you mean 'memory_gib'?)" in err


# --- command-line values -----------------------------------------------------------------------------------------
BAD_ARGS = [
    (["--seq-len", "0"], ["seq_len", "above 0"]),
    (["--seq-len", "-5"], ["seq_len"]),
    (["--seq-len", "abc"], ["--seq-len"]),
    (["--seq-len", "1000000000"], ["seq_len", "at most"]),
    (["--global-batch", "-1"], ["global_batch", "above 0"]),
    (["--global-batch", "0"], ["global_batch"]),
    (["--global-batch", "99999999999999999999"], ["global_batch"]),
    (["--fix", "tp=abc"], ["--fix", "tp must be a positive integer"]),
    (["--fix", "foo=1"], ["--fix", "unknown layout key 'foo'"]),
    (["--fix", "tpp=2"], ["did you mean 'tp'"]),
    (["--fix", "tp"], ["--fix", "KEY=VALUE"]),
    (["--fix", "tp=0"], ["--fix", "tp"]),
    (["--fix", "tp=-8"], ["--fix", "tp"]),
    (["--fix", "tp=1e3"], ["--fix", "tp"]),
    (["--fix", "zero=5"], ["--fix", "zero must be 0, 1, 2, 3 or 4"]),
    (["--fix", "recompute=maybe"], ["--fix", "recompute"]),
    (["--fix", "sp=perhaps"], ["--fix", "sp"]),
    (["--fix", "schedule=gpipe"], ["--fix", "schedule"]),
    (["--fix", "tp=2", "--fix", "tp=4"], ["--fix", "twice"]),
    (["--top", "0"], ["--top"]),
    (["--top", "-1"], ["--top"]),
    (["--top", "100000"], ["--top"]),
    (["--rank", "0"], ["--rank"]),
    (["--time-limit", "0"], ["--time-limit"]),
    (["--time-limit", "nan"], ["--time-limit"]),
    (["--format", "xml"], ["--format", "xml"]),
    (["--precision", "fp16"], ["--precision", "fp16"]),
    (["--framework", "pytorch"], ["--framework"]),
    (["--no-such-option"], ["--no-such-option"]),
]


@pytest.mark.parametrize("extra,needles", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_cli_values(extra, needles):
    assert_one_line_error(plan("--model", "llama8b", "--cluster", "h100x8", *extra), *needles)


def test_bad_cli_values_real_process():
    assert_one_line_error(plan_subprocess("--model", "llama8b", "--cluster", "h100x8", "--top", "0"), "--top")
    assert_one_line_error(plan_subprocess("--model", "llama8b", "--cluster", "h100x8", "--fix", "tp=abc"), "tp")


@pytest.mark.parametrize("cluster,needle", [
    ("h100x0", "positive"), ("h100x", "neither"), ("x512", "neither"), ("zz9x8", "unknown GPU 'zz9'"),
    ("h100x-8", "neither"), ("h100x1e30", "neither"), ("h100x" + "9" * 40, "beyond any cluster"),
    ("h100x" + "9" * 5000, "beyond any cluster"), ("h100x99999999", "beyond any cluster"),
    ("h1000x8", "did you mean 'h100'"), ("h100 x 8", "neither"),
])
def test_bad_cluster_names(cluster, needle):
    with pytest.raises(PlanInputError) as info:
        load_cluster(cluster)
    line = info.value.one_line()
    assert needle in line and "--cluster" in line and len(line) < 400


def test_bad_cluster_name_cli():
    assert_one_line_error(plan("--model", "llama8b", "--cluster", "h100x0"), "--cluster", "positive")
    assert_one_line_error(plan("--model", "llama8b", "--cluster", "zz9x8"), "--cluster", "zz9")


def test_bad_subcommand_values():
    assert_one_line_error(plan("models", "--format", "xml"), "--format")
    assert_one_line_error(plan("clusters", "--format", "csv"), "--format")
    assert_one_line_error(plan("explain", "--model", "llama8b", "--cluster", "h100x8", "--layout", "tp=abc"),
                          "--layout", "tp")
    assert_one_line_error(plan("explain", "--model", "llama8b", "--cluster", "h100x8", "--layout", "bogus=1"),
                          "--layout", "bogus")
    assert_one_line_error(plan("no-such-command"), "no-such-command")


def test_explain_broken_layout_exits_1():
    r = plan("explain", "--model", "llama8b", "--cluster", "h100x64", "--layout", "tp=3")
    assert r.returncode == 1 and "breaks" in r.stdout and "Traceback" not in r.stderr


# --- absurd but well-formed problems: an answer or "no feasible plan", never a crash -------------------------------
def _problem(model: ModelSpec, cluster: str, seq: int = 2048, gbs: int = 64, **kw) -> Problem:
    return Problem(model, load_cluster(cluster), TrainingSpec(seq_len=seq, global_batch=gbs), **kw)


def _tiny(**over) -> ModelSpec:
    doc = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 1,
           "vocab_size": 2}
    doc.update(over)
    return model_from_mapping(doc, "<test>")


@pytest.mark.parametrize("model,cluster,seq,gbs", [
    (_tiny(), "h100x1", 1, 1),  # one layer, one head, vocabulary of 2, one token
    (_tiny(), "h100x10000000", 1, 1),  # far more GPUs than work: nothing divides
    (_tiny(num_hidden_layers=1000), "h100x7", 3, 7),  # prime world size and odd batch
    (_tiny(hidden_size=10_000_000, num_attention_heads=1, intermediate_size=10_000_000), "h100x8", 2048, 8),
    (_tiny(vocab_size=10_000_000), "a100-40gx2", 100_000_000, 1),  # maximal sequence on two small GPUs
])
def test_absurd_problems_answer_or_say_infeasible(model, cluster, seq, gbs):
    problem = _problem(model, cluster, seq, gbs)
    try:
        result = search(problem, top=3)
    except NoFeasiblePlan as exc:
        assert exc.message
        return
    for p in result.plans:
        assert p.metrics["step_time_s"] > 0 and p.metrics["memory_peak_gib"] <= problem.cluster.gpu.memory_gib


def test_absurd_problem_cli_infeasible_is_exit_1():
    r = plan("--model", "llama405b", "--cluster", "h100x1")
    assert r.returncode == 1 and "no feasible plan" in r.stderr and "Traceback" not in r.stderr


# --- scale: functional checks (timings are measured separately and reported) -----------------------------------
def _scale_model(**over) -> ModelSpec:
    doc = {"name": "scale", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
    doc.update(over)
    return model_from_mapping(doc, "<scale>")


def test_scale_100k_gpus():
    problem = _problem(load_model("llama3-70b"), "h100x100000", 8192, 12500)
    result = search(problem, top=3)
    lay = result.plans[0].layout
    assert lay.tp * lay.pp * lay.cp * lay.dp == 100_000


def test_scale_1000_layers():
    result = search(_problem(_scale_model(num_hidden_layers=1000), "h100x1024", 8192, 512), top=3)
    assert result.plans and result.proven_best


def test_scale_1m_token_sequence():
    result = search(_problem(load_model("llama3-8b"), "h100x1024", 1_048_576, 64), top=3)
    best = result.plans[0].layout
    assert best.cp > 1  # a million tokens do not fit one GPU's activations


def test_scale_1024_experts():
    model = _scale_model(num_local_experts=1024, num_experts_per_tok=8, moe_intermediate_size=1024)
    result = search(_problem(model, "h100x1024", 8192, 512), top=3)
    assert result.plans[0].layout.ep > 1


def test_time_limit_caps_search_and_says_not_proven():
    model = _scale_model(num_local_experts=1024, num_experts_per_tok=8, moe_intermediate_size=1024)
    problem = _problem(model, "h100x1024", 8192, 512)
    capped = search(problem, top=1, time_limit_s=1e-6)
    assert not capped.proven_best and capped.plans
    # mixtral-8x22b on 1,024 GPUs enumerates more layouts than one pricing chunk, so a tiny limit stops early
    r = plan("--model", "mixtral-8x22b", "--cluster", "h100x1024", "--time-limit", "0.01", "-f", "json", "--top", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["search"]["proven_best"] is False
    r = plan("--model", "mixtral-8x22b", "--cluster", "h100x1024", "--time-limit", "0.01", "--top", "1")
    assert r.returncode == 0 and "not proven best" in r.stdout


@pytest.mark.parametrize("args, needles", [
    (("--cuda-graph-modules", "attn"), ("--cuda-graph-modules", "--cuda-graphs per-layer")),
    (("--cuda-graphs", "per-layer", "--cuda-graph-modules", "attn,router"), ("--cuda-graph-modules", "'router'")),
    (("--cuda-graphs", "per-layer", "--cuda-graph-modules", "moe_preprocess"), ("add moe_router",)),
    (("--cuda-graphs", "per-layer", "--framework", "torchtitan"), ("--cuda-graphs", "torchtitan", "megatron-core")),
])
def test_cuda_graph_modules_errors_are_one_line(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    assert_one_line_error(plan("--model", "qwen3-30b-a3b", "--cluster", "h100x16", *args), *needles)
