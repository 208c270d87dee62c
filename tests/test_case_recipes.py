"""What each published run ran (validation/case_recipes.yaml) and how `plan validate` prices and counts it."""

import copy

import pytest

from planner.errors import PlanInputError
from planner.evidence.cases import load_cases
from planner.evidence.recipes import (
    KNOB_SPECS,
    PINNED_SOURCE,
    check_ran,
    default_recipes_path,
    knob_summary,
    load_recipes,
)
from planner.evidence.validate import run_case


@pytest.fixture(scope="module")
def recipes():
    return load_recipes(default_recipes_path(None))


@pytest.fixture(scope="module")
def cases():
    return {c["id"]: c for c in load_cases(None)}


def test_every_entry_names_a_case_of_the_same_run(recipes, cases):
    assert recipes, "the knob file is shipped beside the published runs"
    for cid, entry in recipes.items():
        assert cid in cases, cid
        case = cases[cid]
        assert entry["model"] == case["model"]["name"] and entry["cluster"] == case["cluster"], cid


def test_every_knob_is_a_legal_value_with_a_pinned_source_or_unresolved_with_a_reason(recipes):
    for cid, entry in recipes.items():
        for knob, block in entry["ran"].items():
            assert knob in KNOB_SPECS, (cid, knob)
            if "unresolved" in block:
                assert str(block["unresolved"]).strip(), (cid, knob)
                continue
            assert KNOB_SPECS[knob].legal(block["value"]), (cid, knob, block["value"])
            for part in str(block["source"]).split("; "):
                assert PINNED_SOURCE.fullmatch(part.strip()), (cid, knob, part)


@pytest.mark.parametrize("ran, fragment", [
    ({"cuda_graph": {"value": "none", "source": "a/b@abcdef1:x.py#L1"}}, "unknown knob"),
    ({"cuda_graphs": {"value": "sometimes", "source": "a/b@abcdef1:x.py#L1"}}, "is not none | per-layer"),
    ({"ep_overlap": {"value": True, "source": "the recipe says so"}}, "pinned to a commit"),
    ({"ep_overlap": {"value": True, "source": "a/b@main:x.py#L1"}}, "pinned to a commit"),
    ({"recompute": {"unresolved": " "}}, "needs its reason"),
    ({"vpp": {"value": 0, "source": "a/b@abcdef1:x.py#L1"}}, "positive integer"),
    ({"moe_token_drop": {"value": "some", "source": "a/b@abcdef1:x.py#L1"}}, "dropless"),
    ({"zero": {"value": 4, "source": "a/b@abcdef1:x.py#L1"}}, "0 | 1 | 2 | 3 | hsdp"),
    ({"zero": {"value": "zero-1", "source": "a/b@abcdef1:x.py#L1"}}, "0 | 1 | 2 | 3 | hsdp"),
    ({"stack": {"value": "fairscale", "source": "a/b@abcdef1:x.py#L1"}}, "a framework name plan knows"),
    ({"schedules": {"value": ["1f1b", "gpipe"], "source": "a/b@abcdef1:x.py#L1"}}, "a list of schedule names"),
    ({"schedules": {"value": "zb-h1", "source": "a/b@abcdef1:x.py#L1"}}, "a list of schedule names"),
    ({"gpu": {"value": "h100-500w", "source": "a/b@abcdef1:x.md#L1"}}, "a GPU key of clusters/gpus.yaml"),
    ({"mtp_layers": {"value": -1, "source": "a/b@abcdef1:x.py#L1"}}, "a non-negative integer"),
    ({"pipeline_layout": {"value": "Et*2|t*2mL", "source": "a/b@abcdef1:x.py#L1"}}, "no mtp_layers is given"),
    ({"pipeline_layout": {"value": "Et*2|t*2L", "source": "a/b@abcdef1:x.py#L1"},
      "mtp_layers": {"value": 1, "source": "a/b@abcdef1:x.py#L2"}}, "places 0 MTP layer(s)"),
])
def test_bad_knob_blocks_are_one_line_errors(ran, fragment):
    with pytest.raises(PlanInputError) as err:
        check_ran(ran, "test#X")
    assert fragment in err.value.one_line()


