"""Launcher renderers (planner.report.launchers): exact flag/key spelling, refusals, and that each output loads.

Plan documents are written by hand here (docs/plan-schema.md shape) so the tests do not depend on the planner.
Golden files: tests/golden/launchers/; regenerate with PLAN_UPDATE_GOLDEN=1 and read the diff before committing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from planner.errors import PlanInputError
from planner.report.launchers import FORMATS, render

tomllib = pytest.importorskip("tomllib")  # stdlib from Python 3.11; the project also supports 3.10

GOLDEN = Path(__file__).parent / "golden" / "launchers"
BASH = shutil.which("bash")


def llama70_doc() -> dict:
    """llama3-70b on 512 H100s; rank 1 is tp8 pp4 vpp5 interleaved, rank 2 tp8 pp8 1F1B with full recompute."""
    return {
        "schema_version": 1,
        "planner_version": "0.1.0",
        "inputs": {
            "model": {"name": "llama3-70b", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                      "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                      "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 131072,
                      "num_local_experts": 0, "num_experts_per_tok": 0, "moe_intermediate_size": 0,
                      "n_shared_experts": 0, "first_k_dense_replace": 0},
            "cluster": {"name": "h100x512", "num_gpus": 512, "gpus_per_node": 8, "nvlink_domain": 8,
                        "network_gbps": 50.0, "network_latency_us": 5.0, "oversubscription": 1.0,
                        "gpu": {"key": "h100", "memory_gb": 80, "bf16_tflops": 989}},
            "training": {"seq_len": 8192, "global_batch": 512, "precision": "bf16", "framework": "megatron"},
            "options": {"fix": {"tp": 8}, "top": 2, "allow_tp_across_nodes": False},
        },
        "plans": [
            {"rank": 1,
             "layout": {"tp": 8, "pp": 4, "dp": 16, "cp": 1, "ep": 1, "vpp": 5, "micro_batch": 1,
                        "num_microbatches": 32, "zero": 1, "recompute": "selective", "sequence_parallel": True,
                        "schedule": "interleaved"},
             "metrics": {"step_time_s": 9.81, "mfu": 0.41}},
            {"rank": 2,
             "layout": {"tp": 8, "pp": 8, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1,
                        "num_microbatches": 64, "zero": 1, "recompute": "full", "sequence_parallel": True,
                        "schedule": "1f1b"},
             "metrics": {"step_time_s": 10.5, "mfu": 0.38}},
        ],
        "search": {"candidates": 1000, "feasible": 20, "seconds": 0.1, "proven_best": True},
    }


def moe_doc() -> dict:
    """DeepSeek-V3-like MoE (MLA, 3 dense layers, shared expert) on 1024 H100s, fp8, uneven 5/8 first/last stages."""
    return {
        "schema_version": 1,
        "planner_version": "0.1.0",
        "inputs": {
            "model": {"name": "deepseek-v3", "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
                      "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
                      "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 163840,
                      "num_local_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                      "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
            "cluster": {"name": "h100x1024", "num_gpus": 1024, "gpus_per_node": 8, "nvlink_domain": 8},
            "training": {"seq_len": 4096, "global_batch": 8192, "precision": "fp8", "framework": "megatron"},
            "options": {},
        },
        "plans": [
            {"rank": 1,
             "layout": {"tp": 2, "pp": 8, "dp": 64, "cp": 1, "ep": 64, "vpp": 1, "micro_batch": 1,
                        "num_microbatches": 128, "zero": 1, "recompute": "full", "sequence_parallel": True,
                        "schedule": "1f1b", "first_stage_layers": 5, "last_stage_layers": 8}},
        ],
    }


def zero3_doc() -> dict:
    """llama3-8b on 64 H100s, pure data parallel with ZeRO-3, no pipeline, no recompute."""
    doc = llama70_doc()
    doc["inputs"]["model"].update(name="llama3-8b", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                  num_attention_heads=32, max_position_embeddings=8192)
    doc["inputs"]["cluster"].update(name="h100x64", num_gpus=64)
    doc["inputs"]["training"]["global_batch"] = 256
    doc["plans"] = [
        {"rank": 1,
         "layout": {"tp": 1, "pp": 1, "dp": 64, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1, "num_microbatches": 4,
                    "zero": 3, "recompute": "none", "sequence_parallel": False, "schedule": "1f1b"}},
    ]
    return doc


def layout(doc: dict, rank: int = 1) -> dict:
    return doc["plans"][rank - 1]["layout"]


def megatron_args(text: str) -> list[str]:
    """The argv a bash script gets from `eval "ARGS=($(cat FILE))"` (comment lines drop out inside the array)."""
    if BASH is None:
        pytest.skip("bash not available")
    script = 'eval "ARGS=($(cat))"; printf "%s\\0" "${ARGS[@]}"'
    out = subprocess.run([BASH, "-c", script], input=text, capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def flag_value(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} appears {args.count(flag)} times"
    return args[args.index(flag) + 1]


def nemo_items(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    items = dict(line.split("=", 1) for line in lines)
    assert len(items) == len(lines), "duplicate override keys"
    return items


def toml_of(text: str) -> dict:
    return tomllib.loads(text)


# ---------------------------------------------------------------- common behaviour


def test_formats_tuple() -> None:
    assert FORMATS == ("megatron", "torchtitan", "deepspeed", "nemo", "env")


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_is_deterministic_and_newline_terminated(fmt: str) -> None:
    doc = zero3_doc() if fmt == "deepspeed" else llama70_doc()
    first = render(doc, fmt)
    assert first == render(json.loads(json.dumps(doc)), fmt)
    assert first.endswith("\n") and not first.endswith("\n\n")


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "nemo", "env", "deepspeed"])
def test_header_names_version_model_cluster_and_target(fmt: str) -> None:
    doc = zero3_doc() if fmt == "deepspeed" else llama70_doc()
    first = render(doc, fmt).splitlines()[0]
    assert first.startswith("# plan 0.1.0 | " + ("llama3-8b on h100x64 " if fmt == "deepspeed" else
                                                 "llama3-70b on h100x512 "))
    target = {"megatron": "Megatron-LM core_v0.15 / main 2026-08", "torchtitan": "torchtitan v0.2.2",
              "nemo": "Megatron-Bridge 2026-08", "env": "shell variables", "deepspeed": "DeepSpeed 0.19"}[fmt]
    assert target in first


def test_rank_selects_plan() -> None:
    args = megatron_args(render(llama70_doc(), "megatron", rank=2))
    assert flag_value(args, "--pipeline-model-parallel-size") == "8"
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    assert "plan rank 2 of 2" in render(llama70_doc(), "env", rank=2)


@pytest.mark.parametrize("rank", [0, 3, -1])
def test_missing_rank_is_refused(rank: int) -> None:
    with pytest.raises(PlanInputError) as err:
        render(llama70_doc(), "env", rank=rank)
    assert err.value.field == "rank"
    assert "1..2" in err.value.message


def test_unknown_format_is_refused() -> None:
    with pytest.raises(PlanInputError) as err:
        render(llama70_doc(), "slurm")
    assert err.value.field == "format"


def test_inconsistent_batch_is_refused() -> None:
    doc = llama70_doc()
    layout(doc)["num_microbatches"] = 16
    with pytest.raises(PlanInputError, match="inconsistent"):
        render(doc, "env")


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "nemo"])
def test_open_stage_split_is_refused_but_env_renders(fmt: str) -> None:
    doc = moe_doc()  # 61 layers over pp = 8 with no first/last stage sizes: the split is left open
    doc["inputs"]["training"]["precision"] = "bf16"
    del layout(doc)["first_stage_layers"], layout(doc)["last_stage_layers"]
    with pytest.raises(PlanInputError, match="do not split evenly over pp=8") as err:
        render(doc, fmt)
    assert err.value.field == "plans[0].layout.pp"
    assert "FIRST_STAGE_LAYERS" not in render(doc, "env")


def test_missing_key_names_the_field() -> None:
    doc = llama70_doc()
    del layout(doc)["zero"]
    with pytest.raises(PlanInputError) as err:
        render(doc, "megatron")
    assert err.value.field == "plans[0].layout.zero"


# ---------------------------------------------------------------- Megatron-LM


def test_megatron_flags_for_70b() -> None:
    text = render(llama70_doc(), "megatron")
    args = megatron_args(text)
    assert args[0] == "--tensor-model-parallel-size" and not any(arg.startswith("#") for arg in args)
    assert flag_value(args, "--tensor-model-parallel-size") == "8"
    assert flag_value(args, "--pipeline-model-parallel-size") == "4"
    assert flag_value(args, "--context-parallel-size") == "1"
    assert flag_value(args, "--num-virtual-stages-per-pipeline-rank") == "5"
    assert flag_value(args, "--micro-batch-size") == "1"
    assert flag_value(args, "--global-batch-size") == "512"
    assert flag_value(args, "--seq-length") == "8192"
    assert flag_value(args, "--num-layers") == "80"
    assert flag_value(args, "--hidden-size") == "8192"
    assert flag_value(args, "--ffn-hidden-size") == "28672"
    assert flag_value(args, "--num-attention-heads") == "64"
    assert flag_value(args, "--num-query-groups") == "8"
    assert flag_value(args, "--recompute-granularity") == "selective"
    for flag in ("--sequence-parallel", "--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights",
                 "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather", "--bf16"):
        assert flag in args
    # Selective recompute forbids method/num-layers; the VPP flag that does not exist must never appear.
    for flag in ("--recompute-method", "--recompute-num-layers", "--virtual-pipeline-model-parallel-size",
                 "--use-megatron-fsdp", "--num-experts", "--fp8-format"):
        assert flag not in args
    assert "\n# env: export CUDA_DEVICE_MAX_CONNECTIONS=1 " in text


def test_megatron_full_recompute() -> None:
    args = megatron_args(render(llama70_doc(), "megatron", rank=2))
    assert flag_value(args, "--recompute-granularity") == "full"
    assert flag_value(args, "--recompute-method") == "uniform"
    assert flag_value(args, "--recompute-num-layers") == "1"


def test_megatron_moe_fp8_uneven() -> None:
    text = render(moe_doc(), "megatron")
    args = megatron_args(text)
    assert flag_value(args, "--expert-model-parallel-size") == "64"
    assert flag_value(args, "--expert-tensor-parallel-size") == "2"
    assert flag_value(args, "--num-experts") == "256"
    assert flag_value(args, "--moe-router-topk") == "8"
    assert flag_value(args, "--moe-ffn-hidden-size") == "2048"
    assert flag_value(args, "--moe-shared-expert-intermediate-size") == "2048"
    assert flag_value(args, "--moe-layer-freq") == "([0]*3+[1]*58)"  # shell-quoted in the text, one argv word
    # EP 64 x expert TP 2 leaves the 8-GPU node: node-deduplicated DeepEP dispatch through the flex dispatcher
    assert flag_value(args, "--moe-token-dispatcher-type") == "flex"
    assert flag_value(args, "--moe-flex-dispatcher-backend") == "deepep"
    assert flag_value(args, "--decoder-first-pipeline-num-layers") == "5"
    assert flag_value(args, "--decoder-last-pipeline-num-layers") == "8"
    assert flag_value(args, "--kv-lora-rank") == "512"
    assert "--multi-latent-attention" in args and "--kv-channels" not in args
    assert flag_value(args, "--fp8-format") == "hybrid"
    assert flag_value(args, "--fp8-recipe") == "delayed"
    assert "--bf16" in args and "--fp8-param-gather" in args
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in text


def test_megatron_zero3_uses_megatron_fsdp() -> None:
    text = render(zero3_doc(), "megatron")
    args = megatron_args(text)
    assert "--use-megatron-fsdp" in args
    assert flag_value(args, "--data-parallel-sharding-strategy") == "optim_grads_params"
    assert flag_value(args, "--ckpt-format") == "fsdp_dtensor"
    assert "--use-distributed-optimizer" in args and "--no-gradient-accumulation-fusion" in args
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text and "unset" in text
    assert "--sequence-parallel" not in args  # tp = 1


def test_megatron_zero2_strategy_and_zero0_plain_ddp() -> None:
    doc = zero3_doc()
    layout(doc)["zero"] = 2
    assert flag_value(megatron_args(render(doc, "megatron")), "--data-parallel-sharding-strategy") == "optim_grads"
    layout(doc)["zero"] = 0
    args = megatron_args(render(doc, "megatron"))
    assert "--overlap-grad-reduce" in args
    assert not {"--use-distributed-optimizer", "--overlap-param-gather", "--use-megatron-fsdp"} & set(args)


@pytest.mark.parametrize("fmt", ["megatron", "nemo"])
@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2"])
def test_megatron_core_refuses_zero_bubble(fmt: str, schedule: str) -> None:
    doc = llama70_doc()
    layout(doc)["schedule"] = schedule
    with pytest.raises(PlanInputError, match=f"no {schedule} pipeline schedule") as err:
        render(doc, fmt)
    assert err.value.field == "plans[0].layout.schedule"


@pytest.mark.parametrize("fmt", ["megatron", "nemo"])
def test_megatron_core_refuses_interleaving_with_bad_microbatch_count(fmt: str) -> None:
    doc = llama70_doc()
    doc["inputs"]["training"]["global_batch"] = 96  # 6 microbatches per replica: not a multiple of pp = 4
    layout(doc)["num_microbatches"] = 6
    with pytest.raises(PlanInputError, match="multiple of pp=4"):
        render(doc, fmt)


def test_megatron_refuses_kv_heads_not_divisible_by_tp() -> None:
    doc = llama70_doc()
    doc["inputs"]["model"]["num_key_value_heads"] = 4
    with pytest.raises(PlanInputError, match="key/value heads"):
        render(doc, "megatron")


# ---------------------------------------------------------------- torchtitan


def test_torchtitan_toml_for_70b() -> None:
    config = toml_of(render(llama70_doc(), "torchtitan"))
    par = config["parallelism"]
    assert par["data_parallel_shard_degree"] == 16 and par["data_parallel_replicate_degree"] == 1
    assert par["tensor_parallel_degree"] == 8
    assert par["pipeline_parallel_degree"] == 4
    assert par["context_parallel_degree"] == 1
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_microbatch_size"] == 1
    assert par["enable_async_tensor_parallel"] is False
    assert par["fsdp_reshard_after_forward"] == "never"
    # 80 layers / (4 ranks x 5 virtual stages), with embedding and output not counted as layers.
    assert par["pipeline_parallel_layers_per_stage"] == 4
    assert par["pipeline_parallel_first_stage_less_layers"] == 0 == par["pipeline_parallel_last_stage_less_layers"]
    assert "expert_parallel_degree" not in par
    train = config["training"]
    # With PP, the local batch carries all 32 pipeline microbatches and there is no gradient accumulation.
    assert (train["local_batch_size"], train["global_batch_size"], train["seq_len"]) == (32, 512, 8192)
    assert train["global_batch_size"] == train["local_batch_size"] * par["data_parallel_shard_degree"]
    assert config["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert "quantize" not in config


def test_torchtitan_zero3_without_pipeline() -> None:
    config = toml_of(render(zero3_doc(), "torchtitan"))
    par = config["parallelism"]
    assert par["data_parallel_shard_degree"] == 64 and par["fsdp_reshard_after_forward"] == "always"
    assert par["pipeline_parallel_degree"] == 1 and "pipeline_parallel_schedule" not in par
    assert config["training"]["local_batch_size"] == 1  # 4 microbatches accumulated by torchtitan
    assert config["activation_checkpoint"] == {"mode": "none"}


def test_torchtitan_uneven_moe_stages() -> None:
    doc = moe_doc()
    doc["inputs"]["training"]["precision"] = "bf16"
    par = toml_of(render(doc, "torchtitan"))["parallelism"]
    parts = par["module_fqns_per_model_part"]
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [5, 8, 8, 8, 8, 8, 8, 8]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert [name for part in parts for name in part if name.startswith("layers.")] == [f"layers.{i}" for i in range(61)]
    assert par["pipeline_parallel_schedule"] == "1F1B" and "pipeline_parallel_layers_per_stage" not in par
    assert par["expert_parallel_degree"] == 64 and par["expert_tensor_parallel_degree"] == 2


def test_torchtitan_float8() -> None:
    doc = llama70_doc()
    doc["inputs"]["training"].update(precision="fp8", torch_compile=True)
    config = toml_of(render(doc, "torchtitan"))
    assert config["model"]["converters"] == ["quantize.linear.float8"]
    assert config["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] is True
    assert config["compile"] == {"enable": True, "components": ["model", "loss"]}


@pytest.mark.parametrize(("compiled", "async_tp"), [(True, True), (True, False), (False, False)])
def test_torchtitan_compile_and_async_tp_follow_the_plan(compiled: bool, async_tp: bool) -> None:
    """[compile] and async TP are written as the plan priced them, whatever the model's own train_configs say."""
    doc = llama70_doc()
    doc["inputs"]["training"].update(torch_compile=compiled, tp_comm_overlap=async_tp)
    text = render(doc, "torchtitan")
    config = toml_of(text)
    assert config["compile"]["enable"] is compiled
    assert config["parallelism"]["enable_async_tensor_parallel"] is async_tp
    from planner.inputs.launch_readers.torchtitan import read

    back = read(text, "plan.toml")
    assert (back.torch_compile, back.tp_comm_overlap) == (compiled, async_tp)


