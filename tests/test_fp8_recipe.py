"""fp8 scaling granularity (--fp8-recipe) and fp8 caching of the SwiGLU input: priced from DeepGEMM's measured
rates and DeepSeek-V3's recipe, emitted and read back by the launchers, refused where a framework has no such
recipe."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import layout

from planner.cost import compute, memory
from planner.cost.profiles import profile_for
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.launch_readers import read_launch_file
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True)


def test_blockwise_runs_at_deepgemm_rate_on_hopper_and_natively_on_blackwell():
    """DeepGEMM (README @55ab91f, H800): DeepSeek-V3's training GEMMs, FLOP-weighted, at 1268 TFLOP/s of 1979."""
    h800, b200 = load_cluster("h800x8").gpu, load_cluster("b200x8").gpu
    rows = [(2112 * 7168, 1009), (24576 * 1536, 1125), (32768 * 512, 751), (7168 * 16384, 1426),
            (8 * 4096 * 7168, 1346), (8 * 7168 * 2048, 1214), (4096 * 7168, 1265), (7168 * 2048, 1168)]
    weighted = sum(w for w, _ in rows) / sum(w / r for w, r in rows)
    assert compute.gemm_efficiency(h800, "fp8", "blockwise") == pytest.approx(weighted / 1979, abs=0.001)
    assert compute.gemm_efficiency(h800, "fp8", "blockwise") < compute.gemm_efficiency(h800, "fp8")
    assert compute.gemm_efficiency(b200, "fp8", "blockwise") == compute.gemm_efficiency(b200, "fp8")
    assert compute.gemm_efficiency(h800, "bf16", "blockwise") == h800.matmul_efficiency


def test_blockwise_slows_a_hopper_plan_by_the_gemm_share():
    def step(recipe: str) -> float:
        p = Problem(load_model("llama3-70b"), load_cluster("h100x64"),
                    TrainingSpec(seq_len=8192, global_batch=64, precision="fp8", fp8_recipe=recipe))
        lay = layout(tp=8, dp=8, zero=1, sp=1)
        return price_layout(p, lay)["step_time_s"]
    slower = step("blockwise") / step("tensorwise")
    # GEMMs are most of the step but not all of it (attention runs in bf16, norms are memory-bound)
    assert 1.02 < slower < 0.709 / 0.641


def test_fp8_activation_store_halves_the_swiglu_input():
    """Per routed copy the gate|up output is kept at 1 byte per value instead of 2 (DeepSeek-V3 §3.3.3)."""
    m = load_model("deepseek-v3")
    one, zero = np.array([1.0]), np.array([0.0])
    plain = memory.layer_activation_terms(m, one, zero, True, False, fp8=True)["mlp"][0]
    stored = memory.layer_activation_terms(m, one, zero, True, False, fp8=True, act_store_fp8=True)["mlp"][0]
    copies = m.num_experts_per_tok + m.n_shared_experts
    assert plain - stored == pytest.approx(2 * m.expert_ffn * copies)
    bf16 = memory.layer_activation_terms(m, one, zero, True, False, fp8=False, act_store_fp8=True)["mlp"][0]
    assert bf16 > plain  # bf16 training keeps bf16 inputs whatever the flag says
    assert profile_for("generic").fp8_activation_store and not profile_for("nemo").fp8_activation_store


def test_cli_refuses_blockwise_where_it_cannot_run():
    bad = _plan("-m", "llama3-8b", "-c", "h100x8", "--fp8-recipe", "blockwise")
    assert bad.returncode == 2 and "--fp8-recipe" in bad.stderr and "Traceback" not in bad.stderr
    bad = _plan("-m", "llama3-8b", "-c", "h100x8", "--precision", "fp8", "--fp8-recipe", "blockwise",
                "--framework", "torchtitan")
    assert bad.returncode == 2 and "torchtitan" in bad.stderr
    bad = _plan("-m", "llama3-8b", "-c", "h100x8", "--precision", "fp8", "--fp8-recipe", "rowwise")
    assert bad.returncode == 2 and "tensorwise or blockwise" in bad.stderr


def test_launchers_emit_blockwise_and_megatron_reads_it_back(tmp_path):
    args = ("-m", "llama3-8b", "-c", "h100x8", "--seq-len", "4096", "--precision", "fp8", "--fp8-recipe",
            "blockwise")
    mega = _plan(*args, "-f", "megatron")
    assert mega.returncode == 0, mega.stderr
    assert "--fp8-recipe blockwise" in mega.stdout
    nemo = _plan(*args, "-f", "nemo")
    assert nemo.returncode == 0 and "mixed_precision=bf16_with_fp8_subchannel_scaling_mixed" in nemo.stdout
    script = tmp_path / "launch.sh"
    script.write_text(mega.stdout)
    assert read_launch_file(str(script), None).fp8_recipe == "blockwise"
    priced = _plan("explain", "--from", str(script), "-f", "json")
    assert '"fp8_recipe": "blockwise"' in priced.stdout
