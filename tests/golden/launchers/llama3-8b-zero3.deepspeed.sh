# plan 0.1.0 | llama3-8b on h100x64 (64 GPUs) | plan rank 1 of 1 | target: DeepSpeed 0.19 + Hugging Face Trainer (transformers >= 4.50.1; accelerate >= 1.12 with Ulysses)
# train.py is your Trainer script (model, data, optimizer); the arguments below switch on what the plan priced
# sequences of 8192 tokens: set the length in your data pipeline (e.g. --model_max_length in Alpaca-style scripts)
cat > ds_config.json <<'EOF'
{
  "bf16": {
    "enabled": true
  },
  "gradient_accumulation_steps": 4,
  "train_batch_size": 256,
  "train_micro_batch_size_per_gpu": 1,
  "zero_optimization": {
    "contiguous_gradients": true,
    "overlap_comm": true,
    "stage": 3
  }
}
EOF
deepspeed --num_nodes 8 --num_gpus 8 train.py \
  --deepspeed ds_config.json \
  --per_device_train_batch_size 1 \
  --gradient_accumulation_steps 4 \
  --bf16