def test_torchtitan_zero_bubble_h1_with_virtual_stages() -> None:
    doc = llama70_doc()
    layout(doc)["schedule"] = "zb-h1"
    assert toml_of(render(doc, "torchtitan"))["parallelism"]["pipeline_parallel_schedule"] == "InterleavedZeroBubble"


@pytest.mark.parametrize(("schedule", "vpp"), [("zb-h2", 5), ("zb-h1", 1), ("zb-h2", 1)])
def test_torchtitan_refuses_unmatched_zero_bubble(schedule: str, vpp: int) -> None:
    doc = llama70_doc()
    layout(doc).update(schedule=schedule, vpp=vpp)
    with pytest.raises(PlanInputError, match="torchtitan cannot express") as err:
        render(doc, "torchtitan")
    assert err.value.field == "plans[0].layout.schedule"


def test_torchtitan_refuses_replicated_dp_with_tp() -> None:
    doc = llama70_doc()
    layout(doc)["zero"] = 0
    with pytest.raises(PlanInputError, match="DDP"):
        render(doc, "torchtitan")


def test_torchtitan_refuses_moe_float8() -> None:
    with pytest.raises(PlanInputError, match="float8"):
        render(moe_doc(), "torchtitan")


# ---------------------------------------------------------------- DeepSpeed