def test_mb141_is_priced_with_the_ep_overlap_schedule_its_recipe_ran(recipes, cases):
    """Megatron-Bridge's Qwen3-235B H100 preset sets moe_a2a_overlap (overlap_moe_expert_parallel_comm and
    delay_wgrad_compute): the planner's combined 1F1B."""
    out = run_case(cases["MB-141"], "test", recipes)
    knob = out["knobs"]["ep_overlap"]
    assert knob["value"] is True and knob["status"] == "priced" and "@" in knob["source"]
    assert out["layout"]["schedule"] == "combined-1f1b"
    without = run_case(cases["MB-141"], "test", {})
    assert without["knobs"]["ep_overlap"]["status"] == "unresolved"
    assert without["layout"]["schedule"] != "combined-1f1b"


def test_summary_counts_are_computed_from_the_knobs(recipes, cases):
    ids = ("MB-141", "MB-268", "N21-001")
    full = [run_case(cases[i], "test", recipes) for i in ids]
    fewer = {k: v for k, v in recipes.items() if k != "MB-141"}
    cut = [run_case(cases[i], "test", fewer) for i in ids]
    before, after = knob_summary(full), knob_summary(cut)
    assert before["cases"] == after["cases"] == len(ids)
    assert after["on_unresolved"] == before["on_unresolved"] + 1
    assert after["unresolved_by_knob"].get("ep_overlap", 0) == before["unresolved_by_knob"].get("ep_overlap", 0) + 1
    assert after["all_resolved"] == before["all_resolved"] - 1


def test_tp_comm_overlap_is_priced_as_the_recipe_ran_it(recipes, cases):
    """MB-141 ran TP without userbuffer overlap while the nemo profile's recipes turn it on: priced with it off. With
    the case's EP overlap on its H100s the switch changes nothing (EP overlap runs with several hardware queues, where
    Hopper's TP communication no longer overlaps its GEMMs: planner.cost.tensor.SINGLE_QUEUE_GENERATIONS, and why the
    recipe turns it off); without the EP overlap, flipping it in the case's own `ran:` block makes the layout faster."""
    out = run_case(cases["MB-141"], "test", recipes)
    assert out["knobs"]["tp_comm_overlap"] == {**out["knobs"]["tp_comm_overlap"], "value": False, "status": "priced"}
    assert "tp_comm_overlap" not in knob_summary([out])["unpriced_by_knob"]
    source = {"source": "NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3e:x.py#L1"}

    def priced(**ran: bool) -> dict:
        case = copy.deepcopy(cases["MB-141"])
        case["ran"] = {knob: {"value": value, **source} for knob, value in ran.items()}
        return run_case(case, "test", recipes)

    flipped = priced(tp_comm_overlap=True, ep_overlap=True)
    assert flipped["knobs"]["tp_comm_overlap"]["status"] == "priced"
    assert flipped["predicted"]["tokens_per_s_per_gpu"] == pytest.approx(out["predicted"]["tokens_per_s_per_gpu"])
    without = priced(tp_comm_overlap=False, ep_overlap=False)["predicted"]["tokens_per_s_per_gpu"]
    assert priced(tp_comm_overlap=True, ep_overlap=False)["predicted"]["tokens_per_s_per_gpu"] > without


def test_a_knob_the_model_does_not_price_is_counted(cases):
    """The paper-era Megatron-LM has no TP overlap switch: a run said to overlap is recorded, not priced."""
    case = copy.deepcopy(cases["N21-004"])
    case["ran"] = {"tp_comm_overlap": {"value": True, "source": "NVIDIA/Megatron-LM@de7dc40f8:x.py#L1"}}
    out = run_case(case, "test", {})
    assert out["knobs"]["tp_comm_overlap"]["status"] == "not priced"
    assert knob_summary([out])["unpriced_by_knob"]["tp_comm_overlap"] == 1


