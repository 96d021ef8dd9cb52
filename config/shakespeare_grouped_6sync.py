# config/shakespeare_grouped_6sync.py
# Small 12-layer model on Shakespeare (GPT-2 BPE), 6 syncs per forward pass: grouped tracks: one all-reduce after the MLP of every 2nd layer.
# The name counts syncs: 6sync = 6 all-reduces per forward pass, here sync_policy = 'grouped:2'.
# Prepare: python data/shakespeare/prepare.py
# 1 process:  python train_reduced_sync.py config/shakespeare_grouped_6sync.py
# N processes: torchrun --standalone --nproc_per_node=N train_reduced_sync.py config/shakespeare_grouped_6sync.py
#   (tp='auto': N = 1, 2, 4 give tp = N; 8 gives dp 2 x tp 4, each replica 1 micro-step of 4)
# Sized for 2-3 minutes on a 2-core CPU as one process (200 iterations of 512 tokens); n_layer stays 12 so the sync
# counts match the names.
# The 8 config/shakespeare_*.py files differ only in sync_policy and out_dir (tests/test_configs.py checks).

out_dir = 'out-shakespeare-grouped-6sync'
sync_policy = 'grouped:2'

# I/O, evaluation, logging
eval_interval = 100
eval_iters = 20  # x batch_size 4: 80 sequences per split
log_interval = 10
eval_only = False
always_save_checkpoint = False  # save only when val loss improves
init_from = 'scratch'
wandb_log = False
wandb_project = 'reduced-sync-shakespeare'

# data: 2 * 4 * 64 = 512 tokens per iteration (the 50304-token output layer dominates the cost on CPU).
# 2 micro-steps of 4, not 1 of 8: the total accumulation must split over dp = 2 (8 processes). The same
# training sequences as 1 x 8 (losses equal to 4 decimals over 30 iterations), other eval batches; at tp=1
# on a CPU about 20% more time per iteration (680 vs 560 ms measured)
dataset = 'shakespeare'
gradient_accumulation_steps = 2
batch_size = 4
block_size = 64

# model: 12 layers, 4 tracks of 1 head each
n_layer = 12
n_head = 4  # divisible by n_tracks
n_embd = 128
dropout = 0.0
bias = True
n_tracks = 4
tp = 'auto'  # the largest divisor of n_tracks that divides the world size; the math does not depend on tp

# AdamW, cosine decay to min_lr
learning_rate = 1e-3
max_iters = 200
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.99  # small batches: a longer second-moment average, as nanoGPT's shakespeare_char
grad_clip = 1.0
decay_lr = True
warmup_iters = 30
lr_decay_iters = 200
min_lr = 1e-4

# system
device = 'auto'
dtype = 'auto'
compile = False
seed = 1337
