"""The PyTorch baseline for dequantize_k_fp8: values.float() * scales[:, None] on the GPU.

Usage: python3 tools/bench/bench_dequantize_torch.py [rows]   (default 4M keys x 128, as
bench_dequantize_cuda). Prints the median time of 50 runs with CUDA events and the GB/s moved
(bytes read + written by the op's definition: 1 B in, 4 B out per value, 4 B per scale).
"""
import sys

import torch


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22
    dim = 128
    codes = torch.randint(0, 256, (rows, dim), dtype=torch.uint8, device="cuda")
    values = codes.view(torch.float8_e4m3fn)
    scales = torch.full((rows,), 0.5, device="cuda")
    out = torch.empty(rows, dim, device="cuda")

    def dequantize() -> None:
        torch.mul(values.float(), scales[:, None], out=out)

    for _ in range(3):
        dequantize()
    times = []
    for _ in range(50):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dequantize()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    median = sorted(times)[len(times) // 2]
    moved = rows * dim * 5 + rows * 4
    print(f"| torch: values.float() * scales | {rows} x {dim} | {median:.3f} ms | "
          f"{moved / (median * 1e6):.0f} GB/s |")


if __name__ == "__main__":
    main()
