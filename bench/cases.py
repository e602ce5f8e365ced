# SPDX-License-Identifier: Apache-2.0
"""Every case of the benchmark, by routine and preset, and the anchor numbers quoted beside
them.

"full" holds the shapes of the published tables (DeepSeek V3.2's indexer: D = 128, H = 64 or
32, k = 2048 unless named; prefill chunks of causal-suffix rows over 32K-256K keys, decode
steps of 1-256 requests over 32K-128K keys, page 64). "quick" holds small shapes that run in
seconds, for a smoke test of the harness.

Anchors are other projects' kernels timed on an H200 in another run (one H200 SXM 141 GB,
132 SMs, torch 2.11 cu130; 2026-11-29 and 2026-12-01), quoted in ms: they are printed in
their own "anchor, other run" column, never as a same-run peer.
  * scoring: DeepGEMM SM90 fp8_mqa_logits / fp8_paged_mqa_logits (commit 54e2261), L2 flushed,
    clean_logits=False, page 64, equal context lengths (2026-12-01);
  * top-k: the fastest of vLLM 0.33 (top_k_per_row, persistent_topk, cooperative_topk) and
    FlashInfer 0.7.2 top_k_ragged_transform, fp32 logits, L2 flushed (2026-12-01);
  * indexer: the dense pair DeepGEMM logits + torch.topk(k = 2048), warm L2 (2026-11-29).
"""
from collections import namedtuple

# The top-k cases: rows x width logits, full rows; form prefill (ks / ke) or decode (lengths);
# dist normal N(0,1), shifted N(0,1) + 100 (a narrow band away from zero, as real indexer logits
# have), or ties (N(0,1) rounded to one decimal).
TopkCase = namedtuple("TopkCase", "name rows width k dtype form dist anchor headline")
# Prefill scoring: H, rows, keys, row pattern (bench.inputs.ranges_for).
PrefillCase = namedtuple("PrefillCase", "name heads rows keys pattern anchor headline")
# Decode scoring: H, requests, context, next_n, ragged lengths.
DecodeCase = namedtuple("DecodeCase", "name heads batch ctx next_n ragged anchor headline")
# Dequantize: keys x 128 e4m3 -> fp32.
DequantizeCase = namedtuple("DequantizeCase", "name keys")
# CPU backend: op (topk | prefill | decode), rows (requests for decode), keys, H, k.
CpuCase = namedtuple("CpuCase", "name op rows keys heads k headline")

K = 2048


def topk(preset):
    T = TopkCase
    full = [
        T("prefill 4096x131072 k=2048", 4096, 131072, 2048, "f32", "prefill", "normal", 0.900,
          "top-k prefill"),
        T("prefill 4096x131072 k=2048 N(0,1)+100", 4096, 131072, 2048, "f32", "prefill",
          "shifted", 2.770, None),
        T("prefill 4096x131072 k=512", 4096, 131072, 512, "f32", "prefill", "normal", 0.886, None),
        T("prefill 2048x262144 k=2048", 2048, 262144, 2048, "f32", "prefill", "normal", 0.703,
          None),
        T("prefill 4096x32768 k=2048", 4096, 32768, 2048, "f32", "prefill", "normal", 0.369, None),
        T("prefill 4096x32768 k=2048 ties", 4096, 32768, 2048, "f32", "prefill", "ties", 0.494,
          None),
        T("prefill 4096x32768 k=512", 4096, 32768, 512, "f32", "prefill", "normal", None, None),
        T("prefill 16384x65536 k=2048", 16384, 65536, 2048, "f32", "prefill", "normal", None,
          None),
        T("prefill 4096x131072 bf16 k=2048", 4096, 131072, 2048, "bf16", "prefill", "normal",
          None, None),
        T("decode 1x131072 k=2048", 1, 131072, 2048, "f32", "decode", "normal", 0.016,
          "top-k decode b1"),
        T("decode 1x131072 k=2048 ties", 1, 131072, 2048, "f32", "decode", "ties", 0.017, None),
        T("decode 64x32768 k=2048", 64, 32768, 2048, "f32", "decode", "normal", 0.020, None),
        T("decode 64x131072 k=2048", 64, 131072, 2048, "f32", "decode", "normal", 0.039,
          "top-k decode b64"),
        T("decode 64x131072 k=2048 ties", 64, 131072, 2048, "f32", "decode", "ties", 0.040, None),
        T("decode 128x131072 k=512", 128, 131072, 512, "f32", "decode", "normal", 0.037, None),
        T("decode 128x131072 k=512 N(0,1)+100", 128, 131072, 512, "f32", "decode", "shifted",
          0.120, None),
    ]
    quick = [
        T("prefill 512x32768 k=2048", 512, 32768, 2048, "f32", "prefill", "normal", None,
          "top-k prefill"),
        T("decode 8x65536 k=2048 ties", 8, 65536, 2048, "f32", "decode", "ties", None,
          "top-k decode"),
    ]
    return full if preset == "full" else quick


