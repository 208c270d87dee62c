"""The cluster's network as tiers, from the innermost (the NVLink domain) outwards.

A tier is one level of the fabric: `size` GPUs share one domain of it (an HGX board's 8 GPUs on NVSwitch, the 16 GPUs
under one of Meta's rack switches, a 3,072-GPU pod, the whole cluster), and a GPU reaches the GPUs of its domain that
lie outside its next-inner domain at `gbps` per direction. `oversubscription` is how much less each GPU gets when
all GPUs of the domain send out of it at once (Meta's aggregation layer between pods: 1:7). `rails`: the tier is
rail-optimised (NIC i of every node on leaf switch i), so traffic between GPUs of the same local index stays on its
rail, one switch hop; NCCL keeps its rings and trees on rails and moves other traffic onto the right rail over
NVLink first (PXN). What each field costs is priced in planner.cost.fabric; clusters/*.yaml ship examples.

A cluster file without `tiers:` describes two: its NVLink domain and one network (`legacy_tiers`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from planner.inputs.spec_base import MAX_SIZE, Rate, _Spec

TIER_KEYS = ("name", "size", "gbps", "latency_us", "oversubscription", "rails")


class Tier(_Spec):
    """One level of the network (module docstring)."""

    name: str = Field(min_length=1, max_length=40, description="what the domain is: nvlink, rack, pod, building")
    size: int = Field(gt=0, le=MAX_SIZE, description="GPUs in one domain of this tier")
    gbps: Rate | None = Field(default=None, description=(
        "per-GPU bandwidth per direction, GB/s, to the GPUs of the domain outside the next-inner one; on the "
        "innermost tier the GPU's NVLink when not given"))
    latency_us: float | None = Field(default=None, ge=0, le=1e6, description=(
        "one hop across this tier, microseconds; default NCCL's per-hop figures (planner.cost.fabric)"))
    oversubscription: float = Field(default=1.0, ge=1.0, le=1000.0, description=(
        "bandwidth a GPU loses when all GPUs of the domain send out of it at once (7 for 1:7)"))
    rails: bool = Field(default=False, description="rail-optimised: same-index GPUs are one switch hop apart")


def check_tiers(tiers: Sequence[Tier], num_gpus: int | None) -> None:
    """Tiers nest: at least two, each domain a whole number of the domains inside it, a bandwidth on every network
    tier, names unique, and the outermost tier joins the whole cluster. ValueError naming the tier otherwise."""
    if len(tiers) < 2:
        raise ValueError("give at least two tiers: the NVLink domain and a network joining the domains")
    names = [t.name for t in tiers]
    for i, tier in enumerate(tiers):
        where = f"tier {i} ({tier.name})"
        if names.count(tier.name) > 1:
            raise ValueError(f"{where}: the name is used twice; name each tier once")
        if i and tier.size % tiers[i - 1].size:
            raise ValueError(f"{where}: size {tier.size} is not a multiple of the tier inside it "
                             f"({tiers[i - 1].name}, {tiers[i - 1].size}); domains nest")
        if i and tier.gbps is None:
            raise ValueError(f"{where}: gbps is missing; a network tier needs its per-GPU bandwidth (GB/s)")
    if num_gpus is not None and tiers[-1].size < num_gpus:
        raise ValueError(f"the outermost tier ({tiers[-1].name}) holds {tiers[-1].size} GPUs but the cluster has "
                         f"{num_gpus}; add a tier that joins its domains")


def legacy_tiers(nvlink_domain: int, network_gbps: float, oversubscription: float, num_gpus: int) -> tuple[Tier, ...]:
    """The two tiers a cluster without `tiers:` describes: the NVLink domain (the GPU's NVLink bandwidth) and one
    network joining every domain, oversubscribed as the file says."""
    return (Tier(name="nvlink", size=nvlink_domain),
            Tier(name="network", size=max(num_gpus, nvlink_domain), gbps=network_gbps,
                 oversubscription=oversubscription))