def test_a_case_can_carry_its_own_ran_block(cases):
    case = copy.deepcopy(cases["MB-141"])
    case["ran"] = {"ep_overlap": {"value": False, "source": "NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3e:x.py#L1"}}
    out = run_case(case, "test", {})
    assert out["knobs"]["ep_overlap"]["status"] == "priced"
    assert out["layout"]["schedule"] != "combined-1f1b"


def test_an_entry_for_another_run_is_not_applied(recipes, cases):
    case = copy.deepcopy(cases["MB-141"])
    case["cluster"] = "h100x512"
    out = run_case(case, "test", recipes)
    assert out["knobs"]["ep_overlap"]["status"] == "unresolved"


def test_stated_knobs_come_from_the_row(recipes, cases):
    out = run_case(cases["N21-004"], "test", recipes)
    assert out["knobs"]["recompute"] == {"value": "full", "source": "stated by the case", "status": "stated"}


def test_dgxc066_is_priced_with_the_distributed_optimizer_its_recipe_ran(recipes, cases):
    """The DGX Cloud Nemotron-4 340B fp8 row ran NeMo 1's distributed_fused_adam with a contiguous gradient buffer
    (ZeRO-1) under NeMo (the `stack` knob): with the knobs the case is priced at zero 1; read as an unnamed stack and
    left to the search, the row's unstated zero becomes ZeRO-3, whose per-micro-batch parameter gathers price it far
    slower than it ran."""
    out = run_case(cases["DGXC-066"], "test", recipes)
    knob = out["knobs"]["zero"]
    assert knob["value"] == 1 and knob["status"] == "priced" and "@" in knob["source"]
    assert out["layout"]["zero"] == 1 and out["knobs"]["stack"]["value"] == "nemo"
    entry = copy.deepcopy(recipes["DGXC-066"])
    del entry["ran"]["zero"], entry["ran"]["stack"]
    without = run_case(cases["DGXC-066"], "test", {"DGXC-066": entry})
    assert without["knobs"]["zero"]["status"] == "unresolved"
    assert without["layout"]["zero"] != 1
    assert out["error"]["throughput"] < without["error"]["throughput"]


def test_a_zero_the_row_states_is_stated(recipes, cases):
    """A row that states its sharding (llm-foundry FSDP) needs no knob-file entry for it."""
    case = next(c for cid, c in cases.items() if cid.startswith("LF-") and c["layout"].get("zero") is not None)
    out = run_case(case, "test", recipes)
    assert out["knobs"]["zero"]["status"] == "stated"
    assert all("zero" not in e["ran"] for cid, e in recipes.items() if cases[cid]["layout"].get("zero") is not None)


def test_zero_is_relevant_only_where_data_ranks_may_shard(cases):
    """No data or context parallelism: nothing to shard, so no zero knob (Zero Bubble rows run dp 1)."""
    out = run_case(cases["ZB-001"], "test", {})
    assert "zero" not in out["knobs"]


def test_mb141_is_priced_with_the_alltoall_dispatcher_its_recipe_ran(recipes, cases):
    """Megatron-Bridge's Qwen3-235B H100 preset keeps Megatron-Core's alltoall dispatcher (no flex backend), while the
    nemo profile's default is DeepEP: the run's dispatcher is priced, and over 4 nodes of EP 32 the alltoall, sending
    every routed copy, exposes more all-to-all time than the node-deduplicated flex dispatch would."""
    out = run_case(cases["MB-141"], "test", recipes)
    knob = out["knobs"]["moe_dispatcher"]
    assert knob["value"] == "alltoall" and knob["status"] == "priced"
    flex = copy.deepcopy(recipes)
    flex["MB-141"]["ran"]["moe_dispatcher"] = {**flex["MB-141"]["ran"]["moe_dispatcher"], "value": "flex-deepep"}
    deduplicated = run_case(cases["MB-141"], "test", flex)
    assert deduplicated["knobs"]["moe_dispatcher"]["status"] == "priced"
    assert out["predicted"]["tokens_per_s_per_gpu"] < 0.95 * deduplicated["predicted"]["tokens_per_s_per_gpu"]