def prefill_scoring(preset):
    full = [
        PrefillCase("H64 4096x131072", 64, 4096, 131072, "suffix", 8.5420, "scoring prefill"),
        PrefillCase("H64 4096x32768", 64, 4096, 32768, "suffix", 2.0125, None),
        PrefillCase("H64 2048x262144", 64, 2048, 262144, "suffix", 8.6337, None),
        PrefillCase("H32 4096x131072", 32, 4096, 131072, "suffix", 4.7735, None),
        PrefillCase("H32 4096x32768", 32, 4096, 32768, "suffix", 1.1389, None),
        PrefillCase("H32 2048x262144", 32, 2048, 262144, "suffix", 4.8380, None),
        PrefillCase("H64 8192x65536 context-parallel", 64, 8192, 65536, "cp2", None, None),
        PrefillCase("H64 8192x8192 causal", 64, 8192, 8192, "causal", None, None),
        PrefillCase("H64 2048x8192", 64, 2048, 8192, "suffix", None, None),
        PrefillCase("H64 2048x8192 context-parallel", 64, 2048, 8192, "cp1", None, None),
        PrefillCase("H32 8192x65536 context-parallel", 32, 8192, 65536, "cp2", None, None),
    ]
    quick = [PrefillCase("H64 1024x16384", 64, 1024, 16384, "suffix", None, "scoring prefill")]
    return full if preset == "full" else quick


def decode_scoring(preset):
    full = [
        DecodeCase("H64 b1 131072", 64, 1, 131072, 1, False, 0.0121, "scoring decode b1"),
        DecodeCase("H64 b64 32768", 64, 64, 32768, 1, False, 0.0812, None),
        DecodeCase("H64 b64 131072", 64, 64, 131072, 1, False, 0.2845, "scoring decode b64"),
        DecodeCase("H64 b128 131072", 64, 128, 131072, 1, False, 0.5537, None),
        DecodeCase("H64 b256 32768", 64, 256, 32768, 1, False, 0.2845, None),
        DecodeCase("H32 b1 131072", 32, 1, 131072, 1, False, 0.0116, None),
        DecodeCase("H32 b64 131072", 32, 64, 131072, 1, False, 0.2803, None),
        DecodeCase("H32 b128 131072", 32, 128, 131072, 1, False, 0.5490, None),
        DecodeCase("H64 b64 32768 next_n 2", 64, 64, 32768, 2, False, 0.0948, None),
        DecodeCase("H64 b64 131072 next_n 2", 64, 64, 131072, 2, False, 0.3273, None),
        DecodeCase("H64 b16 65536", 64, 16, 65536, 1, False, None, None),
        DecodeCase("H32 b64 32768", 32, 64, 32768, 1, False, 0.0799, None),
        DecodeCase("H32 b256 32768", 32, 256, 32768, 1, False, 0.2807, None),
        DecodeCase("H32 b64 32768 next_n 2", 32, 64, 32768, 2, False, 0.0837, None),
        DecodeCase("H32 b64 131072 next_n 2", 32, 64, 131072, 2, False, 0.2896, None),
        DecodeCase("H64 b64 ~65536 next_n 2 ragged", 64, 64, 65536, 2, True, None, None),
        DecodeCase("H64 b256 ~65536 next_n 2 ragged", 64, 256, 65536, 2, True, None, None),
        DecodeCase("H64 b64 ~32768 next_n 3 ragged", 64, 64, 32768, 3, True, None, None),
        DecodeCase("H64 b64 ~65536 next_n 4 ragged", 64, 64, 65536, 4, True, None, None),
        DecodeCase("H32 b64 ~65536 next_n 4 ragged", 32, 64, 65536, 4, True, None, None),
    ]
    quick = [
        DecodeCase("H64 b1 16384", 64, 1, 16384, 1, False, None, "scoring decode b1"),
        DecodeCase("H64 b16 16384", 64, 16, 16384, 1, False, None, "scoring decode b16"),
    ]
    return full if preset == "full" else quick


