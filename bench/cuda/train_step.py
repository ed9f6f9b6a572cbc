"""A transformer encoder, forward and backward, steps per second (PyTorch)."""
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                         batch_first=True, device="cuda")
model = torch.nn.TransformerEncoder(layer, num_layers=8).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, 256, 1024, device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()


for _ in range(10):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
print(f"{steps / (time.perf_counter() - t0):.3f}")
