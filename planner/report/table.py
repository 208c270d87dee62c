"""Human-readable report (rich): header, ranked plans, and what the search pruned."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.cost import flops
from planner.inputs.layout import CpComm, Recompute, Schedule
from planner.inputs.specs import ModelSpec
from planner.report.document import layout_dict
from planner.search.rules import RULES_BY_NAME
from planner.search.search import Plan, SearchResult

# Short names in the ranked table's layout column, by enum (not by trimming the labels).
_RECOMPUTE_SHORT = {Recompute.NONE: "norc", Recompute.SELECTIVE: "sele", Recompute.FULL: "full"}
_CP_COMM_SHORT = {CpComm.RING: "", CpComm.A2A: "(a2a)", CpComm.HYBRID: "(hyb)"}


def layout_text(layout: dict[str, int], nvlink_domain: int | None = None) -> str:
    """One plan's layout in the ranked table: 'tp8 pp4/v5 dp16 mbs1 zero1 sele sp interleaved'."""
    d = layout_dict(layout, nvlink_domain=nvlink_domain)
    parts = [f"tp{d['tp']}", f"pp{d['pp']}" + (f"/v{d['vpp']}" if d["vpp"] > 1 else ""), f"dp{d['dp']}"]
    if d["cp"] > 1:
        parts.append(f"cp{d['cp']}" + _CP_COMM_SHORT[CpComm(layout.get("cp_comm", CpComm.RING))])
    if d["ep"] > 1:
        parts.append(f"ep{d['ep']}")
    zero = f"hsdp{d['fsdp_shard_group']}" if "fsdp_shard_group" in d else f"zero{d['zero']}"
    parts += [f"mbs{d['micro_batch']}", zero, _RECOMPUTE_SHORT[Recompute(layout["recompute"])]]
    if d["sequence_parallel"]:
        parts.append("sp")
    if d["pp"] > 1:
        parts.append(Schedule(layout["schedule"]).label)
    return " ".join(parts)


def _share(plan: Plan, key: str) -> float:
    return plan.metrics[key] / plan.metrics["step_time_s"]


def why(plan: Plan, best: Plan) -> str:
    """The component that costs this plan the most against the best one (or the best one's main overhead)."""
    names = {"bubble_s": "bubble", "tp_comm_s": "TP comm", "cp_comm_s": "CP comm", "ep_comm_s": "EP all-to-all",
             "fsdp_comm_s": "FSDP gathers", "pp_comm_s": "PP sends", "dp_comm_s": "DP reduce",
             "recompute_s": "recompute", "optimizer_s": "optimizer"}
    if plan is best:
        key = max(names, key=lambda k: plan.metrics[k])
        return f"fastest; largest overhead {names[key]} {_share(plan, key):.0%}"
    deltas = {k: plan.metrics[k] - best.metrics[k] for k in names}
    deltas["compute"] = (plan.metrics["compute_s"] - plan.metrics["recompute_s"]) - (
        best.metrics["compute_s"] - best.metrics["recompute_s"])
    key = max(deltas, key=lambda k: deltas[k])
    slower = plan.metrics["step_time_s"] / best.metrics["step_time_s"] - 1
    if slower < 0.0005:
        return "ties #1 (same predicted step time)"
    label = names.get(key, "slower kernels")
    return f"{slower:+.1%}: more {label}"


def layer_mix(m: ModelSpec) -> str:
    """Counts per layer kind, e.g. 'mixers 36 chunked_attention + 12 full_attention; MLPs 24 dense + 24 moe'."""

    def counts(kinds: tuple[str, ...]) -> str:
        return " + ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds)))
    return f"mixers {counts(m.mixer_kinds)}; MLPs {counts(m.mlp_kinds)}"