def prefill_indexer(preset):
    full = [
        PrefillCase("H64 4096x131072", 64, 4096, 131072, "suffix", 16.45, "indexer prefill"),
        PrefillCase("H32 4096x131072", 32, 4096, 131072, "suffix", 12.38, None),
        PrefillCase("H64 2048x262144", 64, 2048, 262144, "suffix", 16.62, None),
        PrefillCase("H64 4096x32768", 64, 4096, 32768, "suffix", 4.09, None),
    ]
    quick = [PrefillCase("H64 1024x16384", 64, 1024, 16384, "suffix", None, "indexer prefill")]
    return full if preset == "full" else quick


def decode_indexer(preset):
    full = [
        DecodeCase("H64 b1 131072", 64, 1, 131072, 1, False, 0.134, "indexer decode b1"),
        DecodeCase("H64 b64 32768", 64, 64, 32768, 1, False, 0.211, None),
        DecodeCase("H64 b64 131072", 64, 64, 131072, 1, False, 0.494, "indexer decode b64"),
        DecodeCase("H64 b128 131072", 64, 128, 131072, 1, False, 0.875, None),
    ]
    quick = [
        DecodeCase("H64 b1 16384", 64, 1, 16384, 1, False, None, "indexer decode b1"),
        DecodeCase("H64 b16 16384", 64, 16, 16384, 1, False, None, "indexer decode b16"),
    ]
    return full if preset == "full" else quick


def dequantize(preset):
    if preset == "full":
        return [DequantizeCase("4M keys x 128", 1 << 22),
                DequantizeCase("256K keys x 128", 1 << 18)]
    return [DequantizeCase("256K keys x 128", 1 << 18)]


def overhead(preset):
    """Decode calls (H = 64, next_n 1, k = 2048) at these batches and context."""
    return ((1, 64), 131072) if preset == "full" else ((1, 16), 16384)


def cpu(preset):
    if preset == "full":
        return [
            CpuCase("topk 512x131072 k=2048", "topk", 512, 131072, 0, 2048, "CPU top-k"),
            CpuCase("topk 512x131072 k=512", "topk", 512, 131072, 0, 512, None),
            CpuCase("prefill 512x32768 H64 k=2048", "prefill", 512, 32768, 64, 2048,
                    "CPU prefill"),
            CpuCase("prefill 512x32768 H32 k=512", "prefill", 512, 32768, 32, 512, None),
            CpuCase("decode b16 65536 H64 k=2048", "decode", 16, 65536, 64, 2048, "CPU decode"),
            CpuCase("decode b16 65536 H32 k=512", "decode", 16, 65536, 32, 512, None),
        ]
    return [
        CpuCase("topk 32x16384 k=2048", "topk", 32, 16384, 0, 2048, "CPU top-k"),
        CpuCase("prefill 32x4096 H64 k=512", "prefill", 32, 4096, 64, 512, "CPU prefill"),
        CpuCase("decode b4 8192 H64 k=512", "decode", 4, 8192, 64, 512, "CPU decode"),
    ]


def selected(only, name):
    """--only: comma-separated substrings; a case runs when its name contains one."""
    return not only or any(part in name for part in only.split(","))
