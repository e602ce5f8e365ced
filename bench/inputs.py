# SPDX-License-Identifier: Apache-2.0
"""The GPU cases' operands as PyTorch CUDA tensors: FP8 prefill chunks and paged decode steps,
plus the PyTorch form of the scoring formula that checks them and serves as the scoring peer."""
import torch

DIM = 128
PAGE = 64


def fp8_keys(keys_bf16):
    """Per-key amax / 448 scales (DeepGEMM's test quantization): e4m3 values, fp32 scales."""
    amax = keys_bf16.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    scale = amax / 448.0
    return (keys_bf16.float() / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def row_logits(q_rows, weights_rows, keys, kscale):
    """[r, H, D] x [n, D] -> [r, n]: sum_h w * relu(q . k) * kscale, in fp32 (the op's formula)."""
    dots = torch.einsum("rhd,nd->rhn", q_rows.float(), keys.float())
    return (dots.relu() * weights_rows.float()[:, :, None]).sum(dim=1) * kscale[None, :]


def calc_diff(x, y):
    """DeepGEMM's metric: 1 - 2 sum(xy) / sum(x^2 + y^2)."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denominator) if denominator > 0 else 0.0


def ranges_for(pattern, rows, keys, device="cuda"):
    """ks / ke [rows] int32: "suffix" (the chunk's last rows, causal), "causal" (row t sees t + 1
    keys), or DeepGEMM's context-parallel "cp1" / "cp2" (two very unequal halves)."""
    t = torch.arange(rows, device=device, dtype=torch.int64)
    ks = torch.zeros(rows, dtype=torch.int64, device=device)
    if pattern == "suffix":
        ke = t + keys - rows + 1
    elif pattern == "causal":
        ke = t + 1
    else:
        cp_id = {"cp1": 1, "cp2": 2}[pattern]
        cp_size = keys // rows
        chunk = rows // 2
        ke = torch.where(t < chunk, cp_id * chunk + t + 1,
                         (2 * cp_size - 1 - cp_id) * chunk + (t - chunk) + 1)
    return ks.to(torch.int32), ke.clamp(max=keys).to(torch.int32)


def chunk_ranges(rows, keys, requests, device="cuda", pattern="suffix"):
    """ks / ke [rows] of a prefill chunk of `requests` equal requests: request j's rows (rows /
    requests of them, in order) see its own keys / requests packed keys by `pattern`."""
    if rows % requests or keys % requests:
        raise ValueError(f"{requests} requests must divide rows {rows} and keys {keys}")
    ks, ke = ranges_for(pattern, rows // requests, keys // requests, device)
    offsets = torch.arange(requests, device=device, dtype=torch.int32) * (keys // requests)
    return ((ks + offsets[:, None]).flatten(), (ke + offsets[:, None]).flatten())


class PrefillInputs:
    """Random prefill inputs: q [rows, heads, 128] e4m3 (and its bf16 source), keys [width, 128]
    e4m3 with fp32 scales kscale [width] (and their bf16 source), weights [rows, heads] fp32,
    ks / ke [rows] int32 by `pattern` (packed `requests` times)."""

    def __init__(self, heads, rows, width, pattern="suffix", requests=1, device="cuda"):
        self.heads, self.rows, self.width = heads, rows, width
        self.q_bf16 = torch.randn(rows, heads, DIM, device=device, dtype=torch.bfloat16)
        self.q = self.q_bf16.to(torch.float8_e4m3fn)
        self.keys_bf16 = torch.randn(width, DIM, device=device, dtype=torch.bfloat16)
        self.keys, self.kscale = fp8_keys(self.keys_bf16)
        self.weights = torch.randn(rows, heads, device=device)
        self.ks, self.ke = chunk_ranges(rows, width, requests, device, pattern)

    def visible_pairs(self):
        return int((self.ke.long() - self.ks.long()).clamp(min=0).sum())


class DecodeInputs:
    """A paged FP8 K cache (page 64, shuffled pages) with random keys, bf16 and FP8 queries,
    weights, context lengths ([batch] lens and the 2-D [batch, next_n] lens2d) and the block
    table of one decode step; ragged: lengths spread over 0.7-1.3 x ctx."""

    page = PAGE

    def __init__(self, heads, batch, ctx, next_n=1, ragged=False, device="cuda"):
        page = self.page
        gen = torch.Generator(device="cpu").manual_seed(batch * 7 + next_n)
        if ragged:
            lens = (ctx * (0.7 + 0.6 * torch.rand(batch, generator=gen))).long()
        else:
            lens = torch.full((batch,), ctx, dtype=torch.long)
        pages_per = (lens + page - 1) // page
        self.total_pages = int(pages_per.sum())
        self.table_cols = int(pages_per.max())
        perm = torch.randperm(self.total_pages, generator=gen)
        table = torch.zeros(batch, self.table_cols, dtype=torch.int32)
        start = 0
        for b in range(batch):
            n = int(pages_per[b])
            table[b, :n] = perm[start:start + n].int()
            start += n
        self.table = table.to(device)
        self.page_bytes = page * (DIM + 4)
        self.cache = torch.empty(self.total_pages, self.page_bytes, dtype=torch.uint8,
                                 device=device)
        self.k_bf16 = torch.randn(self.total_pages * page, DIM, device=device,
                                  dtype=torch.bfloat16)
        self.k, self.kscale = fp8_keys(self.k_bf16)
        pages = self.total_pages
        self.cache[:, :page * DIM] = self.k.view(torch.uint8).view(pages, page * DIM)
        self.cache[:, page * DIM:] = self.kscale.view(pages, page).view(torch.uint8).view(pages, -1)
        self.q_bf16 = torch.randn(batch, next_n, heads, DIM, device=device, dtype=torch.bfloat16)
        self.q = self.q_bf16.to(torch.float8_e4m3fn)
        self.weights = torch.randn(batch * next_n, heads, device=device)
        # 2-D lengths: slot j sees lens - next_n + j + 1 (the 1-D rule, written out)
        lens2d = (lens[:, None] - next_n + 1 + torch.arange(next_n)[None, :]).clamp(min=0)
        self.heads, self.batch, self.next_n = heads, batch, next_n
        self.lens = lens.to(device=device, dtype=torch.int32)
        self.lens2d = lens2d.to(torch.int32).to(device)
        self.width = int(lens.max())

    def slots(self, b):
        """The cache rows (page * 64 + offset) of request b's keys, in context order."""
        n = int(self.lens[b])
        table = self.table[b, :(n + self.page - 1) // self.page].long()
        return (table[:, None] * self.page + torch.arange(self.page, device=table.device)[None, :]
                ).reshape(-1)[:n]