def ds_launch(text: str) -> tuple[dict, list[str], dict[str, str]]:
    """(ds_config, launch command words, files) of a `--format deepspeed` script, as its shell would run it."""
    from planner.inputs.launch_readers.shell import read_script

    script = read_script(text, "plan.sh")
    return json.loads(script.files["ds_config.json"]), script.commands[-1].words, script.files


def test_deepspeed_config_zero3() -> None:
    doc = zero3_doc()
    config, words, _ = ds_launch(render(doc, "deepspeed"))
    lay = layout(doc)
    assert config["train_micro_batch_size_per_gpu"] == 1
    assert config["gradient_accumulation_steps"] == 4
    assert config["train_batch_size"] == 256 == doc["inputs"]["training"]["global_batch"]
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * lay["dp"])
    assert config["zero_optimization"]["stage"] == 3
    assert config["bf16"] == {"enabled": True} and "fp16" not in config
    assert "tensor_parallel" not in config and "sequence_parallel_size" not in config
    # the deepspeed launcher over whole nodes, with the Trainer's own batch arguments
    assert words[:5] == ["deepspeed", "--num_nodes", "8", "--num_gpus", "8"] and "train.py" in words
    args = words[words.index("train.py") + 1:]
    assert args[:2] == ["--deepspeed", "ds_config.json"] and "--bf16" in args
    assert args[args.index("--per_device_train_batch_size") + 1] == "1"
    assert args[args.index("--gradient_accumulation_steps") + 1] == "4"
    assert "--gradient_checkpointing" not in args and "--torch_compile" not in args


