# config/docs_124m.py
# The study's 124M runs (issue 26): GPT-2 124M, 4 tracks, one pass over 21M tokens of data/debian_docs.
# Each policy and seed is one run of python -m experiments.char_sweep.run (parts d768-s1337 ...), e.g. by hand:
#   python train_reduced_sync.py config/docs_124m.py --sync_policy=grouped:3 --seed=1338 --out_dir=out-docs-g3-s1338
# About 1-1.5 min of one H100 per run after compilation (experiments/docs_study/one_budget/README.md, "GPU time").

out_dir = 'out-docs-124m'
sync_policy = 'baseline'

# I/O, evaluation, logging: 11 evals of the same 20 x 16 x 1024 val tokens in every run
eval_interval = 64
eval_iters = 20
log_interval = 16
eval_only = False
always_save_checkpoint = True
init_from = 'scratch'

# data: 16 * 1024 * 2 = 32,768 tokens per iteration, 640 iterations = 20,971,520 tokens, read once
# (the train split holds about 24,600 windows of 1024; 640 iterations read 20,480 of them)
dataset = 'debian_docs'
data_order = 'one_pass'
gradient_accumulation_steps = 2
batch_size = 16
block_size = 1024

# model: GPT-2 124M split into 4 tracks (as config/train_*.py)
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
n_tracks = 4
tp = 'auto'  # 1 process: tp 1 (as the study ran); 8: dp 2 x tp 4

# AdamW, nanoGPT's GPT-2 values; warmup and cosine decay scaled to the 640 iterations (10% warmup)
learning_rate = 6e-4
max_iters = 640
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 64
lr_decay_iters = 640
min_lr = 6e-5

# system
device = 'auto'
dtype = 'auto'  # bfloat16 on a GPU that has it
compile = True
seed = 1337
