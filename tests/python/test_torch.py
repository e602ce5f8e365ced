# SPDX-License-Identifier: Apache-2.0
"""PyTorch: tensors through the plain API, the torch.library custom ops (opcheck, torch.compile),
and CUDA tensors on the current stream (top-k, scoring, the indexer; CUDA graph capture;
torch.compile of an indexer layer)."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference

torch = pytest.importorskip("torch")
fit = pytest.importorskip("flashindexer.torch")
from torch.library import opcheck  # noqa: E402


def _prefill(rows=6, n=300, heads=32, dim=128, device="cpu"):
    generator = torch.Generator().manual_seed(1234)
    q = fi.quantize_k_fp8(torch.randn(rows * heads, dim, generator=generator)).values
    keys = fi.quantize_k_fp8(torch.randn(n, dim, generator=generator))
    weights = torch.randn(rows, heads, generator=generator)
    ke = torch.randint(0, n + 1, (rows,), generator=generator, dtype=torch.int32)
    ks = (ke // 3).to(torch.int32)
    tensors = (q.reshape(rows, heads, dim), keys.values, keys.scales, weights, ks, ke)
    return tuple(t.to(device) for t in tensors)


def test_float8_tensors_go_through_the_plain_api():
    q, kv, kscale, weights, ks, ke = _prefill()
    assert q.dtype == torch.float8_e4m3fn and kv.dtype == torch.float8_e4m3fn
    top = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 16, sorted=True)
    assert top.dtype == torch.int32 and top.shape == (6, 16)
    logits = fi.mqa_logits(q, (kv, kscale), weights, ks, ke)
    assert torch.equal(top, fi.topk_per_row(logits, 16, ks=ks, ke=ke, sorted=True))
    # uint8 views and the NumPy forms give the same answer.
    same = fi.indexer_prefill(q.view(torch.uint8), (kv.view(torch.uint8), kscale), weights, ks,
                              ke, 16, sorted=True)
    assert torch.equal(top, same)
    np.testing.assert_array_equal(
        top.numpy(), reference.topk_per_row(logits, 16, ks=ks.numpy(), ke=ke.numpy()))


def test_bfloat16_input_and_strided_torch_output():
    x = torch.randn(8, 128, dtype=torch.bfloat16)
    values, scales = fi.quantize_k_fp8(x)
    expected_values, expected_scales = reference.quantize_k_fp8(x)
    np.testing.assert_array_equal(values.view(torch.uint8).numpy(), expected_values)
    np.testing.assert_array_equal(scales.numpy(), expected_scales)
    logits = torch.randn(4, 256)
    out = torch.full((4, 24), 7, dtype=torch.int32)
    fi.topk_per_row(logits, 16, lengths=torch.full((4,), 256, dtype=torch.int32), out=out[:, :16])
    assert (out[:, 16:] == 7).all() and (out[:, :16] >= 0).all()


def _opcheck_cases():
    q, kv, kscale, weights, ks, ke = _prefill()
    q8, kv8 = q.view(torch.uint8), kv.view(torch.uint8)  # allclose has no float8 kernel on CPU
    logits = fit.mqa_logits(q, (kv, kscale), weights, ks, ke)
    generator = np.random.default_rng(5)
    sequences = [torch.from_numpy(generator.standard_normal((n, 128), np.float32))
                 for n in (20, 45)]
    paged = fi.build_k_cache(sequences, page_size=16)
    cache = paged.cache
    q_decode = fi.quantize_k_fp8(torch.randn(2 * 32, 128)).values.view(torch.uint8)
    q_decode = q_decode.reshape(2, 1, 32, 128)
    w_decode = torch.randn(2, 32)
    layout = (cache.page_size, cache.head_dim, cache.format)
    cu = torch.tensor([0, 20, 65], dtype=torch.int32)
    ops = torch.ops.flashindexer
    return {
        "quantize_k_fp8": (ops.quantize_k_fp8, (torch.randn(4, 128),)),
        "dequantize_k_fp8": (ops.dequantize_k_fp8, (kv8, kscale)),
        "quantize_mxfp4": (ops.quantize_mxfp4, (torch.randn(3, 32, 64),)),
        "dequantize_mxfp4": (ops.dequantize_mxfp4, tuple(fi.quantize_mxfp4(torch.randn(3, 64)))),
        "insert_k_cache": (ops.insert_k_cache,
                           (cache.data.clone(), torch.randn(3, 128),
                            torch.tensor([0, 5, 40]), *layout)),
        "gather_k_workspace": (ops.gather_k_workspace,
                               (cache.data, *layout, paged.block_table, cu, 65)),
        "mqa_logits": (ops.mqa_logits, (q8, None, kv8, kscale, weights, ks, ke, True)),
        "paged_mqa_logits": (ops.paged_mqa_logits,
                             (q_decode, None, cache.data, *layout, w_decode, paged.seq_lens,
                              paged.block_table, 48, True)),
        "topk_per_row": (ops.topk_per_row, (logits, 8, ks, ke, None, 1, True)),
        "topk_per_row_out": (ops.topk_per_row_out,
                             (torch.empty(6, 8, dtype=torch.int32), logits, 8, ks, ke, None, 1,
                              False)),
        "indexer_prefill": (ops.indexer_prefill, (q8, None, kv8, kscale, weights, ks, ke, 8,
                                                  True)),
        "indexer_decode": (ops.indexer_decode,
                           (q_decode, None, cache.data, *layout, w_decode, paged.seq_lens,
                            paged.block_table, 8, True)),
    }


@pytest.mark.parametrize("name", [
    "quantize_k_fp8", "dequantize_k_fp8", "quantize_mxfp4", "dequantize_mxfp4", "insert_k_cache",
    "gather_k_workspace", "mqa_logits", "paged_mqa_logits", "topk_per_row", "topk_per_row_out",
    "indexer_prefill", "indexer_decode"])
def test_custom_op_passes_opcheck(name):
    op, args = _opcheck_cases()[name]
    opcheck(op, args)


def test_custom_ops_under_torch_compile():
    q, kv, kscale, weights, ks, ke = _prefill()

    def select(q, kv, kscale, weights, ks, ke):
        logits = fit.mqa_logits(q, (kv, kscale), weights, ks, ke)
        return fit.indexer_prefill(q, (kv, kscale), weights, ks, ke, 16, sorted=True), \
            fit.topk_per_row(logits, 16, ks=ks, ke=ke, sorted=True)

    compiled = torch.compile(select, fullgraph=True, dynamic=True)
    fused, dense = compiled(q, kv, kscale, weights, ks, ke)
    assert torch.equal(fused, dense)
    assert torch.equal(fused, fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 16,
                                                 sorted=True))


def test_insert_k_cache_op_mutates_the_cache():
    cache = fi.empty_k_cache(2, 16, 128, like=torch.zeros(1))
    fit.insert_k_cache(cache, torch.ones(3, 128), torch.tensor([0, 1, 17]))
    assert cache.data.sum() > 0


# ------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU and the CUDA backend)


def test_topk_on_cuda_matches_cpu_and_uses_the_current_stream(cuda_torch):
    logits = torch.randn(3, 50_000)
    lengths = torch.tensor([50_000, 1000, 0], dtype=torch.int32)
    expected = fi.topk_per_row(logits, 2048, lengths=lengths, sorted=True)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        top = fi.topk_per_row(logits.cuda(), 2048, lengths=lengths.cuda(), sorted=True)
    stream.synchronize()
    assert torch.equal(top.cpu(), expected)
    explicit = fi.topk_per_row(logits.cuda(), 2048, lengths=lengths.cuda(), sorted=True,
                               stream=torch.cuda.current_stream())
    assert torch.equal(explicit.cpu(), expected)


def test_topk_custom_op_is_cuda_graph_capturable(cuda_torch):
    logits = torch.randn(4, 20_000, device="cuda")
    lengths = torch.full((4,), 20_000, dtype=torch.int32, device="cuda")
    expected = fit.topk_per_row(logits, 512, lengths=lengths, sorted=True)
    fit.topk_per_row(logits, 512, lengths=lengths, sorted=True)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fit.topk_per_row(logits, 512, lengths=lengths, sorted=True)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, expected)


def test_dequantize_on_cuda(cuda_torch):
    values, scales = fi.quantize_k_fp8(torch.randn(64, 128))
    expected = fi.dequantize_k_fp8(values, scales)
    assert torch.equal(fi.dequantize_k_fp8(values.cuda(), scales.cuda()).cpu(), expected)


def test_indexer_prefill_on_cuda_equals_the_dense_pair_on_a_side_stream(cuda_torch):
    q, kv, kscale, weights, ks, ke = _prefill(rows=40, n=5000, heads=64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        top = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 512, sorted=True)
        logits = fi.mqa_logits(q, (kv, kscale), weights, ks, ke)
        dense = fi.topk_per_row(logits, 512, ks=ks, ke=ke, sorted=True)
    stream.synchronize()
    assert torch.equal(top, dense)
    # The CPU selection over the same GPU scores agrees too.
    assert torch.equal(top.cpu(), fi.topk_per_row(logits.cpu(), 512, ks=ks.cpu(), ke=ke.cpu(),
                                                  sorted=True))


def test_indexer_default_workspace_is_kept_per_stream_and_k(cuda_torch):
    from flashindexer import ops

    q, kv, kscale, weights, ks, ke = _prefill(rows=40, n=5000, heads=64, device="cuda")
    ops._default_workspaces.clear()
    first = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 512, sorted=True)
    kept = dict(ops._default_workspaces)
    again = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 512, sorted=True)
    assert len(kept) == 1 and len(ops._default_workspaces) == 1  # the second call allocated none
    assert next(iter(kept.values())) is next(iter(ops._default_workspaces.values()))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # calls that may overlap never share one
        side = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 512, sorted=True)
    stream.synchronize()
    fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 256, sorted=True)
    assert len(ops._default_workspaces) == 3
    assert torch.equal(first, again) and torch.equal(first, side)


@pytest.mark.parametrize("path", ["dense", "fused"])
def test_indexer_prefill_paths_on_cuda_agree_on_gated_rows(cuda_torch, path):
    # 20000 keys: more than the fused path's 8192 candidate slots, so its rows are gated.
    q, kv, kscale, weights, ks, ke = _prefill(rows=24, n=20000, heads=64, device="cuda")
    top = fi.indexer_prefill(q, (kv, kscale), weights, ks, ke, 2048, sorted=True, path=path)
    logits = fi.mqa_logits(q, (kv, kscale), weights, ks, ke)
    assert torch.equal(top, fi.topk_per_row(logits, 2048, ks=ks, ke=ke, sorted=True))


def test_indexer_decode_on_cuda_equals_the_dense_pair(cuda_torch):
    generator = torch.Generator().manual_seed(7)
    sequences = [torch.randn(n, 128, generator=generator) for n in (9000, 3, 700)]
    paged = fi.build_k_cache(sequences, page_size=64, shuffle_pages=True, seed=3)
    cache = fi.PagedKCache(paged.cache.data.cuda(), 64, 128, "fp8")
    q = fi.quantize_k_fp8(torch.randn(3 * 2 * 64, 128, generator=generator)).values
    q = q.reshape(3, 2, 64, 128).cuda()
    weights = torch.randn(6, 64, generator=generator).cuda()
    lens, table = paged.seq_lens.cuda(), paged.block_table.cuda()
    top = fi.indexer_decode(q, cache, weights, lens, table, 2048, sorted=True)
    logits = fi.paged_mqa_logits(q, cache, weights, lens, table)
    assert torch.equal(top, fi.topk_per_row(logits, 2048, lengths=lens, next_n=2, sorted=True))
    assert torch.equal(top.cpu(), fi.topk_per_row(logits.cpu(), 2048, lengths=lens.cpu(),
                                                  next_n=2, sorted=True))


def test_indexer_layer_compiles_and_replays_in_a_cuda_graph(cuda_torch):
    q, kv, kscale, hidden, ks, ke = _prefill(rows=16, n=3000, heads=64, device="cuda")

    def layer(q, kv, kscale, hidden, ks, ke):
        weights = hidden * 2.0 + 1.0  # exact in fp32, so eager and compiled agree bit for bit
        return fit.indexer_prefill(q, (kv, kscale), weights, ks, ke, 256, sorted=True)

    compiled = torch.compile(layer, fullgraph=True)
    expected = fi.indexer_prefill(q, (kv, kscale), hidden * 2.0 + 1.0, ks, ke, 256, sorted=True)
    assert torch.equal(compiled(q, kv, kscale, hidden, ks, ke), expected)

    layer(q, kv, kscale, hidden, ks, ke)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer(q, kv, kscale, hidden, ks, ke)
    hidden.mul_(-1.0)  # new data for the replay
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, layer(q, kv, kscale, hidden, ks, ke))


def test_mxfp4_on_cuda_matches_the_cpu_backend(cuda_torch):
    torch.manual_seed(0)
    values, scales = fi.quantize_mxfp4(torch.randn(6 * 32, 128))
    q = (values.reshape(6, 32, 64), scales.reshape(6, 32, 4))
    keys = fi.quantize_mxfp4(torch.randn(300, 128))
    weights = torch.randn(6, 32)
    ks = torch.zeros(6, dtype=torch.int32)
    ke = torch.tensor([0, 1, 63, 64, 299, 300], dtype=torch.int32)
    expected = fi.mqa_logits(q, (keys.values, keys.scales), weights, ks, ke)
    got = fi.mqa_logits(tuple(t.cuda() for t in q), (keys.values.cuda(), keys.scales.cuda()),
                        weights.cuda(), ks.cuda(), ke.cuda()).cpu()
    visible = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(got), visible)
    x, y = got[visible].double(), expected[visible].double()
    assert 1 - 2 * (x * y).sum() / (x * x + y * y).sum() < 5e-6


def test_mixed_devices_are_a_value_error(cuda_torch):
    logits = torch.randn(2, 100, device="cuda")
    with pytest.raises(ValueError, match="lengths"):
        fi.topk_per_row(logits, 4, lengths=torch.full((2,), 100, dtype=torch.int32))