def render(result: SearchResult, console: Console, timings: bool = True) -> None:
    p = result.problem
    m, cl, tr = p.model, p.cluster, p.training
    total, active = flops.total_params(m), flops.active_params(m)
    params = f"{total / 1e9:.1f}B params" + (f", {active / 1e9:.1f}B active" if m.is_moe else "")
    console.print(f"[bold]model[/]   {m.name} ({params}, {m.num_hidden_layers} layers, hidden {m.hidden_size})")
    if m.layer_types is not None or m.mlp_layer_types is not None:  # say how a mixed config was read
        console.print(f"[bold]layers[/]  {layer_mix(m)}")
    console.print(f"[bold]cluster[/] {cl.name}: {cl.num_gpus} x {cl.gpu.name} ({cl.gpu.memory_gib:g} GiB), "
                  f"NVLink domain {cl.nvlink_domain}, {cl.network_gbps:g} GB/s network per GPU")
    console.print(f"[bold]training[/] seq_len {tr.seq_len}, global batch {tr.global_batch} sequences "
                  f"({tr.seq_len * tr.global_batch / 1e6:.2f}M tokens), {tr.precision}, framework {tr.framework}")
    table = Table(show_lines=False, header_style="bold")
    for col, justify in (("#", "right"), ("layout", "left"), ("step s", "right"), ("tok/s/GPU", "right"),
                         ("MFU", "right"), ("mem GiB", "right"), ("compute/comm/bubble", "right"), ("why", "left")):
        table.add_column(col, justify=justify)
    best = result.plans[0]
    cap = cl.gpu.memory_gib
    for i, plan in enumerate(result.plans, 1):
        mt = plan.metrics
        split = (f"{_share(plan, 'compute_s'):.0%}/{_share(plan, 'exposed_comm_s'):.0%}/"
                 f"{_share(plan, 'bubble_s'):.0%}")
        table.add_row(str(i), layout_text(plan.layout, cl.nvlink_domain), f"{mt['step_time_s']:.2f}",
                      f"{mt['tokens_per_s_per_gpu']:,.0f}", f"{mt['mfu']:.1%}",
                      f"{mt['memory_peak_gib']:.1f}/{cap:g}", split, why(plan, best))
    console.print(table)
    pruned = [(k, v) for k, v in sorted(result.pruned.items(), key=lambda kv: -kv[1]) if v]
    console.print(f"searched {result.candidates:,} candidates: {result.feasible:,} feasible"
                  + (f" in {result.seconds:.2f} s" if timings else "")
                  + ("" if result.proven_best else " (time limit hit: best found, not proven best)"))
    for name, count in pruned:
        console.print(f"  pruned {count:>12,}  {name}: {RULES_BY_NAME[name].message}", style="dim")


def render_validation(report: dict, console: Console) -> None:
    """Per tier and per source: cases, median / P90 absolute % error, share within 10 % and 20 %; worst cases."""
    s = report["summary"]
    table = Table(header_style="bold", title="plan validate: predicted vs measured")
    for col in ("group", "cases", "tput median", "tput P90", "<=10%", "<=20%", "mem cases", "mem median", "mem P90"):
        table.add_column(col, justify="left" if col == "group" else "right")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    for name, g in s["groups"].items():
        t, m = g["throughput"], g["memory"]
        table.add_row(name, str(t.get("cases", 0)), pct(t.get("median_ape")), pct(t.get("p90_ape")),
                      pct(t.get("within_10pct")), pct(t.get("within_20pct")), str(m.get("cases", 0)),
                      pct(m.get("median_ape")), pct(m.get("p90_ape")))
    console.print(table)
    console.print(f"{s['predicted']} of {s['cases']} cases predicted; mean Kendall tau over "
                  f"{len(s['ranking']['groups'])} ranking groups: {s['ranking']['mean_kendall_tau']}")
    rk = s["ranking"]
    if rk.get("mean_regret") is not None:
        console.print(f"regret (measured throughput lost by launching the planner's first pick instead of the "
                      f"measured best): mean {rk['mean_regret']:.1%}, worst {rk['worst_regret']['regret']:.1%} "
                      f"({rk['worst_regret']['group']})")
    worst = Table("worst cases", "tier", "throughput error", "predicted", "measured", header_style="bold")
    for w in s["worst"]:
        worst.add_row(w["id"], w["tier"], f"{w['throughput_ape']:.1%}", f"{w['predicted']:,.0f}",
                      "-" if w["measured"] is None else f"{w['measured']:,.0f}")
    console.print(worst)
    if s["not_modelled"]:
        console.print(f"not modelled ({len(s['not_modelled'])}): "
                      + "; ".join(f"{x['id']} ({x['reason']})" for x in s["not_modelled"][:8]), style="dim")


def render_models(rows: list[dict], console: Console) -> None:
    """`plan models`: one row per catalog model."""
    t = Table("name", "aliases", "params", "active", "layers", "hidden", "experts")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["aliases"]), f"{r['params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.1f}B",
                  str(r["layers"]), str(r["hidden_size"]), str(r["experts"] or "-"))
    console.print(t)


def render_clusters(catalog: dict[str, dict], console: Console) -> None:
    """`plan clusters`: one row per catalog GPU."""
    t = Table("gpu", "name", "GiB", "BF16 TF", "FP8 TF", "HBM TB/s", "NVLink GB/s", "domain", "net GB/s")
    for key, g in catalog.items():
        t.add_row(key, g["name"], f"{g['memory_gib']:g}", f"{g['bf16_tflops']:g}", f"{g.get('fp8_tflops', '-')}",
                  f"{g['hbm_tbps']:g}", f"{g['nvlink_gbps']:g}", str(g["nvlink_domain"]), f"{g['network_gbps']:g}")
    console.print(t)
    console.print("Use any count: h100x512, gb200x256, a100-40gx64. Or describe a cluster in YAML (README).")
