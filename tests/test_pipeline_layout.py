"""Custom pipeline layouts: an interleaved split of layers that divide neither over pp x vpp chunks nor with the
embedding and loss counted as layers (61-layer DeepSeek-V3 and Kimi K2), as Megatron-Core states it with
--pipeline-model-parallel-layout; and a run's own stated layout, priced as it states it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cli.in_process import run_in_process
from planner.cost import memory
from planner.errors import PlanInputError
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.launch_readers.megatron_model import layout_chunks
from planner.inputs.layout import Layout, chunk_layers, embedding_loss_split, stage_split_launchable
from planner.inputs.problem import Problem, stated_layout
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout

# Megatron-Bridge's 61-layer layouts (recipes/kimi/h100/kimi_k2.py _get_kimi_k2_pipeline_layout and
# recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout @4ab94dfad): layers per pipeline rank.
BRIDGE_RANKS = {(4, 4): [16, 16, 16, 13], (8, 2): [8] * 7 + [5], (4, 2): [16, 16, 16, 13]}


def ranks(chunks: tuple[int, ...], pp: int) -> list[int]:
    return [sum(chunks[r::pp]) for r in range(pp)]


@pytest.mark.parametrize(("pp", "vpp"), sorted(BRIDGE_RANKS))
def test_61_layers_split_over_ranks_as_megatron_bridge_splits_them(pp: int, vpp: int) -> None:
    chunks = chunk_layers(61, pp, vpp)
    assert chunks is not None and len(chunks) == pp * vpp
    assert ranks(chunks, pp) == BRIDGE_RANKS[(pp, vpp)]


@pytest.mark.parametrize("layers", [61, 94, 126, 47, 30])
def test_layout_properties(layers: int) -> None:
    """Every layer placed once; no rank above ceil(L/pp), the count the cost model prices; only the last ranks
    short; a rank's chunks differ by at most one layer; one layer at least in every chunk."""
    for pp in range(2, 17):
        for vpp in range(2, 9):
            chunks = chunk_layers(layers, pp, vpp)
            if layers % (pp * vpp) == 0 or embedding_loss_split(layers, pp, vpp) is not None:
                assert chunks is None
                continue
            if chunks is None:
                assert layers < pp * vpp or math.ceil(layers / pp) * pp - layers > 0
                continue
            assert sum(chunks) == layers and min(chunks) >= 1
            per_rank = ranks(chunks, pp)
            cap = math.ceil(layers / pp)
            assert max(per_rank) == cap
            full = [n == cap for n in per_rank]
            assert full == sorted(full, reverse=True), per_rank  # the short ranks are the last ones
            for r in range(pp):
                mine = chunks[r::pp]
                assert max(mine) - min(mine) <= 1 and list(mine) == sorted(mine, reverse=True)


def test_the_rule_follows_the_frameworks_that_take_a_layout() -> None:
    assert stage_split_launchable(61, 4, 4, uneven_allowed=True, embedding_loss=True, layout=True)
    assert not stage_split_launchable(61, 4, 4, uneven_allowed=True, embedding_loss=True, layout=False)
    assert not stage_split_launchable(61, 16, 4, uneven_allowed=True, embedding_loss=True, layout=True)  # 64 chunks


def kimi(framework: str = "nemo", stated: tuple[int, ...] | None = None) -> Problem:
    return Problem(load_model("kimi-k2"), load_cluster("gb300x256"),
                   TrainingSpec(seq_len=4096, global_batch=4096, precision="fp8", framework=framework,
                                pipeline_layout=stated))


PUBLISHED_KIMI = dict(tp=1, pp=4, vpp=4, dp=64, cp=1, ep=64, etp=0, mbs=2, zero=1, recompute=1, sp=0, schedule=6,
                      cp_comm=0)


def price(problem: Problem, **knobs: int) -> dict[str, float]:
    return price_layout(problem, Layout.from_dict({**PUBLISHED_KIMI, **knobs}))


