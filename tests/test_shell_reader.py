"""The shell reader (planner.inputs.launch_readers.shell): launch scripts read as bash would pass their arguments,
without running anything, and every value with the variables it depends on; malformed or hostile text is one
PlanInputError, never another exception (hypothesis fuzzes it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import PlanInputError
from planner.inputs.launch_readers import read_launch_file
from planner.inputs.launch_readers.shell import read_script

ROOT = Path(__file__).resolve().parents[1]


def words(text: str, given: dict | None = None) -> list[list[str]]:
    return [c.words for c in read_script(text, "t.sh", given).commands]


def last(text: str, given: dict | None = None) -> list[str]:
    return words(text, given)[-1]


def test_quoting_escapes_and_continuations():
    assert last("echo 'a b' \"c $X d\" e\\ f g\\\n  h", {"X": "1"}) == ["echo", "a b", "c 1 d", "e f", "g", "h"]
    assert last("echo \"a\\\"b\" '$X' \"\\$X\"") == ["echo", 'a"b', "$X", "$X"]
    assert last("echo a#b # a comment\n") == ["echo", "a#b"]


def test_unquoted_expansions_split_quoted_ones_do_not():
    script = 'ARGS="--tp 8  --pp 4"\nrun $ARGS "$ARGS"'
    assert last(script) == ["run", "--tp", "8", "--pp", "4", "--tp 8  --pp 4"]


def test_arrays_append_and_expand_per_element():
    script = """A=(--x 1 "--y 2")
A+=(--z)
run ${A[@]} "${A[@]}" ${#A[@]} ${A[1]}"""
    assert last(script) == ["run", "--x", "1", "--y", "2", "--z", "--x", "1", "--y 2", "--z", "4", "1"]


def test_parameter_expansion_forms():
    script = """unset U
E=
V=value
echo ${U:-d1} ${E:-d2} ${E-d3} ${V:+alt} ${U:=set} $U ${V%ue} ${V#va} ${V/al/AL} ${V^^} ${#V} ${1:-"pos default"}"""
    assert last(script) == ["echo", "d1", "d2", "alt", "set", "set", "val", "lue", "vALue", "VALUE", "5", "pos default"]


def test_arithmetic_over_known_integers():
    assert last("G=8\nN=4\necho $(($G*$N)) $((G * (N + 1) / 3)) $((2**10 % 7))") == ["echo", "32", "13", "2"]
    doubtful = read_script("echo $((NODES*8))", "t.sh").commands[-1].argv[1]
    assert doubtful.doubt and "NODES" in doubtful.doubt


def test_decided_branches_case_and_and_or():
    script = """M=8B
case "$M" in
  800M) TP=1 ;;
  8B|70B) TP=4 ;;
  *) exit 1 ;;
esac
if [[ "$M" == "8B" ]] && [ $TP -gt 2 ]; then FP8=1; else FP8=0; fi
[ -n "$M" ] || TP=99
run $TP $FP8"""
    shell = read_script(script, "t.sh")
    assert shell.commands[-1].words == ["run", "4", "1"] and not shell.commands[-1].argv[1].doubt


def test_undecided_branches_keep_doubt_on_what_they_set():
    script = """TP=8
if [ -f /etc/some_file ]; then TP=4; fi
run --tensor-model-parallel-size $TP --seq-length 4096"""
    argv = read_script(script, "t.sh").commands[-1].argv
    assert [f.text for f in argv] == ["run", "--tensor-model-parallel-size", "4", "--seq-length", "4096"]
    assert argv[2].doubt == {"TP"} and not argv[4].doubt


def test_scheduler_defaults_stay_in_doubt_until_given():
    script = 'N=${SLURM_NNODES:-1}\nrun --nnodes $N'
    arg = read_script(script, "t.sh").commands[-1].argv[-1]
    assert arg.text == "1" and arg.doubt == {"SLURM_NNODES"}
    given = read_script(script, "t.sh", {"SLURM_NNODES": "16"}).commands[-1].argv[-1]
    assert given.text == "16" and not given.doubt
    seeded = read_script("#!/bin/bash\n#SBATCH --nodes=12\n#SBATCH --gres=gpu:8\n" + script, "t.sh")
    assert seeded.commands[-1].words[-1] == "12" and seeded.sbatch["gres"] == "gpu:8"


def test_set_values_replace_the_scripts_assignments():
    assert last("NUM_NODES=1\nrun $NUM_NODES $1", {"NUM_NODES": "64", "1": "x"}) == ["run", "64", "x"]


def test_heredocs_bash_c_and_functions():
    script = """CFG=ds.json
cat <<EOT > $CFG
{"stage": $STAGE, "quoted": '$X'}
EOT
cat <<'RAW' > raw.txt
$NOT_EXPANDED
RAW
CMD="inner --a 1"
srun --nodes 2 bash -x -c "$CMD --b 2"
sbatch <<EOF
#SBATCH --nodes=3
launch --c 3
EOF
f() { fn-run "$@" --d; }
f one two"""
    shell = read_script(script, "t.sh", {"STAGE": "1"})
    assert shell.files["ds.json"] == '{"stage": 1, "quoted": \'$X\'}\n'
    assert shell.files["raw.txt"] == "$NOT_EXPANDED\n"
    runs = [c.words for c in shell.commands]
    assert ["inner", "--a", "1", "--b", "2"] in runs and ["launch", "--c", "3"] in runs
    assert ["fn-run", "one", "two", "--d"] in runs and shell.sbatch["nodes"] == "3"


def test_exit_on_a_decided_path_ends_the_script():
    assert words("run a\nexit 0\nrun b") == [["run", "a"]]
    assert words('if [ -f x ]; then exit 1; fi\nrun b')[-1] == ["run", "b"]


@pytest.mark.parametrize("text,needle", [
    ("echo 'open", "never closed"),
    ('echo "open', "never closed"),
    ("if true; then echo", "fi"),
    ("A=(1 2", "never closed"),
    ("echo $(date", "never closed"),
    ("{ " * 200 + "x; " + "} " * 200, "nested"),
    ("echo " + "${A:-" * 3000 + "x" + "}" * 3000, "nests too deeply"),
])
def test_malformed_scripts_are_one_error(text, needle):
    with pytest.raises(PlanInputError) as raised:
        read_script(text, "bad.sh")
    assert needle in raised.value.one_line()


_PIECES = [*"abcXYZ019 =$'\"\\\n\t{}()[]<>|&;#*?-+:%/,.@!`~^_", "--tp ", "${A:-1}", "$((1+2))",
           "<<EOF\nx\nEOF\n", "if ", "then ", "fi", "case ", " in ", "esac", "do ", "done", "for ", "while ", "A=(",
           ")", "bash -c ", "sbatch <<E\n", "\nE\n"]
_SHELLISH = st.lists(st.sampled_from(_PIECES), max_size=120).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SHELLISH)
def test_fuzzed_text_reads_or_is_one_error(text):
    try:
        script = read_script(text, "fuzz.sh")
    except PlanInputError as exc:
        assert "\n" not in exc.one_line()
        return
    for command in script.commands:
        assert all(isinstance(f.text, str) for f in command.argv)


