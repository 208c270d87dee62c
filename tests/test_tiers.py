"""Network tiers: the cluster schema, and every collective priced by hand on a three-tier cluster.

The cluster (built in `three_tier`): NVLink domains of 8 GPUs at 450 GB/s per direction, racks of 32 GPUs at 50 GB/s
per GPU, a spine joining 128 GPUs at 50 GB/s with 1:4 oversubscription. Achievable shares (planner.cost.fabric):
NVLink 0.80, network 0.92, so per GPU: 360 GB/s, 46 GB/s, 11.5 GB/s. Hop latencies: NCCL's 1.9 us (NVLink) and
4 us (network) after a base of 8.4 us.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_plan_in_process

from planner.cost import fabric
from planner.errors import PlanInputError
from planner.inputs.catalog import cluster_from_mapping, load_cluster
from planner.inputs.specs import ClusterSpec

NV, RACK, SPINE = 360e9, 46e9, 11.5e9  # bytes/s per GPU: 450·0.8, 50·0.92, 50·0.92/4
BASE, NV_HOP, NET_HOP = 8.4e-6, 1.9e-6, 4.0e-6


def three_tier(**spine: object) -> ClusterSpec:
    return cluster_from_mapping({"gpu": "h100", "nodes": 16, "tiers": [
        {"name": "nvlink", "size": 8},
        {"name": "rack", "size": 32, "gbps": 50},
        {"name": "spine", "size": 128, "gbps": 50, "oversubscription": 4, **spine}]}, "three-tier.yaml")


def one(x: np.ndarray) -> float:
    return float(np.asarray(x).reshape(-1)[0])


# A data-parallel group of 64 ranks strided by tp = 2: 4 per NVLink domain, 16 per rack, 64 over the spine, so
# 4 members per domain, 4 domains per rack, 4 racks: k = (4, 4, 4).
SIZE, STRIDE, S = np.array([64]), np.array([2]), 1e9
LATENCY = BASE + 2 * 2 * NV_HOP + 2 * 2 * NET_HOP + 2 * 2 * NET_HOP  # log2(4) = 2 at each tier


def test_spans_and_latency_by_hand() -> None:
    g, lat = fabric.geometry(SIZE, STRIDE, three_tier())
    assert [one(x) for x in g] == [4, 16, 64]
    assert one(lat) == pytest.approx(LATENCY)  # 8.4 + 7.6 + 16 + 16 = 48 us
    assert one(lat) == pytest.approx(48e-6)


def test_all_reduce_by_hand() -> None:
    # reduce-scatter + all-gather inside the domain on S, across the rack on S/4, across the spine on S/16
    want = 2 * 3 / 4 * S / NV + 2 * 3 / 4 * (S / 4) / RACK + 2 * 3 / 4 * (S / 16) / SPINE + LATENCY
    got = one(fabric.all_reduce_time(np.array([S]), SIZE, STRIDE, three_tier()))
    assert got == pytest.approx(want, rel=1e-12)
    assert got == pytest.approx(4.1667e-3 + 8.1522e-3 + 8.1522e-3 + 48e-6, rel=1e-4)


def test_all_gather_and_reduce_scatter_by_hand() -> None:
    bandwidth = 3 / 4 * S / NV + 3 / 4 * (S / 4) / RACK + 3 / 4 * (S / 16) / SPINE
    got = one(fabric.all_gather_time(np.array([S]), SIZE, STRIDE, three_tier()))
    assert got == pytest.approx(bandwidth + LATENCY, rel=1e-12)


def test_all_to_all_by_hand() -> None:
    # each GPU keeps 1/64: 3/64 of S to its domain peers over NVLink, 60/64 leaves the domain through the rack,
    # 48/64 leaves the rack through the spine; the spine is the slowest: 0.75 GB / 11.5 GB/s
    nvlink, rack, spine = S * 3 / 64 / NV, S * 60 / 64 / RACK, S * 48 / 64 / SPINE
    assert spine > rack > nvlink
    got = one(fabric.all_to_all_time(np.array([S]), SIZE, STRIDE, three_tier()))
    assert got == pytest.approx(spine + LATENCY, rel=1e-12)


def test_all_to_all_on_rails_moves_bytes_over_nvlink_first() -> None:
    # rails: the 60/64 of S leaving the domain cross NVLink first for all but 1/4 of it (PXN), so NVLink carries
    # S·3/64 + S·60/64·3/4; with a 4 GB/s domain that becomes the slowest link
    slow_nvlink = {"gpu": {"key": "h100", "nvlink_gbps": 5}, "nodes": 16, "tiers": [
        {"name": "nvlink", "size": 8}, {"name": "rack", "size": 32, "gbps": 50, "rails": True},
        {"name": "spine", "size": 128, "gbps": 50, "oversubscription": 4}]}
    cluster = cluster_from_mapping(slow_nvlink, "rails.yaml")
    nvlink = (S * 3 / 64 + S * 60 / 64 * 3 / 4) / (5e9 * 0.8)
    assert nvlink > S * 48 / 64 / SPINE
    got = one(fabric.all_to_all_time(np.array([S]), SIZE, STRIDE, cluster))
    assert got == pytest.approx(nvlink + LATENCY, rel=1e-12)
    plain = cluster_from_mapping({**slow_nvlink, "tiers": [{**t, "rails": False} for t in slow_nvlink["tiers"]]},
                                 "no-rails.yaml")
    assert one(fabric.all_to_all_time(np.array([S]), SIZE, STRIDE, plain)) < got


def test_routed_all_to_all_by_hand() -> None:
    # DeepEP: copies forwarded over NVLink, one copy per remote domain over the rack; the remote domains outside
    # the rack, (64 - 16) / (64 - 4) of them, over the spine
    copies, remote = 8e8, 3e8
    want = max(copies * 3 / 4 / NV, remote / RACK, remote * 48 / 60 / SPINE) + LATENCY
    got = one(fabric.routed_all_to_all_time(np.array([copies]), np.array([remote]), SIZE, STRIDE, three_tier()))
    assert got == pytest.approx(want, rel=1e-12)


def test_p2p_by_tier() -> None:
    cluster = three_tier()
    got = fabric.p2p_time(np.array([S, S, S]), np.array([0, 1, 2]), cluster)
    assert list(got) == pytest.approx([BASE + S / NV, BASE + S / RACK, BASE + S / SPINE], rel=1e-12)
    # a tier with a slower hop than NCCL's default adds the difference: 30 us against 4
    slow = fabric.p2p_time(np.array([S]), np.array([2]), three_tier(latency_us=30))
    assert one(slow) == pytest.approx(BASE + 26e-6 + S / SPINE, rel=1e-12)


def test_group_with_an_outer_factor() -> None:
    # dp x cp with the rank order tp-cp-pp-dp: cp = 2 adjacent (stride tp = 2), dp = 8 strided by tp·cp·pp = 16
    # (pp = 4): per NVLink domain of 8 both cp ranks and none more (16 > 8); per rack of 32: 2 cp x 2 dp
    g = fabric.spans(np.array([16]), np.array([2]), fabric.levels(three_tier()), (np.array([2]), np.array([16])))
    assert [one(x) for x in g] == [2, 4, 16]


def test_group_tier_and_span_tier() -> None:
    cluster = three_tier()
    g = fabric.spans(np.array([4, 4, 4]), np.array([2, 8, 32]), fabric.levels(cluster))
    assert list(fabric.group_tier(g, np.array([4, 4, 4]))) == [0, 1, 2]
    assert list(fabric.span_tier(np.array([8, 16, 64, 256]), cluster)) == [0, 1, 2, 2]


@pytest.mark.parametrize("cluster", ["h100x512", "gb200x256", "a100x64"])
def test_two_tiers_written_out_price_as_the_legacy_fields(cluster: str) -> None:
    legacy = load_cluster(cluster)
    tiered = ClusterSpec.model_validate({**legacy.model_dump(), "tiers": [
        {"name": "nvlink", "size": legacy.nvlink_domain},
        {"name": "network", "size": legacy.num_gpus, "gbps": legacy.network_gbps}]})
    size, stride, nbytes = np.array([2, 16, 64, 512]), np.array([1, 2, 8, 1]), np.array([1e6, 1e8, 3e9, 5e7])
    for f in (fabric.all_reduce_time, fabric.all_gather_time, fabric.all_to_all_time):
        assert np.array_equal(f(nbytes, size, stride, legacy), f(nbytes, size, stride, tiered))


def test_shipped_clusters_load() -> None:
    meta = load_cluster("clusters/meta-24k-roce.yaml")
    assert meta.num_gpus == 16384 and [t.size for t in meta.network_tiers()] == [8, 16, 3072, 16384]
    assert meta.network_tiers()[-1].oversubscription == 7 and meta.tiered
    for name in ("hgx-h100-superpod", "gb200-nvl72", "multi-building"):
        assert load_cluster(f"clusters/{name}.yaml").tiered
    assert not load_cluster("h100x512").tiered and load_cluster("h100x512").tiers is None


@pytest.mark.parametrize(("tiers", "words"), [
    ([{"name": "nvlink", "size": 8}], ["at least two tiers"]),
    ([{"name": "nvlink", "size": 8}, {"name": "net", "size": 12, "gbps": 50}], ["tier 1 (net)", "multiple"]),
    ([{"name": "nvlink", "size": 8}, {"name": "net", "size": 32}], ["tier 1 (net)", "gbps"]),
    ([{"name": "nvlink", "size": 8}, {"name": "net", "size": 16, "gbps": 50}], ["outermost", "32"]),
    ([{"name": "a", "size": 8}, {"name": "a", "size": 32, "gbps": 50}], ["used twice"]),
    ([{"name": "nvlink", "size": 8}, {"name": "net", "size": 32, "gbps": 50, "oversubscription": 0.5}],
     ["tiers.1.oversubscription"]),
])
def test_bad_tiers_are_one_line_errors(tiers: list[dict], words: list[str]) -> None:
    with pytest.raises(PlanInputError) as err:
        cluster_from_mapping({"gpu": "h100", "nodes": 4, "tiers": tiers}, "bad.yaml")
    text = str(err.value)
    assert "\n" not in text and "tiers" in text
    for word in words:
        assert word in text


def test_tiers_beside_the_two_tier_fields_are_refused() -> None:
    with pytest.raises(PlanInputError, match="network_gbps and tiers both"):
        cluster_from_mapping({"gpu": "h100", "nodes": 4, "network_gbps": 25, "tiers": [
            {"name": "nvlink", "size": 8}, {"name": "net", "size": 32, "gbps": 50}]}, "both.yaml")


def test_tiered_cluster_with_goodput_sections_round_trips(tmp_path: Path) -> None:
    """Both halves of issue 27 in one file and one document: `tiers:` beside `reliability:` / `storage:`; the
    schema_version 3 document carries each plan's rank order and placement and its goodput at the file's failure
    rate; `plan check` reads it back and re-plans the same problem; a typo in a tier and in a section both warn."""
    path = tmp_path / "tiered.yaml"
    path.write_text("gpu: h100\nnodes: 16\ngpus_per_node: 8\n"
                    "tiers:\n  - {name: nvlink, size: 8}\n  - {name: rack, size: 32, gbps: 50, latncy_us: 4}\n"
                    "  - {name: spine, size: 128, gbps: 50, oversubscription: 4}\n"
                    "reliability:\n  failures_per_gpu_hour: 1e-4\n  restrat_s: 60\nstorage:\n  async_save: true\n")
    r = run_plan_in_process("--model", "llama3-8b", "--cluster", str(path), "--format", "json", "--top", "2")
    assert r.returncode == 0, r.stderr
    assert "latncy_us" in r.stderr and "restrat_s" in r.stderr  # each unknown key named, tier and section alike
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 10
    cluster = doc["inputs"]["cluster"]
    assert [t["name"] for t in cluster["tiers"]] == ["nvlink", "rack", "spine"]
    assert cluster["reliability"]["failures_per_gpu_hour"] == 1e-4 and cluster["storage"]["async_save"] is True
    for plan in doc["plans"]:
        assert plan["layout"]["rank_order"] in ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
        assert set(plan["placement"].values()) <= {"nvlink", "rack", "spine"}
        assert plan["goodput"]["mtbf_h"] == pytest.approx(1 / (1e-4 * 128), rel=1e-3)
        assert plan["goodput"]["async_save"] is True and 0 < plan["goodput"]["goodput"] < 1
    baseline = tmp_path / "b.json"
    baseline.write_text(r.stdout)
    checked = run_plan_in_process("check", "--baseline", str(baseline))
    assert checked.returncode == 0, checked.stderr
