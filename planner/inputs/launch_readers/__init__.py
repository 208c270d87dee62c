"""Read an existing launch configuration back into a planning problem and a layout (`plan explain --from`): a
Megatron-LM / Megatron-DeepSpeed command line or launch script, a torchtitan TOML or config registry (Python, read
without running it), an llm-foundry training YAML, a DeepSpeed ds_config JSON (or the
deepspeed launch that names one), Megatron-Bridge (NeMo 2) overrides, or a NeMo 1.x / NeMo-Framework-Launcher YAML
config and its launcher script. One module per framework reads what that framework reads; shell scripts are parsed
(planner.inputs.launch_readers.shell), never run; this module picks the reader, and
planner.inputs.launch_readers.resolve settles the model, the cluster, the layout and the batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from planner.errors import PlanInputError
from planner.inputs.files import read_text
from planner.inputs.launch_readers import deepspeed, llm_foundry, megatron, nemo, torchtitan, torchtitan_registry
from planner.inputs.launch_readers._common import LaunchConfig
from planner.inputs.launch_readers.resolve import (
    layout_for,
    recompute_note,
    resolve_cluster,
    resolve_model,
)

DIALECTS = ("megatron", "torchtitan", "deepspeed", "nemo", "llm-foundry")
_READERS: dict[str, Callable[[str, str, dict[str, str] | None], LaunchConfig]] = {
    "megatron": megatron.read, "torchtitan": torchtitan.read, "deepspeed": deepspeed.read, "nemo": nemo.read,
    "llm-foundry": llm_foundry.read,
}
_SHELL_FENCES = ("", "bash", "sh", "shell", "console", "zsh")

__all__ = ["DIALECTS", "LaunchConfig", "detect_dialect", "layout_for", "read_launch_file", "recompute_note",
           "resolve_cluster", "resolve_model"]


def detect_dialect(path: Path, text: str) -> str:
    """The dialect by file name, then by content: a torchtitan config registry (.py), .json ds_config, .toml
    torchtitan, .yaml NeMo, a script running a
    Megatron entry point or listing Megatron flags, a NeMo launcher or a deepspeed launch, `section.key=value`
    overrides."""
    suffix = path.suffix.lower()
    if suffix == ".py":
        if torchtitan_registry.is_registry(text):
            return "torchtitan"
        raise PlanInputError("is Python but not a torchtitan config registry (functions returning Trainer.Config)",
                             source=str(path), fix="pass the launch script, or a torchtitan config_registry.py")
    if suffix == ".json" or text.lstrip().startswith("{"):
        return "deepspeed"
    if suffix == ".toml" or any(re.fullmatch(r"\[[A-Za-z_][\w.]*\]", line.strip()) for line in text.splitlines()):
        return "torchtitan"
    if suffix in (".yaml", ".yml"):
        if megatron_flags_yaml(text) is not None:
            return "megatron"
        return "llm-foundry" if llm_foundry.looks_like(_yaml_or_none(text)) else "nemo"
    scripts = ("--tensor-model-parallel-size", "pretrain_gpt", "pretrain_mamba")
    if any(s in text for s in scripts) or megatron.looks_like(text, str(path)):
        return "megatron"
    if re.search(r"--deepspeed(\s|$)", text, re.M):  # before NeMo's main.py: DeepSpeed-Chat runs a main.py too
        return "deepspeed"
    if re.search(r"\bmain\.py\b", text) and "training" in text:
        return "nemo"
    if re.search(r"\brun_recipe\.py\b", text):  # Megatron-Bridge's recipe runner (scripts/training)
        return "nemo"
    try:  # a script whose quoting spans lines is no overrides file: its split error is not this file's fault
        if nemo.overrides(text, str(path)):
            return "nemo"
    except PlanInputError:
        pass
    raise PlanInputError("cannot tell which launcher wrote this file (a shell script must itself run the Megatron "
                         "entry point, torchrun/srun ... pretrain_gpt.py)", source=str(path),
                         fix=f"pass the script that runs it, or name the dialect: --dialect {'|'.join(DIALECTS)}")


def _yaml_or_none(text: str) -> object:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


# A flags file's top-level sections whose entries are Megatron-LM flags (Megatron-MoE-ModelZoo model_configs).
_FLAG_SECTIONS = ("MODEL_ARGS",)


def megatron_flags_yaml(text: str) -> str | None:
    """A YAML file of Megatron-LM flags, as the command line its launcher builds from it, else None.

    NVIDIA's Megatron-MoE-ModelZoo keeps each model's flags as a MODEL_ARGS mapping of `--flag: value`, and its
    sbatch_benchmarking.sh substitutes the environment into the file (envsubst), then turns each entry into
    `--flag value` with yq, dropping `false` entries and giving `true` ones no value (`select(.value != "false") |
    with(select(.value == "true"); .value = "")`), and appends them to `pretrain_gpt.py` unquoted, so a value of
    several words is several arguments. Variables stay `${NAME}` here, for `--set NAME=VALUE` or an error naming
    them."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict):
        return None
    sections = [doc[k] for k in _FLAG_SECTIONS if isinstance(doc.get(k), dict)]
    flags = {k: v for section in sections for k, v in section.items()}
    if not flags or not all(isinstance(k, str) and k.startswith("--") for k in flags):
        return None
    words: list[str] = []
    for flag, value in flags.items():
        if value is False or str(value).strip().lower() == "false":
            continue
        words.append(flag if value is True or str(value).strip().lower() == "true" or value is None
                     else f"{flag} {value}")
    return "pretrain_gpt.py " + " \\\n    ".join(words) + "\n"


def launch_block(text: str) -> str | None:
    """A Markdown guide's launch: the fenced shell block with the most `--flags` (None without one)."""
    blocks: list[str] = []
    info: str | None = None  # the open fence's language, None outside a fence
    lines: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if info is None:
                info, lines = line.lstrip()[3:].strip().lower(), []
            else:
                if info in _SHELL_FENCES:
                    blocks.append("\n".join(lines) + "\n")
                info = None
        elif info is not None:
            lines.append(line)
    blocks = [b for b in blocks if b.count("--") >= 2]
    return max(blocks, key=lambda b: b.count("--")) if blocks else None


def read_launch_file(path: str, dialect: str | None = None, given: dict[str, str] | None = None) -> LaunchConfig:
    """Read `path` in `dialect` (detected when None); `given`: values for what the file leaves open (--set NAME=VALUE:
    shell variables and positional arguments, torchtitan or Hydra keys, Trainer arguments behind a ds_config's
    "auto"). Bad values are one PlanInputError naming the flag or key."""
    if dialect is not None and dialect not in DIALECTS:
        raise PlanInputError(f"unknown dialect '{dialect[:40]}'", field="--dialect",
                             fix=f"use one of {', '.join(DIALECTS)}")
    file = Path(path).expanduser()
    text = read_text(file, "pass a launch script, TOML, ds_config JSON, NeMo YAML or overrides file")
    if file.suffix.lower() in (".md", ".markdown"):
        block = launch_block(text)
        if block is None:
            raise PlanInputError("has no fenced shell block with launch flags", source=str(file),
                                 fix="pass the launch script itself")
        text = block
    try:
        chosen = dialect or detect_dialect(file, text)
        if chosen == "megatron" and file.suffix.lower() in (".yaml", ".yml"):
            text = megatron_flags_yaml(text) or text
        return _READERS[chosen](text, str(file), given)
    except RecursionError:
        raise PlanInputError("nested too deeply to read", source=str(file), fix="flatten the file") from None