def test_grok_rows_are_priced_with_the_expert_tp_their_megatron_core_ran(recipes, cases):
    """The DGX Cloud Grok-1 recipes (NeMo 24.09-24.12) leave expert_tensor_parallel_size unset, so Megatron-Core splits
    the experts over the TP group (its default): priced so, the row is slower than with the experts unsplit (etp 1,
    which the search would pick); and an expert TP that is neither 1 nor TP is recorded, not priced."""
    out = run_case(cases["DGXC-105"], "test", recipes)
    knob = out["knobs"]["expert_tp"]
    assert knob["value"] == 4 and knob["status"] == "priced" and "@" in knob["source"]
    assert out["layout"]["expert_tp"] == 4
    unsplit = copy.deepcopy(recipes)
    unsplit["DGXC-105"]["ran"]["expert_tp"] = {**unsplit["DGXC-105"]["ran"]["expert_tp"], "value": 1}
    folded = run_case(cases["DGXC-105"], "test", unsplit)
    assert folded["layout"]["expert_tp"] == 1
    assert out["predicted"]["tokens_per_s_per_gpu"] < folded["predicted"]["tokens_per_s_per_gpu"]
    odd = run_case(cases["DGXC-242"], "test", recipes)["knobs"]["expert_tp"]
    assert odd["value"] == 8 and odd["status"] == "not priced"


def test_narayanan_zero3_rows_are_priced_and_ranked_as_the_deepspeed_runs_they_were(recipes, cases):
    """Table 2's ZeRO-3 rows ran DeepSpeed beside Megatron's PTD-P rows: with the recipe's `stack` they are priced
    with the megatron-deepspeed profile (no longer breaking Megatron's no-ZeRO-3 rule) and fall in their own ranking
    group; without it they are Megatron rows, in one group with PTD-P."""
    from planner.evidence.validate import ranking_groups
    ids = ("N21-016", "N21-022")
    ran = [run_case(cases[i], "test", recipes) for i in ids]
    assert ran[0]["knobs"]["stack"]["status"] == "priced"
    assert [r["regime"]["stack"] for r in ran] == ["megatron-deepspeed", "megatron"]
    assert ranking_groups([cases[i] for i in ids], ran) == []
    bare = [run_case(cases[i], "test", {}) for i in ids]
    assert [r["regime"]["stack"] for r in bare] == ["megatron", "megatron"]
    assert len(ranking_groups([cases[i] for i in ids], bare)) == 1
    # the DeepSpeed profile's kernel rate is lower than paper-era Megatron's: the same layout prices slower
    assert ran[0]["predicted"]["tokens_per_s_per_gpu"] < bare[0]["predicted"]["tokens_per_s_per_gpu"]


def test_zero_bubble_rows_rank_their_codebase_schedules_as_standard(recipes, cases):
    """The Zero Bubble paper ran its own fork, whose standard schedules include ZB-1p/2p: the `schedule` preference
    does not hold them against the layout there, while for plain Megatron it does."""
    out = run_case(cases["ZB-044"], "test", recipes)
    assert out["layout"]["schedule"] == "zb-h2"
    assert out["knobs"]["schedules"]["status"] == "priced"
    assert out["preference"]["schedule"] == 0
    bare = run_case(cases["ZB-044"], "test", {})
    assert bare["preference"]["schedule"] == 1
    assert bare["predicted"] == out["predicted"]  # ranking only: the price is the same


