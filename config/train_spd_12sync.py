# config/train_spd_12sync.py
# GPT-2 124M on OpenWebText, 12 syncs per forward pass: Sync-Point Drop: no all-reduce after attention, one after every MLP.
# The name counts syncs: 12sync = 12 all-reduces per forward pass, here sync_policy = 'spd'.
# 8 GPUs: torchrun --standalone --nproc_per_node=8 train_reduced_sync.py config/train_spd_12sync.py
# The 8 config/train_*.py files differ only in sync_policy and out_dir (tests/test_configs.py checks).

out_dir = 'out-spd-12sync'
sync_policy = 'spd'

# I/O, evaluation, logging
eval_interval = 1000
eval_iters = 200
log_interval = 10
eval_only = False
always_save_checkpoint = True
init_from = 'scratch'
wandb_log = False
wandb_project = 'reduced-sync'

# data: 12 * 1024 * 40 = 491,520 tokens per iteration
dataset = 'openwebtext'
gradient_accumulation_steps = 5 * 8  # total over the DP replicas (divided by dp, as in nanoGPT)
batch_size = 12  # per micro-step per DP replica
block_size = 1024

# model: GPT-2 124M split into 4 tracks
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
n_tracks = 4
tp = 'auto'  # 8 GPUs: dp 2 x tp 4; 4 GPUs: tp 4; 2: tp 2; 1: tp 1 (the accumulation of 40 splits over every dp)

# AdamW, cosine decay to min_lr
learning_rate = 6e-4
max_iters = 20000
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 2000
lr_decay_iters = 20000
min_lr = 6e-5

# system
device = 'auto'
dtype = 'auto'
compile = 'auto'  # on CUDA compiled + CUDA graphs at every tp, on CPU eager; the log's 'compile:' line says which
seed = 1337
