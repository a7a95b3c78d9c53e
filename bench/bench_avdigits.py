"""Throughput of seed 002's Table 1 models (``icl-avdigits``).

Prints, in one process:

1. examples/s of one training step (forward, backward, AdamW) of each of the five models (full,
   no injection, no cross-attn, neither, bi-CA) as one ensemble of E members vs E single models trained
   one after the other, and the ratio (examples counted per member: E × batch per ensemble step);
2. the conv tokeniser's two ways to run E members: one grouped convolution (``groups = 2E``, what
   :class:`tdlab.models.multimodal_ca.DualConvEncoder` does) vs ``torch.func.vmap`` of the one-member
   convolutions over stacked parameters (forward + backward).

Usage: ``python bench/bench_avdigits.py [--members 4] [--batch 64] [--steps 3] [--device cpu] [--threads 1]``
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from timing import best_time

from tdlab.models.multimodal_ca import BiCAConfig, BidirectionalCA, DualConvEncoder, MultimodalCA, MultimodalCAConfig
from tdlab.seeding import generators, member_seeds

MODELS = {
    "full": lambda s: MultimodalCA(MultimodalCAConfig(), s),
    "no-injection": lambda s: MultimodalCA(MultimodalCAConfig(inject=False), s),
    "no-cross": lambda s: MultimodalCA(MultimodalCAConfig(cross=False), s),
    "neither": lambda s: MultimodalCA(MultimodalCAConfig(inject=False, cross=False), s),
    "bi-ca": lambda s: BidirectionalCA(BiCAConfig(), s),
}


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def train_steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, device: str) -> None:
    """``steps`` AdamW steps of the summed per-member cross-entropy on one fixed batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4)
    for _ in range(steps):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    sync(device)


def vmap_encoder(enc: DualConvEncoder):
    """The same encoder as ``torch.func.vmap`` over members of one member's convolutions."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in enc.named_parameters()}

    def one(p: dict, x: torch.Tensor) -> torch.Tensor:  # x (B, 2, H, W), p without the member axis
        outs = []
        for m, ln in ((0, "ln_image"), (1, "ln_audio")):
            h = x[:, m : m + 1]
            for i in range(4):
                h = F.relu(F.conv2d(h, p[f"convs.{i}.weight"][m], p[f"convs.{i}.bias"][m], padding=1))
                if i in (1, 3):
                    h = F.max_pool2d(h, 2)
            h = F.adaptive_avg_pool2d(h, 4).flatten(2).transpose(1, 2)
            outs.append(F.layer_norm(h, h.shape[-1:], p[f"{ln}.weight"], p[f"{ln}.bias"]))
        return torch.stack(outs, 1)

    return params, torch.func.vmap(one)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    E, B, dev = args.members, args.batch, args.device
    seeds = member_seeds(0, E)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(E, B, 2, 28, 28, generator=g).to(dev)
    y = torch.randint(0, 10, (E, B), generator=g).to(dev)
    print(
        f"seed 002 Table 1 models (d 16, T 10, 4 heads, d_h 32), batch {B}, {args.steps} steps, E = {E}, "
        f"device {dev}, {torch.get_num_threads()} threads; examples/s counted per member"
    )
    for name, make in MODELS.items():
        ens = make(seeds).to(dev)
        singles = [make([s]).to(dev) for s in seeds]
        t_ens = best_time(lambda ens=ens: train_steps(ens, x, y, args.steps, dev), repeats=2)
        t_loop = best_time(
            lambda singles=singles: [
                train_steps(m, x[e : e + 1], y[e : e + 1], args.steps, dev) for e, m in enumerate(singles)
            ],
            repeats=1,
        )
        n = E * B * args.steps
        print(
            f"  {name:13s} ensemble: {n / t_ens:8.1f} ex/s   loop over {E} members: {n / t_loop:8.1f} ex/s   "
            f"ensemble/loop x{t_loop / t_ens:.2f}"
        )
    enc = DualConvEncoder(E, MultimodalCAConfig()).to(dev)
    enc.reset_parameters(generators(seeds, "init"))
    params, venc = vmap_encoder(enc)
    with torch.no_grad():
        diff = (enc(x) - venc(params, x)).abs().max().item()

    def grouped() -> None:
        enc(x).sum().backward()
        sync(dev)

    def vmapped() -> None:
        venc(params, x).sum().backward()
        sync(dev)

    t_g, t_v = best_time(grouped, repeats=3), best_time(vmapped, repeats=3)
    print(
        f"  conv tokeniser, forward + backward, E = {E}: grouped conv {E * B / t_g:8.1f} ex/s   vmap {E * B / t_v:8.1f} ex/s"
        f"   grouped/vmap x{t_v / t_g:.2f}   (max |difference| {diff:.1e})"
    )


if __name__ == "__main__":
    main()