def test_forced_expert_balance_is_priced_at_the_mean_load(recipes, cases):
    """The benchmark rows force balanced routing (Megatron-Core moe_router_force_load_balancing): every rank carries
    the mean, whatever the fitted imbalance of learned routing; the same dropless run routing for real is slower
    as soon as that imbalance is above 1."""
    from dataclasses import replace

    from planner.cost import fitted

    out = run_case(cases["MB-141"], "test", recipes)
    assert out["knobs"]["moe_force_balance"]["status"] == "priced"
    case = copy.deepcopy(cases["MB-141"])
    case["ran"] = {"moe_force_balance": {"value": False, "source": "NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3e:x.py#L1"}}
    with fitted.using(replace(fitted.shipped(), expert_imbalance=1.2)):
        forced = run_case(cases["MB-141"], "test", recipes)["predicted"]["tokens_per_s_per_gpu"]
        learned = run_case(case, "test", recipes)["predicted"]["tokens_per_s_per_gpu"]
    assert forced == out["predicted"]["tokens_per_s_per_gpu"]
    assert learned < 0.97 * forced


def test_a_schedule_the_row_leaves_open_is_one_its_codebase_ships(recipes, cases):
    """DGX Cloud's DeepSeek-V3 GB200 row (NeMo 25.04) states no schedule; the Megatron-Core it ran offers 1F1B and
    interleaved only, so validate searches those (it used to pick ZB-2p, and dropped every recipe knob when 1F1B
    was pruned as dominated by a ZB-H1 the run could not choose)."""
    out = run_case(cases["DGXC-213"], "test", recipes)
    assert out["knobs"]["schedules"]["status"] == "priced"
    assert out["layout"]["schedule"] in ("1f1b", "interleaved")
    assert "note" not in out  # priced with its knobs, not without them
    bare = run_case(cases["DGXC-213"], "test", {})
    assert "schedules" not in bare["knobs"]  # without the knob file every schedule the stack has is searched


def test_1f1b_is_not_pruned_as_dominated_by_a_schedule_the_problem_cannot_choose():
    """dominated_1f1b prunes 1F1B only where ZB-H1 may be chosen instead."""
    from dataclasses import replace

    from planner.inputs.catalog import load_cluster, load_model
    from planner.inputs.layout import Schedule
    from planner.inputs.problem import Problem
    from planner.inputs.specs import TrainingSpec
    from planner.search.search import search

    p = Problem(load_model("llama3-8b"), load_cluster("h100x16"), TrainingSpec(seq_len=8192, global_batch=64),
                fixed={"pp": 2, "vpp": 1, "tp": 1})
    free = search(p, top=1, rank_by="time").plans[0].layout
    assert free.schedule != Schedule.ONE_F_ONE_B  # ZB-H1 or better dominates it in the generic stack
    only = replace(p, schedule_choices=(int(Schedule.ONE_F_ONE_B), int(Schedule.INTERLEAVED)))
    assert search(only, top=1, rank_by="time").plans[0].layout.schedule == Schedule.ONE_F_ONE_B


def test_context_parallel_exchange_is_what_the_code_of_the_period_ran(recipes, cases):
    """NeMo 24.03.01's Megatron-Core has no --cp-comm-type: its context parallelism is Transformer Engine's p2p ring,
    which the knob file says (`cp_comm: ring`); left to the search, the 128K row picks the hierarchical a2a+p2p that
    came later."""
    out = run_case(cases["NEMO-018"], "test", recipes)
    assert out["knobs"]["cp_comm"]["status"] == "priced" and out["layout"]["cp_comm"] == "ring"
    assert "cp-a2a" not in out["regime"]["features"]
    bare = run_case(cases["NEMO-018"], "test", {})
    assert bare["layout"]["cp_comm"] != "ring"
    assert bare["predicted"]["tokens_per_s_per_gpu"] > out["predicted"]["tokens_per_s_per_gpu"]