def test_kimi_k2s_published_layout_is_searched_and_launches() -> None:
    """Megatron-Bridge's Kimi K2 on 256 GB300 (performance-summary-archive 26.06: pp4 vp4 ep64, 5,372 tokens/s/GPU)
    was refused before (61 layers over 16 chunks); the nemo and megatron launchers now state its layout."""
    args = ("--model", "kimi-k2", "--cluster", "gb300x256", "--seq-len", "4096", "--global-batch", "4096",
            "--precision", "fp8", "--top", "1", *(x for k in ("tp=1", "pp=4", "vpp=4", "ep=64", "mbs=2")
                                                  for x in ("--fix", k)))
    code, out, err = run_in_process(*args, "--framework", "nemo", "--format", "json")
    assert code == 0, err
    lay = json.loads(out)["plans"][0]["layout"]
    assert lay["pipeline_layout"] == list(chunk_layers(61, 4, 4))
    code, nemo, _ = run_in_process(*args, "--format", "nemo")
    assert code == 0
    line = next(x for x in nemo.splitlines() if x.startswith("model.pipeline_model_parallel_layout="))
    chunks = line.split("=", 1)[1][2:-2].split("],[")
    assert chunks[0].startswith("embedding,") and chunks[-1].endswith(",loss")
    assert [c.split(",").count("decoder") for c in chunks] == lay["pipeline_layout"]
    code, mega, _ = run_in_process(*args, "--format", "megatron")
    assert code == 0 and "--num-virtual-stages-per-pipeline-rank" not in mega
    text = next(x for x in mega.splitlines() if x.startswith("--pipeline-model-parallel-layout"))
    assert list(layout_chunks(text.split(" ", 1)[1])) == lay["pipeline_layout"]
    code, _, err = run_in_process(*args, "--framework", "torchtitan", "--precision", "bf16", "--format", "json")
    assert code != 0  # torchtitan's V schedules place chunks in a V: it is not offered a layout


@pytest.mark.parametrize("fmt", ["nemo", "megatron"])
def test_a_written_layout_reads_back_as_the_same_split(tmp_path: Path, fmt: str) -> None:
    args = ("--model", "kimi-k2", "--cluster", "gb300x256", "--seq-len", "4096", "--global-batch", "4096",
            "--precision", "fp8", "--top", "1", "--fix", "pp=4", "--fix", "vpp=4", "--fix", "ep=64")
    code, text, _ = run_in_process(*args, "--format", fmt)
    assert code == 0
    path = tmp_path / f"kimi.{fmt}"
    path.write_text(text)
    code, out, err = run_in_process("explain", "--from", str(path), "--model", "kimi-k2", "--cluster", "gb300x256",
                                    "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["training"]["pipeline_layout"] == list(chunk_layers(61, 4, 4))
    assert doc["yours"]["layout"]["pipeline_layout"] == list(chunk_layers(61, 4, 4))


def test_a_stated_layout_is_priced_as_stated() -> None:
    """The planner's own split and Megatron-Bridge's (4 x 15 and 1 chunks) put the same layers on each rank: one
    price. DeepSeek-V3's GB300 layout for pp 2 x vpp 8 ("Et*4|(t*4|)*14tmL") puts 32 on rank 0, one more than
    ceil(61/2), and 29 with the head on rank 1: rank 0 is priced as the fullest and holds more; the step changes
    by what moves between the ranks."""
    bridge = (4,) * 15 + (1,)
    same = price(kimi(stated=bridge))
    planner = price(kimi())
    assert same["step_time_s"] == pytest.approx(planner["step_time_s"], rel=1e-9)
    fuller = price(kimi(stated=bridge), pp=2, vpp=8, dp=128)
    own = price(kimi(), pp=2, vpp=8, dp=128)
    assert fuller["step_time_s"] != own["step_time_s"]
    assert fuller["memory_peak_gib"] > own["memory_peak_gib"]
    pp, vpp = np.array([2.0]), np.array([8.0])
    assert memory.busiest_rank_layers(61, pp, vpp, bridge)[0] == 32
    assert memory.busiest_rank_layers(61, pp, vpp)[0] == 31


def test_a_stated_layout_must_place_every_layer() -> None:
    with pytest.raises(PlanInputError) as raised:
        stated_layout(kimi(), (4,) * 16, "--pipeline-model-parallel-layout")
    assert raised.value.field == "--pipeline-model-parallel-layout" and "64" in str(raised.value)


def test_a_custom_layout_loses_a_tie_to_an_even_split() -> None:
    """Practitioners' preference (planner.search.preference 'layout'): between layouts the model cannot tell apart,
    the one without a per-chunk layout goes first."""
    from planner.search.preference import criteria_columns

    p = kimi()
    cols = {k: np.array([v, v]) for k, v in PUBLISHED_KIMI.items()}
    cols["vpp"] = np.array([4, 1])  # 61 over 16 chunks needs a layout; over 4 ranks first/last counts do
    crit = criteria_columns(p, cols, np.array([100.0, 100.0]))
    assert list(crit["layout"]) == [1, 0]
    assert list(criteria_columns(kimi(stated=(4,) * 15 + (1,)), cols, np.array([100.0, 100.0]))["layout"]) == [0, 0]
