"""Human-readable report (rich): header, ranked plans, and what the search pruned."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.cost import flops
from planner.cost.goodput import goodput
from planner.inputs.layout import CpComm, ExpertTp, Layout, RankOrder, Recompute, Schedule, Zero
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec
from planner.report.ranking import band_line, relative_text, why_first
from planner.search.rules import RULES_BY_NAME
from planner.search.search import Plan, SearchResult, is_tight

if TYPE_CHECKING:  # rich is imported where a table is drawn: a JSON plan or a launcher never loads it
    from rich.console import Console
    from rich.table import Table

# Compact layout tokens (`tp4 pp8 v6 dp32 m1 z1 sele sp il`) so that a ranked table fits 80 columns; every
# abbreviation a table prints is explained by its legend line (LEGEND), keyed by the token's name.
_RECOMPUTE_SHORT = {Recompute.NONE: "norc", Recompute.SELECTIVE: "sele", Recompute.FULL: "full",
                    Recompute.OFFLOAD: "offl", Recompute.OFFLOAD_MODULES: "offm"}
_CP_COMM_SHORT = {CpComm.RING: "", CpComm.A2A: "u", CpComm.HYBRID: "h"}
_SCHEDULE_SHORT = {Schedule.ONE_F_ONE_B: "1f1b", Schedule.INTERLEAVED: "il", Schedule.ZB_H1: "zbh1",
                   Schedule.ZB_H2: "zbh2", Schedule.ZB_V: "zbv", Schedule.SEQ1F1B: "s1f1b",
                   Schedule.COMBINED_1F1B: "c1f1b", Schedule.DUALPIPE: "dpipe", Schedule.DUALPIPE_V: "dpipev"}
LEGEND = {
    "tp": "tp/pp/dp/cp/ep = tensor/pipeline/data/context/expert parallel size",
    "v": "v = virtual stages per pipeline rank", "m": "m = micro-batch (sequences)",
    "z": "z = ZeRO stage", "zh": "zh = HSDP (ZeRO-3 inside the NVLink domain, replicated across)",
    "cpu": "cpNu = all-to-all (Ulysses) context parallelism", "cph": "cpNh = hybrid a2a+p2p context parallelism",
    "norc": "norc = no recompute", "sele": "sele = selective recompute", "full": "full = full recompute",
    "offl": "offl = no recompute, some layers' activations offloaded to host memory",
    "offm": "offm = no recompute, attention (and expert fc1) inputs offloaded to host memory",
    "sp": "sp = sequence parallel", "1f1b": "1f1b = 1F1B schedule", "il": "il = interleaved 1F1B",
    "zbh1": "zbh1/zbh2 = zero-bubble ZB-H1/ZB-H2", "zbh2": "zbh1/zbh2 = zero-bubble ZB-H1/ZB-H2",
    "zbv": "zbv = zero-bubble ZB-V", "s1f1b": "s1f1b = Seq1F1B",
    "c1f1b": "c1f1b = combined 1F1B (EP all-to-all overlap)", "dpipe": "dpipe/dpipev = DualPipe/DualPipe-V",
    "dpipev": "dpipe/dpipev = DualPipe/DualPipe-V",
    "e1": "epNe1 = whole experts per GPU (expert tp 1, MoE parallel folding)",
    "dpo": "dpo = rank order tp-cp-ep-pp-dp: data parallelism outermost (Megatron --use-tp-pp-dp-mapping)",
    "tight": "! = tight: less than --memory-headroom free, ranked after plans with room",
}


def compact_layout(layout: Layout) -> tuple[str, set[str]]:
    """One plan's layout in a few characters ('tp4 pp8 v6 dp32 m1 z1 sele sp il') and the LEGEND keys it uses."""
    used = {"tp", "m"}
    parts = [f"tp{layout.tp}", f"pp{layout.pp}"]
    if layout.vpp > 1:
        parts.append(f"v{layout.vpp}")
        used.add("v")
    parts.append(f"dp{layout.dp}")
    if layout.cp > 1:
        suffix = _CP_COMM_SHORT[layout.cp_comm]
        parts.append(f"cp{layout.cp}{suffix}")
        if suffix:
            used.add("cp" + suffix)
    if layout.ep > 1:
        whole = layout.tp > 1 and layout.etp == ExpertTp.ONE
        parts.append(f"ep{layout.ep}" + ("e1" if whole else ""))
        if whole:
            used.add("e1")
    zero = "zh" if layout.zero == Zero.HSDP else f"z{int(layout.zero)}"
    used.add("zh" if zero == "zh" else "z")
    recompute = _RECOMPUTE_SHORT[layout.recompute]
    parts += [f"m{layout.mbs}", zero, recompute]
    used.add(recompute)
    if layout.sp and layout.tp > 1:
        parts.append("sp")
        used.add("sp")
    if layout.pp > 1 or layout.schedule == Schedule.COMBINED_1F1B:  # EP overlap pairs micro-batches at pp 1
        schedule = _SCHEDULE_SHORT[layout.schedule]
        parts.append(schedule)
        used.add(schedule)
    if layout.order == RankOrder.DP_OUTER:  # the default order prints nothing
        parts.append("dpo")
        used.add("dpo")
    return " ".join(parts), used