_FLAG_LINES = st.lists(st.sampled_from([
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers", "--hidden-size",
    "--num-attention-heads", "--micro-batch-size", "--global-batch-size", "--seq-length", "--recompute-granularity",
    "--pipeline-model-parallel-layout", "--moe-layer-freq", "--num-experts", "--fp8-format", "--vocab-size",
    "--hybrid-layer-pattern", "--window-size", "torchrun", "pretrain_gpt.py", "--nnodes", "--nproc_per_node",
    "8", "0", "-1", "99999999999999999999", "full", "selective", "'Et|(tt|)*30L'", "'([1,0]*2)'", "(t)*99999999",
    "$UNSET", "${X:-4}", "hybrid", "M-*E", "nan", "1e309", "\\\n"]), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=_FLAG_LINES)
def test_fuzzed_megatron_files_read_or_are_one_error(parts, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "launch.sh"
    path.write_text(" ".join(parts) + "\n")
    try:
        read_launch_file(str(path), "megatron")
    except PlanInputError as exc:
        assert "\n" not in exc.one_line()


def plan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def test_unset_variable_behind_a_priced_flag_is_named_with_the_fix(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 --nnodes $NNODES pretrain_gpt.py "
                      "--tensor-model-parallel-size $TP --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                      "--ffn-hidden-size 14336 --group-query-attention --num-query-groups 8 --swiglu "
                      "--untie-embeddings-and-output-weights --vocab-size 128256 --micro-batch-size 1 "
                      "--seq-length 8192 --bf16 --use-distributed-optimizer --sequence-parallel "
                      "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1\n")
    r = plan("explain", "--from", str(script), "--cluster", "h100x64")
    assert r.returncode == 2 and "--tensor-model-parallel-size" in r.stderr and "--set TP=" in r.stderr
    ok = plan("explain", "--from", str(script), "--cluster", "h100x64", "--set", "TP=2", "--set", "NNODES=8",
              "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert '"tp": 2' in ok.stdout and "global batch 32 = micro-batch 1 x data-parallel 32" in ok.stderr
    bad = plan("explain", "--model", "llama3-8b", "--cluster", "h100x8", "--layout", "tp=1", "--set", "A=1")
    assert bad.returncode == 2 and "--set" in bad.stderr


_VALUES = st.one_of(st.integers(-3, 70000), st.sampled_from([0, 1, 2, 8, -1, 10**30]), st.booleans(),
                    st.sampled_from(["auto", "cpu", "nvme", "none", "full", "selective", "op", "2", "bfloat16",
                                     "float32", "Interleaved1F1B", "ZBVZeroBubble", "GPipe", "x", "", "null"]))
_DS_KEYS = ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16", "bf16",
            "zero_optimization", "stage", "offload_optimizer", "offload_param", "device", "enabled",
            "activation_checkpointing", "other"]
_TT_SECTIONS = {"training": ["local_batch_size", "batch_size", "global_batch_size", "seq_len", "compile", "dtype",
                             "mixed_precision_param", "enable_cpu_offload"],
                "parallelism": ["data_parallel_shard_degree", "data_parallel_replicate_degree",
                                "tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                                "expert_parallel_degree", "expert_tensor_parallel_degree",
                                "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage",
                                "fsdp_reshard_after_forward", "pipeline_parallel_microbatch_size"],
                "activation_checkpoint": ["mode", "selective_ac_option"],
                "model": ["name", "flavor", "converters"], "float8": ["enable_float8_linear", "recipe_name"]}


_DS_DOCS = st.recursive(_VALUES, lambda inner: st.dictionaries(st.sampled_from(_DS_KEYS), inner, max_size=5),
                        max_leaves=20)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def _tt_docs(draw):
    lines = []
    for section, keys in _TT_SECTIONS.items():
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))
        if chosen:
            lines.append(f"[{section}]")
            lines += [f"{k} = {_toml_value(draw(_VALUES))}" for k in chosen]
    return "\n".join(lines) + "\n"


