"""The typer app: its commands (cli/commands/), in the order of `plan --help`."""

from __future__ import annotations

import typer

from cli.commands import calibrate, check, clusters, diff, dsp, explain, models, plan, report, sweep, validate

EXAMPLES = """
Examples:

  plan --model llama70b --cluster h100x512

  plan --model ./config.json --cluster a100x1024 --seq-len 4096 --global-batch 1024 --top 10

  plan --model mixtral-8x22b --cluster h100x256 --fix ep=8 --fix tp=2 --format json

  plan explain --model llama70b --cluster h100x512 --layout "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective"

  plan explain --from launch.sh --cluster h100x512

  plan report --model llama70b --cluster h100x512 -o report.html

  plan sweep --model llama70b --gpus h100,b200 --counts 256,512,1024 --train-tokens 15T

  plan validate --format json
"""

app = typer.Typer(
    help="Parallelism auto-planner for LLM training: ranked layouts with predicted step time, MFU and memory.",
    epilog=EXAMPLES, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
    no_args_is_help=False, context_settings={"help_option_names": ["-h", "--help"]},
)

# The order here is the order of `plan --help`.
app.callback(invoke_without_command=True)(plan.main)
app.command("explain")(explain.explain)
app.command("report")(report.report)
app.command("models")(models.models)
app.command("clusters")(clusters.clusters)
app.command("validate")(validate.validate)
app.command("dsp")(dsp.dsp)
check.register(app)
diff.register(app)
sweep.register(app)
calibrate.register(app)