def tiers_text(problem: Problem) -> str | None:
    """A tiered cluster's network in a line: each tier's domain size, oversubscription and rails, innermost first,
    and the per-GPU bandwidth of the network tiers ('nvlink 8 > rack 16 > pod 3,072 > cluster 16,384 1:7;
    50 GB/s/GPU'); None for two tiers, which the cluster line states."""
    if not problem.cluster.tiered:
        return None
    tiers = problem.cluster.network_tiers()
    same = len({t.gbps for t in tiers[1:]}) == 1

    def one(i: int) -> str:
        t = tiers[i]
        return (f"{t.name} {t.size:,}" + ("" if same or not i else f" @{t.gbps:g}")
                + (f" 1:{t.oversubscription:g}" if t.oversubscription > 1 else "") + (" rails" if t.rails else ""))
    return " > ".join(one(i) for i in range(len(tiers))) + (f"; {tiers[1].gbps:g} GB/s/GPU" if same else " GB/s/GPU")


def legend(used: set[str]) -> str:
    """The legend line for the abbreviations in `used`, in LEGEND's order, each named once."""
    texts = list(dict.fromkeys(text for key, text in LEGEND.items() if key in used))
    return "legend: " + "; ".join(texts)


def what_ifs(problem: Problem) -> str | None:
    """The active what-if options, as typed on the command line (None when there are none)."""
    if not problem.compress:
        return None
    ratios = ",".join(f"{k}={v:g}" for k, v in sorted(problem.compress.items()))
    return f"--compress {ratios} (traffic / ratio, plus codec time)"


def _share(plan: Plan, key: str) -> float:
    return plan.metrics[key] / plan.metrics["step_time_s"]


def why(plan: Plan, best: Plan) -> str:
    """The component that costs this plan the most against the best one (or the best one's main overhead)."""
    names = {"bubble_s": "bubble", "tp_comm_s": "TP comm", "cp_comm_s": "CP comm", "ep_comm_s": "EP all-to-all",
             "fsdp_comm_s": "FSDP gathers", "nic_comm_s": "shared NIC", "pp_comm_s": "PP sends",
             "dp_comm_s": "DP reduce", "recompute_s": "recompute", "offload_s": "activation offload",
             "optimizer_s": "optimizer"}
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


def fitted_table(columns: list[tuple[str, str, list[str]]], optional: int, width: int) -> Table:
    """A borderless table of `columns` (header, justify, cells) that fits `width` characters: the last `optional`
    columns are kept only while the whole table still fits (a wider terminal shows more of them)."""
    def span(col: tuple[str, str, list[str]]) -> int:
        return max(len(col[0]), *(len(c) for c in col[2])) + 3  # padding each side and the column rule

    keep = len(columns) - optional
    total = sum(span(c) for c in columns[:keep])
    while keep < len(columns) and total + span(columns[keep]) <= width:
        total += span(columns[keep])
        keep += 1
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for head, justify, _ in columns[:keep]:
        table.add_column(head, justify=justify, no_wrap=head == "layout")  # type: ignore[arg-type]
    for row in zip(*(c[2] for c in columns[:keep]), strict=True):
        table.add_row(*row)
    return table


def layer_mix(m: ModelSpec) -> str:
    """Counts per layer kind, e.g. 'mixers 36 chunked_attention + 12 full_attention; MLPs 24 dense + 24 moe'."""

    def counts(kinds: tuple[str, ...]) -> str:
        return " + ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds)))
    return f"mixers {counts(m.mixer_kinds)}; MLPs {counts(m.mlp_kinds)}"


