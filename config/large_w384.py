# config/large_w384.py
# The budget study on data/debian_large (issue 68): GPT-2 124M's depth (12 layers) at width 384 (12 heads of 32),
# 4 tracks, 40.6M parameters as the trainer counts them. Budgets double from 392 to 12,544 iterations of 32,768
# tokens: 12.8M to 411M tokens, 0.32 to 10.1 tokens per parameter, every token read at most once (one_pass over
# the first 25 chunks of the corpus, 419M tokens: python -m data.debian_large.stage). Run by the budget sweep, e.g.:
#   python -m experiments.docs_study.run run --config config/large_w384.py --sweep experiments/large_budgets/w384 \
#       --set data_order=one_pass --set gradient_accumulation_steps=1 --set batch_size=32 \
#       --schedule cosine --budgets 12544 --jobs 4 --scratch /tmp/scratch   # one GPU per run
# or by hand: python train_reduced_sync.py config/large_w384.py --sync_policy=grouped:4 --max_iters=392 --lr_decay_iters=392

out_dir = 'out-large-w384'
sync_policy = 'baseline'

# I/O, evaluation, logging: 32 evals of the largest budget, each of the same 20 x 16 x 1024 tokens of train, val,
# val_prose and val_code in every run
eval_interval = 392
eval_iters = 20
eval_batch_size = 16
log_interval = 32
eval_only = False
always_save_checkpoint = True
init_from = 'scratch'

# data: 2 micro-steps x 16 x 1024 = 32,768 tokens per iteration (two, so that 8 processes, dp 2 x tp 4, can split
# them; the study's runs take the 32 sequences as one micro-step, one GPU each: --set gradient_accumulation_steps=1
# --set batch_size=32, which the data order depends on). The earlier size sweep's 6,144 tokens left the GPU waiting
# on kernel launches. one_pass refuses a run that would read a window twice
dataset = 'debian_large'
data_order = 'one_pass'
gradient_accumulation_steps = 2
batch_size = 16
block_size = 1024

# model
n_layer = 12
n_head = 12
n_embd = 384
dropout = 0.0
bias = False
n_tracks = 4
tp = 'auto'

# AdamW as config/size_w384.py (the sweep sets the schedule and the budget)
learning_rate = 6e-4
max_iters = 12544
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 64
lr_decay_iters = 12544
min_lr = 6e-5

# system: compile='auto' compiles with CUDA graphs on a GPU (the small widths are launch-bound without them)
device = 'auto'
dtype = 'auto'
compile = 'auto'
seed = 1337
