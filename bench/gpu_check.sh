#!/usr/bin/env bash
# The real-hardware checks in one go, for a machine with one CUDA GPU and this checkout's dependencies importable:
# the machine's facts, `plan calibrate` (full profile), bench/real_step.py (measured vs predicted step time and
# memory, catalog figures and the fresh profile side by side) eager, eager with PyTorch's expandable-segments
# allocator (what torchtitan's run_train.sh sets), compiled, and with torchtitan's blocks and selective
# checkpointing, then bench/host_overhead.py and bench/graph_memory.py. Results land in OUTDIR.
#   bench/gpu_check.sh OUTDIR [PYTHON]
set -uo pipefail
out=${1:?usage: bench/gpu_check.sh OUTDIR [PYTHON]}
py=${2:-python3}
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; grep -m1 "model name" /proc/cpuinfo
  nproc; "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
start=$SECONDS
"$py" -m cli.main calibrate --out "$out/profile.yaml" 2>"$out/calibrate.log"; echo "calibrate rc=$? in $((SECONDS-start)) s"
tail -2 "$out/calibrate.log"
prof=(); [ -f "$out/profile.yaml" ] && prof=(--profile "$out/profile.yaml")
real_step() {  # NAME ARGS...: one real_step run, its table in NAME.txt, its report in NAME.json
  local name=$1; shift; start=$SECONDS
  "$py" bench/real_step.py "$@" "${prof[@]}" --out "$out/$name.json" 2>"$out/$name.log" | tee "$out/$name.txt"
  echo "$name rc=$? in $((SECONDS-start)) s"
}
real_step real_step --mbs 1 2 4 --recompute none full
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True real_step expandable --mbs 1 2 4 --recompute none full
real_step compiled --mbs 1 2 4 --recompute none full --compile --framework torchtitan
# torchtitan's block layout and its op-level selective checkpointing beside no and full recompute
real_step tt_eager --blocks torchtitan --framework torchtitan --mbs 1 2 --recompute none selective full
real_step tt_compiled --blocks torchtitan --framework torchtitan --mbs 1 2 --recompute none selective full --compile
# Llama 3 8B's layer shapes (4 layers): the kernel rates at the size torchtitan's published rows train
real_step tt8b_eager --shape llama3-8b-4l --blocks torchtitan --framework torchtitan --mbs 1 2 --recompute none selective
real_step tt8b_compiled --shape llama3-8b-4l --blocks torchtitan --framework torchtitan --mbs 1 2 \
    --recompute none selective --compile
# Qwen3-30B-A3B's MoE layers (4 layers, all 128 experts local) as torchtitan runs them: grouped GEMMs, host issue time
real_step moe_eager --shape qwen3-30b-a3b-4l --blocks torchtitan --framework torchtitan --mbs 1 2 --recompute none full
real_step moe_seq1024 --shape qwen3-30b-a3b-4l --blocks torchtitan --framework torchtitan --seq 1024 --mbs 1 2 \
    --recompute none
real_step moe_compiled --shape qwen3-30b-a3b-4l --blocks torchtitan --framework torchtitan --mbs 1 \
    --recompute none full --compile
"$py" bench/fp8_accum.py --out "$out/fp8_accum.json" 2>&1 | tee "$out/fp8_accum.txt"
"$py" bench/host_overhead.py --out "$out/host_overhead.json" 2>&1 | tee "$out/host_overhead.txt"
"$py" bench/graph_memory.py --mbs 1 2 4 --out "$out/graph_memory.json" 2>&1 | tee "$out/graph_memory.txt"
