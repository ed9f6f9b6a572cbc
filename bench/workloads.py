"""The workload suite on the GPU: bench/suite.py's request shapes and busy programs, in torch.

bench/compute_prog.py builds them in two steps, so that a tenant touches
the GPU only in its own run: Models(...) creates the weights on the CPU
(seeded) right after torch's import, before the first run of the bench;
.requests(dev) / .busy(program, dev) move them, allocate every buffer,
capture the CUDA graph and warm up, in the tenant's setup. Nothing is
allocated in the measured loop.

The transformer block is written out (layer norm, one qkv projection,
scaled_dot_product_attention, projection, MLP) rather than taken from
nn.TransformerEncoderLayer, whose fused inference path changes the number
of launches with torch's version: here a block is ~13 launches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import suite

# A request: serve one of `size` (decode: tokens to generate), return a small
# tensor of its answer (the caller copies it to the host, which waits for it).
Request = Callable[[int], torch.Tensor]
Unit = Callable[[], None]
WARM = 3  # requests or units run once in setup each: kernels loaded, cuBLAS/cuDNN set up


@dataclass(frozen=True)
class Sizes:
    """Model sizes (the suite's; tests on the CPU pass smaller ones)."""
    d: int = 1024
    heads: int = 16
    layers: int = 8
    seq_s: int = 1024       # eager-s, graph-s, eagerloop
    seq_l: int = 6144       # eager-l
    dec_d: int = 512
    dec_heads: int = 8
    dec_layers: int = 2
    vocab: int = 8192
    prompt: int = 16
    max_tokens: int = suite.DECODE_TOKENS[1]
    train_layers: int = 4
    train_batch: int = 8
    train_seq: int = 256
    mm: int = 2048          # mm2
    image: int = 224        # cnn


class Block(nn.Module):
    """A pre-norm transformer block; with a KV cache, it writes its keys and values at `pos`."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, cache: Optional[Sequence[torch.Tensor]] = None,
                pos: int = 0) -> torch.Tensor:
        b, s, d = x.shape
        # (3, b, heads, s, d/heads): the head dimension stays contiguous for the attention kernels.
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)
        causal = False
        if cache is not None:
            kc, vc = cache
            kc[:, :, pos:pos + s].copy_(k)
            vc[:, :, pos:pos + s].copy_(v)
            k, v = kc[:, :, :pos + s], vc[:, :, :pos + s]
            causal = s > 1  # the prompt attends causally; one new token attends to all before it
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x)


class Decoder(nn.Module):
    """A decoder-only language model (its head tied to the embedding) with a preallocated KV cache."""

    def __init__(self, sz: Sizes) -> None:
        super().__init__()
        self.emb = nn.Embedding(sz.vocab, sz.dec_d)
        self.blocks = nn.ModuleList(Block(sz.dec_d, sz.dec_heads) for _ in range(sz.dec_layers))
        self.ln = nn.LayerNorm(sz.dec_d)
        self.sz = sz
        self.cache: List[List[torch.Tensor]] = []

    def allocate(self) -> None:
        """The KV cache, on the model's device: a prompt and the most tokens a request generates."""
        p = self.emb.weight
        shape = (1, self.sz.dec_heads, self.sz.prompt + self.sz.max_tokens,
                 self.sz.dec_d // self.sz.dec_heads)
        self.cache = [[p.new_zeros(shape), p.new_zeros(shape)] for _ in self.blocks]

    def step(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """Logits of the last position after the tokens embedded in x, written at pos.."""
        for blk, cache in zip(self.blocks, self.cache):
            x = blk(x, cache, pos)
        return F.linear(self.ln(x[:, -1]), self.emb.weight)

    def generate(self, prompt: torch.Tensor, tokens: int) -> torch.Tensor:
        """Greedy decoding of `tokens` tokens, one host sync (.item()) per token; the last token."""
        if not 1 <= tokens <= self.sz.max_tokens:
            raise ValueError(f"tokens must be 1..{self.sz.max_tokens}, got {tokens}")
        nxt = self.step(self.emb(prompt), 0).argmax(-1)
        pos = prompt.shape[1]
        for _ in range(tokens - 1):
            tok = nxt.item()  # what a server does: the token goes back to the host
            # A host int indexes the embedding as a view: no upload per token.
            nxt = self.step(self.emb.weight[tok].view(1, 1, -1), pos).argmax(-1)
            pos += 1
        nxt.item()
        return nxt


def resnet18() -> nn.Module:
    import torchvision  # only the tenants that serve cnn pay for it
    return torchvision.models.resnet18(weights=None)


class Models:
    """The CPU-side weights a tenant needs for `names` (request shapes or busy programs)."""

    def __init__(self, names: Sequence[str], sz: Sizes = Sizes(), seed: int = 25) -> None:
        torch.manual_seed(seed)
        self.sz = sz
        need = set(names)
        self.encoder = (Encoder(sz.d, sz.heads, sz.layers).eval()
                        if need & {"eager-s", "eager-l", "graph-s", "eagerloop"} else None)
        self.decoder = Decoder(sz).eval() if "decode" in need else None
        self.cnn = resnet18().eval() if "cnn" in need else None
        # fp32 weights: it trains under bf16 autocast, as mixed-precision training does.
        self.trainee = Encoder(sz.d, sz.heads, sz.train_layers) if "train" in need else None

    def requests(self, names: Sequence[str], dev: torch.device,
                 dtype: torch.dtype = torch.float16) -> Dict[str, Request]:
        """Each shape's request, on dev, warmed up (graph-s captured). Call under no_grad."""
        out: Dict[str, Request] = {}
        sz = self.sz
        gen = torch.Generator(device="cpu").manual_seed(7)

        def rand(*shape: int) -> torch.Tensor:
            # Small values: activations stay finite through every layer.
            return (0.1 * torch.randn(*shape, generator=gen)).to(dev, dtype)

        enc = self.encoder.to(dev, dtype) if self.encoder is not None else None
        for name in names:
            if name == "mm2":
                a = rand(sz.mm, sz.mm)
                y, z = torch.empty_like(a), torch.empty_like(a)

                def mm2(_: int, a: torch.Tensor = a, y: torch.Tensor = y,
                        z: torch.Tensor = z) -> torch.Tensor:
                    torch.mm(a, a, out=y)
                    torch.mm(y, a, out=z)
                    return z[0, :8]
                out[name] = mm2
            elif name in ("eager-s", "eager-l"):
                x = rand(1, sz.seq_s if name == "eager-s" else sz.seq_l, sz.d)

                def eager(_: int, x: torch.Tensor = x) -> torch.Tensor:
                    return enc(x)[0, -1, :8]
                out[name] = eager
            elif name == "graph-s":
                out[name] = self._graph(enc, rand(1, sz.seq_s, sz.d))
            elif name == "decode":
                dec = self.decoder.to(dev, dtype)
                dec.allocate()
                prompt = torch.randint(0, sz.vocab, (1, sz.prompt), generator=gen).to(dev)

                def decode(tokens: int, dec: Decoder = dec,
                           prompt: torch.Tensor = prompt) -> torch.Tensor:
                    return dec.generate(prompt, tokens)
                out[name] = decode
            elif name == "cnn":
                cnn = self.cnn.to(dev, dtype)
                img = rand(1, 3, sz.image, sz.image)

                def conv(_: int, cnn: nn.Module = cnn, img: torch.Tensor = img) -> torch.Tensor:
                    return cnn(img)[0, :8]
                out[name] = conv
            else:
                raise ValueError(f"unknown request shape {name!r}")
            for _ in range(WARM):
                out[name](suite.largest_size(name)).cpu()
        return out

    @staticmethod
    def _graph(enc: nn.Module, x: torch.Tensor) -> Request:
        """enc(x) captured in a CUDA graph: a request is one replay of it."""
        # Warm up on a side stream before capture, as PyTorch's CUDA graph docs require.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM):
                enc(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = enc(x)

        def replay(_: int) -> torch.Tensor:
            graph.replay()
            return y[0, -1, :8]
        return replay

    def busy(self, program: str, dev: torch.device) -> Unit:
        """One unit of a busy program (train: a training step; eagerloop: an eager-s forward),
        on dev, warmed up. The caller syncs after each unit (bench/compute_prog.py AHEAD 0)."""
        sz = self.sz
        gen = torch.Generator(device="cpu").manual_seed(8)
        if program == "eagerloop":
            enc = self.encoder.to(dev, torch.float16)
            x = (0.1 * torch.randn(1, sz.seq_s, sz.d, generator=gen)).to(dev, torch.float16)

            def forward() -> None:
                with torch.no_grad():
                    enc(x)
            unit = forward
        elif program == "train":
            model = self.trainee.to(dev).train()
            # foreach: the optimizer step is a few multi-tensor launches, as torch's default on CUDA.
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
            x = torch.randn(sz.train_batch, sz.train_seq, sz.d, generator=gen).to(dev)
            target = torch.randn(sz.train_batch, sz.train_seq, sz.d, generator=gen).to(dev)
            amp = torch.bfloat16 if dev.type == "cuda" else torch.float32

            def step() -> None:
                with torch.autocast(dev.type, dtype=amp, enabled=dev.type == "cuda"):
                    loss = F.mse_loss(model(x).float(), target)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=False)  # gradients stay allocated: no allocation per step
            unit = step
        else:
            raise ValueError(f"unknown busy program {program!r}")
        for _ in range(WARM):
            unit()
        return unit