def _price_quietly(path: Path, dialect: str) -> None:
    """Read and, where the file reads, resolve and lay it out on a fixed model and cluster: nothing but
    PlanInputError may come out."""
    from planner.inputs.launch_readers import layout_for, resolve_cluster, resolve_model

    try:
        cfg = read_launch_file(str(path), dialect)
        model = resolve_model(cfg, "llama3-8b")
        layout_for(cfg, model, resolve_cluster(cfg, "h100x64").num_gpus)
    except PlanInputError as exc:
        assert "\n" not in exc.one_line()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(_DS_KEYS), _DS_DOCS, max_size=8))
def test_fuzzed_ds_configs_read_or_are_one_error(doc, tmp_path_factory):
    import json

    path = tmp_path_factory.mktemp("ds") / "ds_config.json"
    path.write_text(json.dumps(doc))
    _price_quietly(path, "deepspeed")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_tt_docs())
def test_fuzzed_torchtitan_configs_read_or_are_one_error(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("tt") / "job.toml"
    path.write_text(text)
    _price_quietly(path, "torchtitan")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(st.tuples(st.sampled_from([
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.num_layers",
    "model.recompute_granularity", "model.recompute_modules", "train.micro_batch_size", "train.global_batch_size",
    "mixed_precision", "ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy", "model.cp_comm_type",
    "model.moe_expert_capacity_factor", "model.mtp_num_layers", "optimizer.optimizer_offload_fraction",
    "model.seq_length", "model.hidden_size"]), _VALUES), max_size=12))
def test_fuzzed_nemo_overrides_read_or_are_one_error(items, tmp_path_factory):
    path = tmp_path_factory.mktemp("nemo") / "overrides.txt"
    path.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in items))
    _price_quietly(path, "nemo")


def test_a_launch_inside_an_undecided_branch_is_named(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("""if [ "$FP8" = 1 ]; then
  torchrun pretrain_gpt.py --tensor-model-parallel-size 8 --fp8-format hybrid
else
  torchrun pretrain_gpt.py --tensor-model-parallel-size 4 --bf16
fi
""")
    cfg = read_launch_file(str(script))
    assert cfg.layout["tp"] == 4 and cfg.precision == "bf16"  # the last launch, as written
    said = " ".join(cfg.doubts)
    assert "launches 2 times" in said and "could not decide" in said and '"$FP8" = 1' in said
    decided = read_launch_file(str(script), given={"FP8": "1"})
    assert decided.layout["tp"] == 8 and decided.precision == "fp8" and not decided.doubts
