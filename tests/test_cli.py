"""Every command and error path of the `plan` CLI, run as a user would (a subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def plan(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def test_table_report():
    r = plan("--model", "llama70b", "--cluster", "h100x512")
    assert r.returncode == 0, r.stderr
    assert "llama3-70b" in r.stdout and "tok/s/GPU" in r.stdout and "pruned" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour when not a terminal


def test_json_schema():
    r = plan("--model", "llama70b", "--cluster", "h100x512", "--format", "json", "--top", "3")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 10
    assert set(doc["inputs"]) == {"model", "cluster", "training", "options"}
    assert len(doc["plans"]) == 3
    plan0 = doc["plans"][0]
    assert plan0["rank"] == 1
    assert set(plan0["layout"]) >= {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
                                    "sequence_parallel", "schedule"}
    assert set(plan0["metrics"]) >= {"step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib"}
    assert set(doc["search"]) >= {"candidates", "feasible", "pruned", "seconds"}
    lay = plan0["layout"]
    assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == 512
    assert r.stderr == ""


def test_yaml_output_parses():
    r = plan("--model", "llama3-8b", "--cluster", "a100x64", "--format", "yaml", "--top", "1")
    assert r.returncode == 0
    assert yaml.safe_load(r.stdout)["plans"][0]["rank"] == 1


def test_fix_pins_knobs():
    r = plan("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=4", "--fix", "pp=8", "-f", "json")
    doc = json.loads(r.stdout)
    assert all(p["layout"]["tp"] == 4 and p["layout"]["pp"] == 8 for p in doc["plans"])


def test_hf_config_json_model(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
           "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "vocab_size": 128256, "hidden_act": "silu", "rope_theta": 500000.0, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = plan("--model", str(path), "--cluster", "h100x8", "--seq-len", "4096", "--global-batch", "64", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"]["model"]["num_hidden_layers"] == 16


def test_cluster_yaml(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("name: lab\ngpu: h100\nnodes: 4\ngpus_per_node: 8\nnetwork_gbps: 25\n")
    r = plan("--model", "llama3-8b", "--cluster", str(path), "-f", "json", "--top", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"]["cluster"]["num_gpus"] == 32


def test_explain_feasible_and_broken():
    ok = plan("explain", "--model", "llama70b", "--cluster", "h100x512", "--layout",
              "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert "satisfies every rule" in ok.stdout
    bad = plan("explain", "--model", "llama70b", "--cluster", "h100x512", "--layout", "tp=16,pp=3", "-f", "json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["metrics"]["step_time_s"] > 0  # priced even though it breaks rules
    assert {"world_size", "tp_within_nvlink_domain"} <= {r["rule"] for r in doc["broken_rules"]}


def test_models_and_clusters():
    m = plan("models", "-f", "json")
    names = {x["name"] for x in json.loads(m.stdout)}
    assert {"llama3-70b", "llama3-405b", "gpt3-175b", "mixtral-8x22b", "nemotron4-340b", "qwen2.5-72b"} <= names
    c = plan("clusters", "-f", "json")
    assert {"a100", "h100", "h200", "b200", "gb200", "mi300x"} <= set(json.loads(c.stdout))


def test_validate_on_a_small_case_file(tmp_path):
    src = yaml.safe_load((ROOT / "validation" / "published_runs.yaml").read_text())
    small = {"schema_version": 1, "cases": src["cases"][:3]}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(small))
    r = plan("validate", "--cases", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["cases"]) == 3 and "summary" in doc
    assert all(c["predicted"]["tokens_per_s_per_gpu"] > 0 for c in doc["cases"])


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama7", "--cluster", "h100x8"], "did you mean 'llama7b'"),
    (["--model", "llama70b", "--cluster", "h1000x8"], "did you mean 'h100'"),
    (["--model", "llama70b", "--cluster", "h100x8", "--fix", "tpp=2"], "did you mean 'tp'"),
    (["--model", "llama70b", "--cluster", "h100x8", "--fix", "tp=two"], "tp must be a positive integer"),
    (["--model", "llama70b", "--cluster", "h100x8", "--format", "xml"], "--format"),
    (["--model", "llama70b", "--cluster", "h100x8", "--precision", "fp16"], "--precision"),
    # paper-era Megatron-LM trained in 16-bit; fp8 is today's Megatron-LM (megatron-core)
    (["--model", "llama70b", "--cluster", "h100x8", "--precision", "fp8", "--framework", "megatron"],
     "megatron-core"),
    (["--model", "llama70b", "--cluster", "h100x8", "--seq-len", "0"], "seq_len"),
    (["--model", "/nonexistent/config.json", "--cluster", "h100x8"], "file not found"),
    (["--cluster", "h100x8"], "--model"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = plan(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_bad_model_file_names_file_and_field(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("hidden_size: 4096\nnum_hidden_layers: 0\nnum_attention_heads: 32\nintermediate_size: 1\n"
                    "vocab_size: 100\n")
    r = plan("--model", str(path), "--cluster", "h100x8")
    assert r.returncode == 2
    assert str(path) in r.stderr and "num_hidden_layers" in r.stderr


def test_infeasible_exits_1_with_reasons():
    r = plan("--model", "llama405b", "--cluster", "h100x16")
    assert r.returncode == 1
    assert "binding" in r.stderr and "would help" in r.stderr


def test_no_color_env_respected():
    import os

    env = dict(os.environ, NO_COLOR="1")
    r = plan("--model", "llama3-8b", "--cluster", "h100x8", env=env)
    assert "\x1b[" not in r.stdout


def test_help_has_examples():
    r = plan("--help")
    assert r.returncode == 0 and "plan --model llama70b --cluster h100x512" in r.stdout


@pytest.mark.parametrize("spelling,gpu", [("H100-SXM5", "h100"), ("a100-80gb", "a100"), ("a100-40gb", "a100-40g"),
                                          ("gb200-nvl72", "gb200"), ("mi300x", "mi300x")])
def test_gpu_spellings_of_papers_and_tables(spelling, gpu):
    from planner.inputs.catalog import load_cluster

    cluster = load_cluster(f"{spelling}x16")
    assert (cluster.gpu.key, cluster.num_gpus) == (gpu, 16)