def render(result: SearchResult, console: Console, timings: bool = True) -> None:
    """The ranked plans for a terminal of `console.width` columns (80 when piped, or COLUMNS): a header naming the
    problem and every active what-if, the plans with their compact layouts, the legend, and the prune counts."""
    p = result.problem
    m, cl, tr = p.model, p.cluster, p.training
    total, active = flops.total_params(m), flops.active_params(m)
    params = f"{total / 1e9:.1f}B params" + (f", {active / 1e9:.1f}B active" if m.is_moe else "")
    console.print(f"[bold]model[/]    {m.name} ({params}, {m.num_hidden_layers} layers, hidden {m.hidden_size})")
    if m.layer_types is not None or m.mlp_layer_types is not None:  # say how a mixed config was read
        console.print(f"[bold]layers[/]   {layer_mix(m)}")
    network = tiers_text(p)
    console.print(f"[bold]cluster[/]  {cl.name}: {cl.num_gpus} x {cl.gpu.name}"
                  + ("" if network else f", NVLink {cl.nvlink_domain}, network {cl.network_gbps:g} GB/s/GPU"))
    if network:
        console.print(f"[bold]network[/]  {network}", highlight=False)
    console.print(f"[bold]training[/] {training_text(tr)}")
    what_if = what_ifs(p)
    if what_if:
        console.print(f"[bold]what-if[/]  {what_if}")
    best = result.plans[0]
    layouts = [compact_layout(plan.layout) for plan in result.plans]
    mt = [plan.metrics for plan in result.plans]
    tight = [bool(is_tight(p, x["memory_peak_gib"])) for x in mt]
    columns = [
        ("#", "right", [str(i) for i in range(1, len(result.plans) + 1)]),
        ("layout", "left", [text for text, _ in layouts]),
        ("step s", "right", [f"{x['step_time_s']:.2f}" for x in mt]),
        ("MFU", "right", [f"{x['mfu']:.1%}" for x in mt]),
        (f"GiB/{cl.gpu.memory_gib:g}", "right", [f"{x['memory_peak_gib']:.1f}" + ("!" if t else "")
                                                  for x, t in zip(mt, tight, strict=True)]),
        ("tok/s/GPU", "right", [f"{x['tokens_per_s_per_gpu']:,.0f}" for x in mt]),
        ("band", "right", [relative_text(p, plan.layout) for plan in result.plans]),
        ("comp/comm/bub", "right", [f"{_share(pl, 'compute_s'):.0%}/{_share(pl, 'exposed_comm_s'):.0%}/"
                                    f"{_share(pl, 'bubble_s'):.0%}" for pl in result.plans]),
        ("why", "left", [why(plan, best) for plan in result.plans]),
    ]
    console.print(fitted_table(columns, optional=4, width=console.width))
    console.print(band_line(p, best.layout, best.metrics), highlight=False)
    reason = why_first(result, lambda lay: compact_layout(lay)[0])
    if reason:
        console.print(reason, highlight=False)
    used = set().union(*(used for _, used in layouts)) | ({"tight"} if any(tight) else set())
    console.print(legend(used), style="dim", highlight=False)
    console.print(goodput_line(result), highlight=False)
    pruned = [(k, v) for k, v in sorted(result.pruned.items(), key=lambda kv: -kv[1]) if v]
    console.print(f"searched {result.candidates:,} candidates: {result.feasible:,} feasible"
                  + (f" in {result.seconds:.2f} s" if timings else "")
                  + ("" if result.proven_best else " (time limit hit: best found, not proven best)"))
    for name, count in pruned:
        console.print(f"  pruned {count:>12,}  {name}: {RULES_BY_NAME[name].message}", style="dim",
                      no_wrap=True, overflow="ellipsis")  # one line each; the full messages are in --format json