@pytest.mark.parametrize("cid", ["MB-009", "MB-019", "MB-040", "MB-044", "MB-052"])
def test_full_iteration_graph_rows_carry_the_kernels_their_presets_set(recipes, cases, cid):
    """Megatron-Bridge's full-iteration graph presets also run the CuTe DSL fused grouped MLP and fp8 attention, and
    pad each rank's experts to 1.5x its mean load (scripts/performance: cutedsl_fused_grouped_mlp,
    fp8_dot_product_attention, set_full_iter_cg_configs). The cost model has no rate for the fused MLP and the
    padding: each is recorded with its source and counted as not priced, and the price is the one without them. fp8
    attention is priced at the bf16 rate, but it runs attention sinks on cuDNN's unified engine, so it is applied
    (TrainingSpec.attention_kernel fp8) and changes the price of the model with sinks (gpt-oss, MB-044) only."""
    out = run_case(cases[cid], "test", recipes)
    knobs = out["knobs"]
    assert knobs["cuda_graphs"]["value"] == "full-iteration"
    for knob in ("fused_expert_mlp", "moe_rank_capacity"):
        assert knobs[knob]["status"] == "not priced" and "Megatron-Bridge@" in knobs[knob]["source"]
        assert knobs[knob]["reason"]
    assert knobs["fp8_attention"]["status"] == "priced" and "Megatron-Bridge@" in knobs["fp8_attention"]["source"]
    assert knobs["moe_rank_capacity"]["value"] == 1.5
    bare = copy.deepcopy(recipes[cid])
    for knob in ("fused_expert_mlp", "moe_rank_capacity"):
        del bare["ran"][knob]
    assert run_case(cases[cid], "test", {cid: bare})["predicted"] == out["predicted"]
    del bare["ran"]["fp8_attention"]
    bf16_attention = run_case(cases[cid], "test", {cid: bare})["predicted"]["tokens_per_s_per_gpu"]
    if cid == "MB-044":  # gpt-oss: bf16 sink attention computes every score tile
        assert bf16_attention < 0.9 * out["predicted"]["tokens_per_s_per_gpu"]
    else:
        assert bf16_attention == out["predicted"]["tokens_per_s_per_gpu"]


def test_kernel_knobs_that_are_off_are_what_the_model_assumes(cases):
    case = copy.deepcopy(cases["MB-046"])
    src = "NVIDIA-NeMo/Megatron-Bridge@fcbb60311:x.py#L1"
    case["ran"] = {"fused_expert_mlp": {"value": False, "source": src},
                   "moe_rank_capacity": {"value": 1, "source": src}}
    knobs = run_case(case, "test", {})["knobs"]
    assert knobs["fused_expert_mlp"]["status"] == knobs["moe_rank_capacity"]["status"] == "assumed"


def test_a_rank_capacity_below_one_is_a_one_line_error():
    with pytest.raises(PlanInputError, match="moe_rank_capacity"):
        check_ran({"moe_rank_capacity": {"value": 0.5, "source": "NVIDIA-NeMo/Megatron-Bridge@fcbb60311:x.py#L1"}},
                  "test")


def test_mla_on_blackwell_before_transformer_engine_2_5_runs_unfused_attention(recipes, cases):
    """DGX Cloud's DeepSeek-V3 GB200 row ran the NeMo 25.04.01 container, whose Transformer Engine (2.1-2.4) has no
    fused attention for MLA's 192-wide query/key heads on Blackwell: the knob file says so with its sources, and
    validate prices the unfused path (slower, the s x s scores kept unless recomputed)."""
    out = run_case(cases["DGXC-213"], "test", recipes)
    knob = out["knobs"]["attention_kernel"]
    assert knob["status"] == "priced" and knob["value"] == "unfused" and "TransformerEngine@" in knob["source"]
    bare = copy.deepcopy(recipes["DGXC-213"])
    del bare["ran"]["attention_kernel"]
    fused = run_case(cases["DGXC-213"], "test", {"DGXC-213": bare})
    assert out["predicted"]["tokens_per_s_per_gpu"] < 0.9 * fused["predicted"]["tokens_per_s_per_gpu"]


