"""torchtitan's config registries (torchtitan after its TOML job configs, pytorch/torchtitan@b5bcd76c): the function
run_train.sh's CONFIG names is evaluated without running the file (planner.inputs.launch_readers.torchtitan_registry)
and read as the TOML it replaced; the checks use the registries in the launch-file corpus, byte for byte as
published."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from planner.errors import PlanInputError
from planner.inputs.launch_readers import layout_for, read_launch_file, resolve_cluster, resolve_model
from planner.inputs.launch_readers.torchtitan_registry import evaluate
from planner.inputs.launch_readers.torchtitan_trainer_config import document
from planner.inputs.layout import decode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_corpus import DATA  # noqa: E402

LLAMA3 = DATA / "torchtitan" / "registry" / "llama3" / "config_registry.py"
DEEPSEEK = DATA / "torchtitan" / "registry" / "deepseek_v3" / "config_registry.py"
TOML_70B = DATA / "torchtitan" / "models" / "llama3_70b.toml"


def _read(path: Path, cluster: str = "h100x64", **given: str) -> tuple:
    cfg = read_launch_file(str(path), given=given)
    model = resolve_model(cfg, None)
    lay = layout_for(cfg, model, resolve_cluster(cfg, cluster).num_gpus)
    return cfg, model, {k: decode(k, v) for k, v in lay.items()}


def test_the_registry_reads_as_the_toml_it_replaced():
    """llama3_70b as a registry function and as the last TOML job config: the same layout, batch and model."""
    cfg, model, lay = _read(LLAMA3, CONFIG="llama3_70b")
    toml_cfg, toml_model, toml_lay = _read(TOML_70B)
    assert (cfg.dialect, model.name) == ("torchtitan", toml_model.name)
    for key in ("tp", "pp", "cp", "ep", "dp", "mbs", "zero", "recompute", "sp"):
        assert lay[key] == toml_lay[key], key
    assert (cfg.global_batch, cfg.seq_len, cfg.precision) == (toml_cfg.global_batch, toml_cfg.seq_len,
                                                              toml_cfg.precision)


def test_configs_built_from_others_and_from_locals():
    """llama3_8b_mxfp8 starts from llama3_8b() and assigns compile and the model spec; llama3_405b builds its
    CompileConfig in a local, with async TP, and a float8 converter."""
    cfg, _, lay = _read(LLAMA3, CONFIG="llama3_8b_mxfp8")
    assert (cfg.precision, cfg.torch_compile, lay["mbs"], cfg.seq_len) == ("fp8", True, 1, 8192)
    assert any("MXFP8" in text for text in cfg.ignored)
    cfg, model, lay = _read(LLAMA3, "h100x256", CONFIG="llama3_405b")
    assert (model.name, cfg.precision, cfg.torch_compile, cfg.tp_comm_overlap) == ("llama3-405b", "fp8", True, True)
    assert (lay["tp"], lay["mbs"], lay["recompute"]) == (8, 2, "full")


def test_command_line_overrides_and_the_pipeline_batch():
    """`--parallelism.x` overrides as torchtitan's command line; with a pipeline, num_pp_microbatches micro-batches of
    the configured tokens make the local batch."""
    _, _, lay = _read(LLAMA3, CONFIG="llama3_70b", **{"parallelism.tensor_parallel_degree": "4"})
    assert (lay["tp"], lay["dp"]) == (4, 16)
    cfg, _, lay = _read(LLAMA3, CONFIG="llama3_70b", **{
        "training.disable_cuda_graphs": "True", "parallelism.pipeline_parallel_degree": "2",
        "parallelism.num_pp_microbatches": "4", "parallelism.pipeline_parallel_schedule": "Interleaved1F1B"})
    assert (lay["pp"], lay["vpp"], lay["schedule"], lay["mbs"], lay["dp"]) == (2, 2, "interleaved", 8, 4)
    assert cfg.global_batch == 8 * 4 * 4  # micro-batch x pipeline micro-batches x data-parallel


def test_what_torchtitan_refuses_or_the_file_cannot_say_is_one_line_exit_2():
    for args, field in (
        ((), "--set"),  # which config runs
        (("--set", "CONFIG=llama3_1t"), "--set CONFIG"),
        (("--set", "CONFIG=llama3_70b", "--set", "parallelism.pipeline_parallel_degree=2"),
         "training.disable_cuda_graphs"),  # CUDA graphs on by default, refused with a pipeline
        (("--set", "CONFIG=llama3_70b", "--set", "training.max_context_length=abc"), "training.max_context_length"),
        (("--set", "CONFIG=llama3_70b", "--set", "training.num_tokens_per_microbatch_per_dp_rank=1000"),
         "training.num_tokens_per_microbatch_per_dp_rank"),  # not whole sequences
    ):
        out = run_plan_in_process("explain", "--from", str(LLAMA3), "--cluster", "h100x64", *args)
        assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_expert_parallel_graphs_need_a_non_blocking_dispatcher():
    """torchtitan refuses its CUDA graphs with expert parallelism unless the dispatcher never waits on the host:
    deepseek_v3_16b disables them, its HybridEP variant with a non-blocking capacity factor keeps them (named)."""
    cfg, _, lay = _read(DEEPSEEK, CONFIG="deepseek_v3_16b")
    assert lay["ep"] == 8 and not any("CUDA graph" in t for t in cfg.ignored)
    cfg, _, _ = _read(DEEPSEEK, CONFIG="deepseek_v3_16b_hybridep")
    assert any("CUDA graph" in t for t in cfg.ignored)
    assert any("expert_parallel_comm_backend=hybridep" in t for t in cfg.ignored)
    with pytest.raises(PlanInputError) as raised:
        _read(DEEPSEEK, CONFIG="deepseek_v3_16b", **{"training.disable_cuda_graphs": "False"})
    assert raised.value.field == "training.disable_cuda_graphs"


def test_the_evaluator_follows_what_it_can_and_names_what_it_cannot():
    """Decided ifs, dataclass replace, module constants and the file's helpers are followed; an if on a value from
    another module is named, and so is a batch computed by code it cannot follow."""
    text = '''
SEQ = 4096


def helper(config):
    config.parallelism.tensor_parallel_degree = 2


def base() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("8B"),
                          training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=2 * SEQ,
                                                  max_context_length=SEQ))


def derived() -> Trainer.Config:
    config = base()
    helper(config)
    if SEQ > 1000:
        config.activation_checkpoint = FullAC.Config()
    else:
        config.activation_checkpoint = None
    if some_module.FLAG:
        config.parallelism.pipeline_parallel_degree = 4
    config.training = replace(config.training, max_context_length=SEQ * 2)
    return config


def opaque() -> Trainer.Config:
    return Trainer.Config(training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=tokens()))
'''
    config, _, doubts = evaluate(text, "registry.py", "derived", {})
    fields = config.fields
    assert fields["parallelism"].fields["tensor_parallel_degree"] == 2
    assert fields["activation_checkpoint"].kind == "FullAC.Config"
    assert fields["training"].fields == {"num_tokens_per_microbatch_per_dp_rank": 8192, "max_context_length": 8192}
    assert doubts == ["an if on some_module.FLAG (neither branch read)"]
    config, _, doubts = evaluate(text, "registry.py", "opaque", {})
    with pytest.raises(PlanInputError) as raised:
        document(config, "llama3", doubts, [], "registry.py")
    assert raised.value.field == "training.num_tokens_per_microbatch_per_dp_rank"


GRAPH_TRAINER = Path(__file__).resolve().parent / "data" / "torchtitan_graph_trainer" / "llama3" / "config_registry.py"


def test_other_python_is_a_one_line_error_never_a_crash(tmp_path):
    """torchtitan's graph_trainer registry (pytorch/torchtitan@b5bcd76c torchtitan/experiments/graph_trainer/llama3/
    config_registry.py, byte for byte) wraps configs imported from another module: named, exit 2. Python that is no
    registry at all is refused as such, and a shell script's top-level `return` ends it instead of crashing the
    reader (all three were internal errors)."""
    out = run_plan_in_process("explain", "--from", str(GRAPH_TRAINER), "--cluster", "h100x64",
                              "--set", "CONFIG=graph_trainer_llama3_70b")
    assert out.returncode == 2 and "to_graph_trainer_config()" in out.stderr, out.stderr
    other = tmp_path / "train.py"
    other.write_text("import os\nprint(os.getcwd())\n")
    out = run_plan_in_process("explain", "--from", str(other), "--cluster", "h100x8")
    assert out.returncode == 2 and "not a torchtitan config registry" in out.stderr
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nTP=2\nreturn\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    out = run_plan_in_process("explain", "--from", str(script), "--cluster", "h100x8")
    assert out.returncode == 2 and "internal error" not in out.stderr and "Traceback" not in out.stderr