def goodput_line(result: SearchResult) -> str:
    """Expected goodput of the first pick and what it loses (planner.cost.goodput), and the other picks' range."""
    p = result.problem
    picks = [goodput(p, plan.metrics["step_time_s"]) for plan in result.plans]
    g = picks[0]
    if g.interval_steps == 0:
        return "goodput  100%: no failures expected (failures_per_gpu_hour 0 in the cluster file)"
    text = (f"goodput  {g.goodput:.1%} for #1: restarts cost {g.loss['restart']:.1%}, checkpoints "
            f"{g.loss['checkpoints']:.1%}, redone work {g.loss['lost_work']:.1%}")  # 80 columns; explain has the rest
    low, high = min(x.goodput for x in picks), max(x.goodput for x in picks)
    if len(picks) > 1 and high - low >= 0.0005:
        text += f"; #1-#{len(picks)} {low:.1%}-{high:.1%}"
    return text


def render_validation(report: dict, console: Console) -> None:
    """Per tier and per source: cases, median / P90 absolute % error, share within 10 % and 20 %; worst cases."""
    from rich.table import Table

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
    kn = s.get("knobs")
    if kn:
        def top(counts: dict) -> str:
            return ", ".join(f"{k} {n}" for k, n in list(counts.items())[:4])

        console.print(f"what the runs ran beyond their rows: {kn['all_resolved']} of {kn['cases']} cases "
                      f"have every cost-relevant knob resolved; {kn['on_unresolved']} rest on unresolved knobs "
                      f"({top(kn['unresolved_by_knob'])}); {kn['ran_unpriced']} ran a knob the model does not price "
                      f"({top(kn['unpriced_by_knob'])}); {kn['priced_approximately']} priced approximately "
                      f"({top(kn['approximate_by_knob'])})")
    if s["not_modelled"]:
        console.print(f"not modelled ({len(s['not_modelled'])}): "
                      + "; ".join(f"{x['id']} ({x['reason']})" for x in s["not_modelled"][:8]), style="dim")
    if s.get("not_scored"):
        console.print(f"not scored ({len(s['not_scored'])}): "
                      + "; ".join(f"{x['id']} ({x['reason']})" for x in s["not_scored"][:8]), style="dim")
    if s.get("notes"):
        console.print(f"read or priced otherwise than stated ({len(s['notes'])}): "
                      + "; ".join(f"{x['id']} ({x['note']})" for x in s["notes"][:8]), style="dim")


def render_models(rows: list[dict], console: Console) -> None:
    """`plan models`: one row per catalog model."""
    from rich.table import Table

    t = Table("name", "aliases", "params", "active", "layers", "hidden", "experts")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["aliases"]), f"{r['params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.1f}B",
                  str(r["layers"]), str(r["hidden_size"]), str(r["experts"] or "-"))
    console.print(t)


def render_clusters(catalog: dict[str, dict], console: Console) -> None:
    """`plan clusters`: one row per catalog GPU."""
    from rich.table import Table

    t = Table("gpu", "name", "GiB", "BF16 TF", "FP8 TF", "HBM TB/s", "NVLink GB/s", "domain", "net GB/s")
    for key, g in catalog.items():
        t.add_row(key, g["name"], f"{g['memory_gib']:g}", f"{g['bf16_tflops']:g}", f"{g.get('fp8_tflops', '-')}",
                  f"{g['hbm_tbps']:g}", f"{g['nvlink_gbps']:g}", str(g["nvlink_domain"]), f"{g['network_gbps']:g}")
    console.print(t)
    console.print("Use any count: h100x512, gb200x256, a100-40gx64. Or describe a cluster in YAML (docs/commands.md).")


def training_text(tr: TrainingSpec) -> str:
    """The training problem as the table header (and `explain`) print it."""
    return (f"seq_len {tr.seq_len}, global batch {tr.global_batch} ({tr.seq_len * tr.global_batch / 1e6:.2f}M tokens), "
            f"{precision_label(tr)}, {tr.framework}")


def precision_label(tr: TrainingSpec) -> str:
    """The precision as the header prints it, with what changes its price: block scales, bf16 Adam moments, token
    dropping."""
    label = tr.precision + (" blockwise" if tr.precision == "fp8" and tr.fp8_recipe == "blockwise" else "")
    label += ", bf16 moments" if tr.optimizer_moments == "bf16" else ""
    label += ", muon" if tr.optimizer == "muon" else ""
    if tr.moe_capacity_factor is not None:
        label += f", token drop at capacity {tr.moe_capacity_factor:g}x" + (" padded" if tr.moe_pad_to_capacity else "")
    label += ", forced expert balance" if tr.moe_force_balance else ""
    return label
