"""`torch.nn.Transformer` at our size and architecture as a benchmark contender (train_throughput.py, and
gpu.py's model), eager; what it is: docs/benchmarks.md, "The shared harness"."""

import math
import os
import time

from benchmarks._workloads import Contender, timed_steps


def torch_transformer(size, positions=512, padded=True, device="cpu"):
    """Our size and architecture in torch (docs/benchmarks.md): `size` has vocab, d_model, d_ff,
    heads, layers and dropout; `padded`: pad ids (0) masked out of attention (gpu.py's batches have none)."""
    import torch

    d, f, h, v, n = (size[k] for k in ("d_model", "d_ff", "heads", "vocab", "layers"))

    class TorchTransformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(v, d, padding_idx=0)
            self.core = torch.nn.Transformer(d, h, n, n, f, dropout=size["dropout"], batch_first=True)
            self.core.encoder.norm = None  # post-LN stacks end without a final norm
            self.core.decoder.norm = None
            position = torch.arange(positions).unsqueeze(1)
            div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            table = torch.zeros(positions, d)
            table[:, 0::2] = torch.sin(position * div)
            table[:, 1::2] = torch.cos(position * div)
            self.register_buffer("positions", table)
            self.dropout = torch.nn.Dropout(size["dropout"])

        def embed(self, ids):
            return self.dropout(self.embedding(ids) * math.sqrt(d) + self.positions[: ids.shape[1]])

        def forward(self, source, target):
            causal = torch.nn.Transformer.generate_square_subsequent_mask(target.shape[1], device=device)
            masks = dict(src_key_padding_mask=source == 0, memory_key_padding_mask=source == 0) if padded else {}
            hidden = self.core(self.embed(source), self.embed(target), tgt_mask=causal, tgt_is_causal=True, **masks)
            return hidden @ self.embedding.weight.T

    return TorchTransformer().to(device)


class TorchContender(Contender):
    name = "torch.nn.Transformer"
    label = "torch.nn.Transformer with a tied embedding, eager"
    backend = "torch"

    def build(self, size, policy=None):
        import torch

        if policy:
            raise ValueError(f"{self.name}: float32 only")
        torch.set_num_threads(os.cpu_count())
        torch.manual_seed(0)
        model = torch_transformer(size)
        model.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        model.loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
        model.vocab = size["vocab"]
        return model

    def train_steps(self, model, batches, steps, warmup):
        import torch

        tensors = [tuple(torch.from_numpy(a).long() for a in batch) for batch in batches]
        for step in range(warmup + steps):
            if step == warmup:
                start = time.perf_counter()
            source, target, labels = tensors[step % len(tensors)]
            logits = model(source, target)
            loss = model.loss_fn(logits.reshape(-1, model.vocab), labels.reshape(-1))
            model.optimizer.zero_grad()
            loss.backward()
            model.optimizer.step()
        return timed_steps(time.perf_counter() - start, batches, steps, warmup)


THROUGHPUT = {"torch.nn.Transformer": TorchContender()}
