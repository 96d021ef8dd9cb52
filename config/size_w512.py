# config/size_w512.py
# The size axis of the budget study: GPT-2 124M's depth (12 layers) at width 512 (8 heads of 64), 4 tracks,
# 63.5M parameters as the trainer counts them (all but the position embedding; 37.8M without the token embedding either).
# Same data, schedule and budgets in iterations as config/docs_124m.py; the tokens per iteration scale with the
# parameters (the rule: sequences per iteration = the nearest integer to 32 x N / 123.6M, 32 at 124M; width 384's
# 10.50 was taken as 10), so 320, 640, 1,280 and 2,560
# iterations are about 0.085, 0.17, 0.34 and 0.68 tokens per parameter at every width, and the 64 warmup iterations
# the same fraction of each budget as at 124M. Run by the budget sweep, e.g.:
#   python -m experiments.docs_study.run run --config config/size_w512.py --sweep experiments/docs_study/sizes/w512 \
#       --set gradient_accumulation_steps=1 --set batch_size=16     # as the stored runs (data: below)

out_dir = 'out-size-w512'
sync_policy = 'baseline'

# I/O, evaluation, logging: every width is scored on the same 20 x 16 x 1024 val tokens as docs_124m.py
eval_interval = 64
eval_iters = 20
eval_batch_size = 16
log_interval = 16
eval_only = False
always_save_checkpoint = True
init_from = 'scratch'

# data: 2 micro-steps x 8 x 1024 = 16,384 tokens per iteration (two, so that 8 processes, dp 2 x tp 4, can
# split them; the size sweep ran one process with the 16 sequences as one micro-step: the header's --set)
dataset = 'debian_docs'
data_order = 'one_pass'
gradient_accumulation_steps = 2
batch_size = 8
block_size = 1024

# model
n_layer = 12
n_head = 8
n_embd = 512
dropout = 0.0
bias = False
n_tracks = 4
tp = 'auto'

# AdamW as docs_124m.py (the sweep sets the WSD schedule and the budget)
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