def test_deepspeed_autotp_with_gradient_checkpointing() -> None:
    """AutoTP (tensor_parallel.autotp_size, ZeRO <= 2, no SP): DeepSpeed's world for the batch is dp; full recompute
    is the Trainer's --gradient_checkpointing."""
    doc = zero3_doc()
    layout(doc).update(tp=8, dp=8, zero=2, recompute="full", num_microbatches=32)
    config, words, _ = ds_launch(render(doc, "deepspeed"))
    assert config["tensor_parallel"] == {"autotp_size": 8}
    assert config["train_batch_size"] == 1 * 32 * 8 == 256
    assert "--gradient_checkpointing" in words


def test_deepspeed_ulysses_runs_through_accelerate() -> None:
    doc = zero3_doc()
    layout(doc).update(cp=4, dp=16, cp_comm="a2a", num_microbatches=16)
    doc["inputs"]["training"].update(torch_compile=True, param_offload=True, optimizer_offload=1.0)
    config, words, files = ds_launch(render(doc, "deepspeed"))
    assert config["sequence_parallel_size"] == 4
    assert config["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert words[:4] == ["accelerate", "launch", "--config_file", "accelerate_config.yaml"]
    yaml_text = files["accelerate_config.yaml"]
    assert "parallelism_config_sp_backend: deepspeed" in yaml_text and "parallelism_config_sp_size: 4" in yaml_text
    assert "--torch_compile" in words


def test_deepspeed_round_trip_reads_the_plan_back(tmp_path) -> None:
    """`explain --from` reads the script (its here-documents included) to the layout and switches it was made of."""
    from planner.inputs.launch_readers import read_launch_file

    for update, training in (({}, {}), ({"tp": 8, "dp": 8, "zero": 2, "recompute": "full", "num_microbatches": 32},
                                        {"torch_compile": True}),
                             ({"cp": 4, "dp": 16, "cp_comm": "a2a", "num_microbatches": 16}, {"param_offload": True})):
        doc = zero3_doc()
        layout(doc).update(update)
        doc["inputs"]["training"].update(training)
        path = tmp_path / "launch.sh"
        path.write_text(render(doc, "deepspeed"))
        cfg = read_launch_file(str(path))
        lay = layout(doc)
        assert (cfg.dialect, cfg.num_gpus, cfg.micro_batch, cfg.grad_accum) == (
            "deepspeed", 64, lay["micro_batch"], lay["num_microbatches"])
        assert cfg.layout["tp"] == lay["tp"] and cfg.layout["cp"] == lay["cp"]
        assert cfg.layout["zero"] == lay["zero"] and cfg.layout["recompute"] == (2 if lay["recompute"] == "full" else 0)
        assert cfg.torch_compile is bool(training.get("torch_compile"))
        assert cfg.param_offload is bool(training.get("param_offload"))
        assert cfg.seq_len == doc["inputs"]["training"]["seq_len"]


def test_deepspeed_refuses_pipeline_and_experts_naming_each() -> None:
    with pytest.raises(PlanInputError) as err:
        render(llama70_doc(), "deepspeed")
    assert "pipeline parallel pp=4" in err.value.message
    doc = zero3_doc()
    layout(doc).update(tp=8, dp=8, zero=3, num_microbatches=32)
    with pytest.raises(PlanInputError, match="ZeRO 0-2"):
        render(doc, "deepspeed")
    layout(doc).update(zero=2, sequence_parallel=True)
    with pytest.raises(PlanInputError, match="sequence"):
        render(doc, "deepspeed")
    doc = zero3_doc()
    layout(doc).update(cp=2, dp=32, num_microbatches=8)  # ring context parallelism: not DeepSpeed's
    with pytest.raises(PlanInputError, match="Ulysses"):
        render(doc, "deepspeed")


@pytest.mark.parametrize("recompute", ["selective", "offload"])
def test_deepspeed_refuses_recompute(recompute: str) -> None:
    doc = zero3_doc()
    layout(doc)["recompute"] = recompute
    with pytest.raises(PlanInputError, match="recomputation") as err:
        render(doc, "deepspeed")
    assert err.value.field == "plans[0].layout.recompute"


def test_deepspeed_refuses_fp8() -> None:
    doc = zero3_doc()
    doc["inputs"]["training"]["precision"] = "fp8"
    with pytest.raises(PlanInputError, match="fp8"):
        render(doc, "deepspeed")


# ---------------------------------------------------------------- Megatron-Bridge (NeMo)


def test_nemo_overrides_for_70b() -> None:
    items = nemo_items(render(llama70_doc(), "nemo"))
    assert items["model.tensor_model_parallel_size"] == "8"
    assert items["model.pipeline_model_parallel_size"] == "4"
    assert items["model.virtual_pipeline_model_parallel_size"] == "5"
    assert items["model.context_parallel_size"] == "1"
    assert items["model.expert_model_parallel_size"] == "1"
    assert items["model.sequence_parallel"] == "true"
    assert items["model.recompute_granularity"] == "selective"
    assert items["model.seq_length"] == items["dataset.seq_length"] == "8192"
    assert items["train.micro_batch_size"] == "1" and items["train.global_batch_size"] == "512"
    assert items["ddp.use_distributed_optimizer"] == items["optimizer.use_distributed_optimizer"] == "true"
    assert items["ddp.use_megatron_fsdp"] == "false"
    assert items["mixed_precision"] == "bf16_mixed"


def test_nemo_moe_and_zero3() -> None:
    moe = nemo_items(render(moe_doc(), "nemo"))
    assert moe["model.expert_model_parallel_size"] == "64" and moe["model.expert_tensor_parallel_size"] == "2"
    assert moe["model.virtual_pipeline_model_parallel_size"] == "null"
    assert moe["model.num_layers_in_first_pipeline_stage"] == "5"
    assert moe["model.num_layers_in_last_pipeline_stage"] == "8"
    assert moe["mixed_precision"] == "bf16_with_fp8_delayed_scaling_mixed"
    fsdp = nemo_items(render(zero3_doc(), "nemo"))
    assert fsdp["ddp.use_megatron_fsdp"] == fsdp["dist.use_megatron_fsdp"] == "true"
    assert fsdp["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert fsdp["checkpoint.ckpt_format"] == "fsdp_dtensor"
    assert fsdp["model.recompute_granularity"] == "null"


def test_nemo_refuses_fp8_without_sharded_optimizer() -> None:
    doc = moe_doc()
    layout(doc)["zero"] = 0
    with pytest.raises(PlanInputError, match="distributed optimizer") as err:
        render(doc, "nemo")
    assert err.value.field == "plans[0].layout.zero"


# ---------------------------------------------------------------- env


def shell_vars(text: str) -> dict[str, str]:
    if BASH is None:
        pytest.skip("bash not available")
    names = [line.split("=", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    script = 'eval "$(cat)"; for v in ' + " ".join(names) + '; do printf "%s=%s\\0" "$v" "${!v}"; done'
    out = subprocess.run([BASH, "-c", script], input=text, capture_output=True, text=True, check=True,
                         env={"PATH": os.environ.get("PATH", "")}).stdout
    return dict(item.split("=", 1) for item in out.split("\0")[:-1])


def test_env_eval_in_bash() -> None:
    values = shell_vars(render(llama70_doc(), "env"))
    expected = {"TP": "8", "PP": "4", "VPP": "5", "CP": "1", "EP": "1", "DP": "16", "MBS": "1", "GBS": "512",
                "SEQ_LEN": "8192", "ZERO": "1", "RECOMPUTE": "selective", "SP": "1", "SCHEDULE": "interleaved",
                "NNODES": "64", "NPROC_PER_NODE": "8", "WORLD_SIZE": "512", "NUM_MICROBATCHES": "32",
                "MODEL": "llama3-70b", "PRECISION": "bf16"}
    assert {key: values[key] for key in expected} == expected


def test_env_quotes_unsafe_values() -> None:
    doc = llama70_doc()
    doc["inputs"]["model"]["name"] = "my model; rm -rf $HOME"
    values = shell_vars(render(doc, "env"))
    assert values["MODEL"] == "my model; rm -rf $HOME"


def test_env_uneven_stages() -> None:
    values = shell_vars(render(moe_doc(), "env"))
    assert values["FIRST_STAGE_LAYERS"] == "5" and values["LAST_STAGE_LAYERS"] == "8" and values["EP"] == "64"


def test_env_refuses_partial_nodes() -> None:
    doc = zero3_doc()
    doc["inputs"]["cluster"]["num_gpus"] = 12
    doc["inputs"]["training"]["global_batch"] = 48
    layout(doc)["dp"] = 12
    with pytest.raises(PlanInputError, match="whole nodes"):
        render(doc, "env")


# ---------------------------------------------------------------- golden files

GOLDEN_CASES = [
    ("megatron", llama70_doc, "llama3-70b.megatron.txt"),
    ("torchtitan", llama70_doc, "llama3-70b.torchtitan.toml"),
    ("nemo", llama70_doc, "llama3-70b.nemo.txt"),
    ("env", llama70_doc, "llama3-70b.env.sh"),
    # DeepSpeed cannot express the 70b plan (tp, pp > 1); its golden file is the ZeRO-3 data-parallel plan.
    ("deepspeed", zero3_doc, "llama3-8b-zero3.deepspeed.sh"),
]


@pytest.mark.parametrize(("fmt", "make_doc", "name"), GOLDEN_CASES)
def test_golden(fmt: str, make_doc, name: str) -> None:
    text = render(make_doc(), fmt)
    path = GOLDEN / name
    if os.environ.get("PLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def _ep_overlap_doc(ep: int) -> dict:
    doc = moe_doc()
    lay = layout(doc)
    lay.update(pp=1, dp=512, ep=ep, num_microbatches=16, schedule="combined-1f1b", recompute="selective")
    for key in ("first_stage_layers", "last_stage_layers"):
        lay.pop(key)
    return doc


@pytest.mark.parametrize(("ep", "queues"), [(64, 32), (4, 8)])
def test_megatron_ep_overlap_asks_for_several_hardware_queues(ep: int, queues: int) -> None:
    """EP overlap needs CUDA_DEVICE_MAX_CONNECTIONS > 1 (Megatron-Core moe/README.md): the note gives Megatron-Bridge's
    8, or 32 where the plan dispatches with DeepEP (EP 64 x expert TP 2 leaves the node), never the 1 that TP > 1
    would otherwise ask for."""
    text = render(_ep_overlap_doc(ep), "megatron")
    assert "--overlap-moe-expert-parallel-comm" in megatron_args(text)
    assert f"\n# env: export CUDA_DEVICE_MAX_CONNECTIONS={queues} " in text
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 " not in text


def test_ep_overlap_on_hopper_launches_without_tp_overlap(tmp_path):
    """Priced with TP's collectives unhidden beside EP overlap on Hopper (planner.cost.tensor), the plan launches so:
    Megatron-Bridge gets comm_overlap.tp_comm_overlap=false (as its own Qwen3-235B H100 recipe sets); the same TP 2
    layout without EP overlap keeps NeMo's TP overlap, and so does EP overlap on Blackwell."""
    from conftest import run_plan_in_process

    base = ("--model", "qwen3-235b-a22b", "--seq-len", "4096", "--global-batch", "8192", "--precision", "fp8",
            "--fix", "tp=2", "--fix", "pp=8", "--fix", "vpp=4")

    def launched(cluster: str, schedule: str, fmt: str) -> str:
        out = run_plan_in_process(*base, "--cluster", cluster, "--fix", f"schedule={schedule}", "--format", fmt,
                                  "--framework", "nemo" if fmt == "nemo" else "megatron-core")
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "comm_overlap.tp_comm_overlap=false" in launched("h100x256", "combined-1f1b", "nemo")
    assert "comm_overlap.tp_comm_overlap=true" in launched("h100x256", "interleaved", "nemo")
    assert "comm_overlap.tp_comm_overlap=true" in launched("gb200x256", "combined-1f1b", "nemo")