def test_torchtitan_h100_rows_are_priced_on_the_gpus_they_ran(recipes, cases):
    """torchtitan's H100 benchmarks ran on Grand Teton H100s (96 GB HBM2e at 2.4 TB/s, 500 W, a peak its authors put
    between SXM and NVL): the `gpu` knob prices them there, slower than on the catalog's 700 W H100, and leaves the
    cluster's size and network as the case states them."""
    from planner.inputs.catalog import load_gpu

    gt = load_gpu("h100-hbm2e-500w", "test")
    nvl, sxm = 835, 989  # H100 NVL and SXM dense BF16 (datasheets)
    assert nvl < gt.bf16_tflops < sxm and gt.hbm_tbps == 2.4
    on_gt = run_case(cases["TT-001"], "test", recipes)
    assert on_gt["knobs"]["gpu"] == {**on_gt["knobs"]["gpu"], "value": "h100-hbm2e-500w", "status": "priced"}
    bare = copy.deepcopy(recipes)
    del bare["TT-001"]["ran"]["gpu"]
    on_catalog = run_case(cases["TT-001"], "test", bare)
    assert "gpu" not in on_catalog["knobs"]
    slower = on_catalog["predicted"]["tokens_per_s_per_gpu"] / on_gt["predicted"]["tokens_per_s_per_gpu"]
    assert 1.05 < slower < sxm / nvl + 0.05
    assert on_gt["layout"] == on_catalog["layout"]


def test_deepseek_rows_train_the_mtp_module_their_layouts_place(recipes, cases):
    """Every DeepSeek-V3 recipe whose pipeline layout places an MTP layer (m) states the MTP module it trained (the
    case's model block states none; Megatron-Core asserts the layout's count), and validate prices it: MB-266's layout
    ('Et|(tt|)*30mL') gives its last rank the MTP block and a second LM-head pass on top of its own head, so the row
    is priced slower with it than without."""
    placed = [cid for cid, e in recipes.items() if "m" in str((e["ran"].get("pipeline_layout") or {}).get("value", ""))]
    assert len(placed) >= 9
    for cid in placed:
        assert recipes[cid]["ran"]["mtp_layers"]["value"] == 1, cid
    out = run_case(cases["MB-266"], "test", recipes)
    assert out["knobs"]["mtp_layers"]["status"] == "priced"
    bare = copy.deepcopy(recipes["MB-266"])
    del bare["ran"]["mtp_layers"]  # the same layout, priced as if the run had trained no MTP module
    without = run_case(cases["MB-266"], "test", {"MB-266": bare})
    assert "mtp_layers" not in without["knobs"]
    assert out["predicted"]["tokens_per_s_per_gpu"] < 0.95 * without["predicted"]["tokens_per_s_per_gpu"]


def test_dgx_cloud_nemo_rows_are_priced_as_the_nemo_stack_they_ran(recipes, cases):
    """DGX Cloud's benchmark rows name no framework (`other`), but their launch scripts run NeMo (NeMo 1's
    megatron_gpt_pretraining.py or NeMo 2's performance scripts): every such row carries `stack: nemo`, and the
    MaxText rows keep the unnamed stack."""
    nemo = [cid for cid, e in recipes.items() if cid.startswith("DGXC") and "stack" in e["ran"]]
    assert len(nemo) >= 56 and all(recipes[c]["ran"]["stack"]["value"] == "nemo" for c in nemo)
    for cid in nemo:
        assert "dgxc-benchmarking@" in recipes[cid]["ran"]["stack"]["source"], cid
    maxtext = [cid for cid, e in recipes.items() if cid.startswith("DGXC") and "maxtext" in e["recipe"].lower()]
    assert maxtext and not any("stack" in recipes[c]["ran"] for c in maxtext)
    out = run_case(cases["DGXC-230"], "test", recipes)
    assert out["knobs"]["stack"]["status"] == "priced" and out["regime"]["stack"] == "nemo"
