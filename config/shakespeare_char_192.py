# config/shakespeare_char_192.py
# The narrower variant of config/shakespeare_char_384.py (nanoGPT's shakespeare_char recipe): n_embd 192,
# still 6 heads (so head dim 32: n_head must stay divisible by n_tracks 2 and 6), about 1/4 the parameters
# in the blocks; everything else identical (tests/test_configs.py checks that the two differ only in n_embd
# and out_dir). For the issue-15 study's width trend: a run costs 0.27x a w384 run's FLOPs, where
# the 768 variant costs 3.8x, so this is the second width that fits the device time.
# python -m experiments.char_sweep.run sets n_tracks, sync_policy, seed and out_dir on the command line.
# Prepare: python data/shakespeare_char/prepare.py
# 1 process:  python train_reduced_sync.py config/shakespeare_char_192.py --n_tracks=6 --sync_policy=grouped:3
# N processes: torchrun --standalone --nproc_per_node=N train_reduced_sync.py config/shakespeare_char_192.py \
#     --gradient_accumulation_steps=8 --batch_size=8   (N = 1, 2, 4, 8; any n_tracks)
#   the same 64 sequences per iteration in 8 micro-steps of 8: the recipe's one micro-step of 64 cannot be
#   split over dp > 1 replicas (tp='auto' is at most 2 at n_tracks 2 or 6, so 4 processes make dp 2);
#   evals then average eval_iters batches of 8, not of 64
# n_head 6 is divisible by n_tracks 1, 2, 3 and 6; the function does not depend on tp.

out_dir = 'out-shakespeare-char-192'
sync_policy = 'baseline'
n_tracks = 2

# I/O, evaluation, logging (nanoGPT: eval every 250 iterations on 200 batches)
eval_interval = 250
eval_iters = 200
log_interval = 50  # nanoGPT: 10. Logging only; 50 keeps metrics.jsonl small enough to commit
eval_only = False
always_save_checkpoint = False  # save only when val loss improves (nanoGPT)
init_from = 'scratch'
wandb_log = False
wandb_project = 'shakespeare-char'

# data: 64 x 256 = 16,384 characters per iteration
dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256

# model: nanoGPT's baby GPT at half the width (head dim 32)
n_layer = 6
n_head = 6
n_embd = 192
dropout = 0.2
bias = False  # nanoGPT's default
tp = 'auto'  # the largest divisor of n_tracks that divides the world size

# AdamW, cosine decay to min_lr (nanoGPT's values; weight_decay, beta1, grad_clip are its train.py defaults)
learning_rate = 1e-3
max_iters = 5000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
decay_lr = True
warmup_iters = 100
lr_decay_iters = 5000
min_lr = 1e-4

# system
device = 'auto'
dtype = 'auto'  # bfloat16 autocast on CUDA, float32 on CPU
compile = False
seed = 1337
