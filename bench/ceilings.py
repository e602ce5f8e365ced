# SPDX-License-Identifier: Apache-2.0
"""The same-run ceilings every rate is read against.

GPU: torch._scaled_mm FP8 8192^3 (TFLOP/s) and a 2 GiB device-to-device copy (GB/s, read +
write), each measured two ways. "Burst": the median of `iters` calls right after start-up, at
the clocks of a GPU that has been idle. "Sustained": after `warm_ms` of the same op, the way the
scoring cases are measured: under sustained FP8 tensor load an H200 runs at its 700 W board
limit (measured: the GEMM at ~1.4 GHz and ~690 W, the prefill scoring kernel at ~1.7 GHz and
~690 W, against 1.98 GHz at boost), so the burst GEMM ceiling is ~15 % above what the GEMM
sustains.

CPU: NumPy's fp32 matmul (the BLAS it links, all threads) and a streaming read (a sum over a
buffer far larger than the caches). They bound what the CPU backend can reach for the scoring
(FLOP) and the top-k (bytes read).
"""
from .timing import cpu_median_ms, event_median_ms, graph_ms, warm_up


class GpuCeilings:
    def __init__(self, iters=10, warm_ms=300):
        import torch

        self.warm_ms = warm_ms
        self._gemm(iters, warm_ms)
        self._copy(iters, warm_ms)
        torch.cuda.empty_cache()

    def _gemm(self, iters, warm_ms):
        import torch

        n = 8192
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")

        def mm():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        self.fp8_tflops = 2 * n ** 3 / event_median_ms(mm, iters) / 1e9
        # As a CUDA graph, replayed like the scoring cases.
        self.fp8_tflops_sustained = 2 * n ** 3 / graph_ms(mm, 4, iters, warm_ms) / 1e9

    def _copy(self, iters, warm_ms):
        import torch

        src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)

        def copy():
            dst.copy_(src)

        # Eager: a captured copy becomes a memcpy node, which measured ~35 % slower than the
        # eager copy kernel.
        self.copy_gbs = 2 * src.numel() / event_median_ms(copy, iters) / 1e6
        warm_up(copy, warm_ms)
        self.copy_gbs_sustained = 2 * src.numel() / event_median_ms(copy, iters) / 1e6

    def describe(self):
        return (f"torch._scaled_mm FP8 8192^3 {self.fp8_tflops_sustained:.0f} TFLOP/s sustained "
                f"(after {self.warm_ms} ms) / {self.fp8_tflops:.0f} burst; device copy "
                f"{self.copy_gbs_sustained:.0f} GB/s sustained / {self.copy_gbs:.0f} burst "
                f"(read + write)")


class CpuCeilings:
    def __init__(self, repeats=3):
        import numpy as np

        n = 2048
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        b = a.T.copy()
        # The best of the repeats: a ceiling is what the machine reaches, not its typical time.
        best = min(cpu_median_ms(lambda: a @ b, 1) for _ in range(repeats + 2))
        self.matmul_gflops = 2 * n ** 3 / best / 1e6
        buffer = np.ones(1 << 26, dtype=np.float32)  # 256 MiB, far beyond the caches
        read_ms = min(cpu_median_ms(buffer.sum, 1) for _ in range(repeats))
        self.read_gbs = buffer.nbytes / read_ms / 1e6

    def describe(self):
        return (f"NumPy fp32 matmul 2048^3 {self.matmul_gflops:.0f} GFLOP/s, streaming read "
                f"(NumPy sum over 256 MiB) {self.read_gbs:.1f} GB/s")
