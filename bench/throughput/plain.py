"""The references bench/train_throughput.py times ours against: PlainGPT, a plain single-GPU nanoGPT (wte/wpe,
pre-LN blocks with one c_attn [3C, C], F.scaled_dot_product_attention(is_causal=True), c_proj, MLP 4C with GELU,
ln_f, tied lm_head, cross-entropy; nanoGPT's init), none of model/gpt.py's code; and TorchDDPAdapter, torch DDP
behind BucketedDDP's interface.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class PlainBlock(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.attn_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.mlp_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        x = x + self.attn_dropout(self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C)))
        return x + self.mlp_dropout(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class PlainGPT(nn.Module):
    """nanoGPT's GPT (model.py) for training: same shapes, init and loss as model/gpt.py at n_tracks=1,
    none of its code. The lm_head is tied to wte (one Parameter)."""

    def __init__(self, n_layer, n_head, n_embd, vocab_size, block_size, dropout=0.0, bias=True):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([PlainBlock(n_embd, n_head, dropout, bias) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, bias=bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding=True):
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class TorchDDPAdapter(nn.Module):
    """torch DDP behind BucketedDDP's interface: its own no_sync(); its gradients are already
    averaged when backward returns, so finish_gradient_synchronization() has nothing left to do."""

    def __init__(self, ddp, compiled):
        super().__init__()
        self.ddp = ddp
        self.call = torch.compile(ddp, fullgraph=False) if compiled else ddp

    def forward(self, *args, **kwargs):
        return self.call(*args, **kwargs)

    def no_sync(self):
        return self.ddp.no_sync()

    def finish_gradient_synchronization(self):
        pass
