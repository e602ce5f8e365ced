# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V4.1 two-level selection on the GPU at V4.1-Flash numbers (H 32, k 512, candidate
blocks of cb 8 positions, C 2048 per row): the candidate source (select_candidate_blocks on the
layer's logits, and the whole source layer: the indexer with its candidate output, its own top-k
and the blocks in one call, by the dense and the fused path, beside the plain fused indexer of
the same shape, whose time the fused source layer is held to) and the dense-masked consumer (its selection on logits, candidate_topk_per_row,
and the whole consumer layer, indexer_prefill / indexer_decode with candidates: scoring, then
the selection inside the blocks), against the same operations written in PyTorch:

* source: block maxima by amax over [rows, width / cb, cb] (NaN propagates), the newest visible
  block pinned to +inf, torch.topk(C, sorted=True), -1 for -inf blocks;
* consumer: vLLM's dense mask (block flags scattered from the candidates, masked_fill -inf),
  then torch.topk(k); for the whole layer, our scoring into a logits tensor first (a PyTorch
  scoring of 4096 x 131072 pairs x 32 heads does not fit in memory), so that row's peer is
  "our scoring + PyTorch mask + top-k".

Every case first checks ours against the PyTorch answer on a few rows (the source's blocks in
order; the consumer's set: with C * cb = 16384 >> k positions of distinct random logits the exact
consumer and vLLM's mask-then-top-k select the same set). Times: CUDA-graph replays, CUDA events,
median of N, after --warm-ms of replays, warm L2, preallocated workspaces.
"""
import collections

import torch

from .. import cases
from ..inputs import DecodeInputs, PrefillInputs
from ..report import Row, Table
from ..timing import graph_ms
from .mxfp4 import KEY_BYTES, PAGE, mxfp4_cache, random_mxfp4

TITLE = "GPU V4.1 two-level selection (candidate source + dense-masked consumer)"
HEADS, K, CB, C = 32, 512, 8, 2048

Case = collections.namedtuple("Case", "name form rows keys")


def _cases(preset):
    full = [Case("prefill 4096x131072", "prefill", 4096, 131072),
            Case("decode 64x131072", "decode", 64, 131072)]
    quick = [Case("prefill 256x16384", "prefill", 256, 16384),
             Case("decode 8x16384", "decode", 8, 16384)]
    return full if preset == "full" else quick


def _consumer_cases(preset):
    """Shapes of the sparse-against-dense consumer table: the targets' shapes, and shorter
    contexts, where kAuto's choice between the two paths is made."""
    full = [Case("prefill 4096x16384", "prefill", 4096, 16384),
            Case("prefill 4096x32768", "prefill", 4096, 32768),
            Case("prefill 4096x65536", "prefill", 4096, 65536),
            Case("prefill 4096x131072", "prefill", 4096, 131072),
            Case("prefill 4096x1048576", "prefill", 4096, 1048576),
            Case("decode 64x16384", "decode", 64, 16384),
            Case("decode 64x32768", "decode", 64, 32768),
            Case("decode 64x131072", "decode", 64, 131072),
            Case("decode 64x1048576", "decode", 64, 1048576)]
    quick = [Case("prefill 256x65536", "prefill", 256, 65536),
             Case("decode 8x65536", "decode", 8, 65536)]
    return full if preset == "full" else quick


def torch_select(logits, ke, num_blocks, block_size):
    """The source in PyTorch, rows starting at column 0 (ke [rows])."""
    rows, width = logits.shape
    nblocks = -(-width // block_size)
    column = torch.arange(nblocks * block_size, device=logits.device)
    x = torch.full((rows, nblocks * block_size), float("-inf"), device=logits.device)
    x[:, :width] = logits
    x = x.masked_fill(column[None, :] >= ke[:, None], float("-inf"))
    scores = x.view(rows, nblocks, block_size).amax(dim=-1)
    scores = torch.where(scores.isnan(), float("inf"), scores)
    newest = ((ke.long() - 1).clamp(min=0) // block_size)[:, None]
    scores.scatter_(1, newest, torch.where(ke[:, None] > 0, float("inf"), float("-inf")))
    top = torch.topk(scores, min(num_blocks, nblocks), dim=1, sorted=True)
    return torch.where(top.values == float("-inf"), -1, top.indices).to(torch.int32)


def torch_consumer(logits, ke, candidates, block_size, k):
    """vLLM's dense consumer in PyTorch: the mask, then torch.topk (rows start at column 0)."""
    rows, width = logits.shape
    nblocks = -(-width // block_size)
    flags = torch.zeros(rows, nblocks + 1, dtype=torch.bool, device=logits.device)
    named = torch.where((candidates >= 0) & (candidates < nblocks), candidates, nblocks).long()
    flags.scatter_(1, named, True)
    keep = flags[:, :nblocks].repeat_interleave(block_size, dim=1)[:, :width]
    column = torch.arange(width, device=logits.device)
    keep &= column[None, :] < ke[:, None]
    return torch.topk(logits.masked_fill(~keep, float("-inf")), k, dim=1, sorted=False).indices


def _check(name, ours_blocks, torch_blocks, ours_topk, torch_topk, rows):
    for r in rows:
        assert torch.equal(ours_blocks[r], torch_blocks[r]), f"{name} row {r}: blocks differ"
        got = ours_topk[r].long().sort().values
        want = torch_topk[r].long().sort().values
        assert torch.equal(got, want), f"{name} row {r}: the consumer's set differs"


def _measure_case(ctx, fi, case, table, ceilings):
    if case.form == "prefill":
        inputs = PrefillInputs(HEADS, case.rows, case.keys, "suffix")
        ke = inputs.ke
        ks = inputs.ks
        rows = case.rows
        logits = torch.empty(rows, case.keys, device="cuda")

        def score():
            fi.mqa_logits(inputs.q, (inputs.keys, inputs.kscale), inputs.weights, ks, ke,
                          clean=False, out=logits)

        def consumer_layer(out, candidates):
            fi.indexer_prefill(inputs.q, (inputs.keys, inputs.kscale), inputs.weights, ks, ke, K,
                               out=out, workspace=indexer_workspace, candidates=candidates,
                               candidate_block_size=CB)

        def source_layer(out, source, path):
            fi.indexer_prefill(inputs.q, (inputs.keys, inputs.kscale), inputs.weights, ks, ke, K,
                               out=out, workspace=indexer_workspace, candidate_source=source,
                               candidate_source_block_size=CB if source is not None else 0,
                               path=path)
        pairs = inputs.visible_pairs()
        batch = 1
    else:
        inputs = DecodeInputs(HEADS, case.rows, case.keys)
        cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
        ke = inputs.lens2d.reshape(-1).contiguous()
        ks = None
        rows = case.rows
        logits = torch.empty(rows, inputs.width, device="cuda")

        def score():
            fi.paged_mqa_logits(inputs.q, cache, inputs.weights, inputs.lens, inputs.table,
                                clean=False, out=logits)

        def consumer_layer(out, candidates):
            fi.indexer_decode(inputs.q, cache, inputs.weights, inputs.lens, inputs.table, K,
                              out=out, workspace=indexer_workspace, candidates=candidates,
                              candidate_block_size=CB)

        def source_layer(out, source, path):
            fi.indexer_decode(inputs.q, cache, inputs.weights, inputs.lens, inputs.table, K,
                              out=out, workspace=indexer_workspace, candidate_source=source,
                              candidate_source_block_size=CB if source is not None else 0,
                              path=path)
        pairs = int(inputs.lens.long().sum())
        batch = 10
    width = logits.shape[1]
    indexer_workspace = torch.empty(fi.indexer_cuda_workspace_size(
        K, candidate_source=C, candidate_source_block_size=CB), dtype=torch.uint8, device="cuda")
    select_workspace = torch.empty(fi.candidates.select_candidate_blocks_cuda_workspace_size(
        rows, width, C, CB), dtype=torch.uint8, device="cuda")
    consumer_workspace = torch.empty(fi.candidates.candidate_topk_per_row_cuda_workspace_size(
        rows, width, C, CB, K), dtype=torch.uint8, device="cuda")
    blocks = torch.empty(rows, C, dtype=torch.int32, device="cuda")
    topk = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    layer_topk = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    source_topk = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    source_blocks = torch.empty(rows, C, dtype=torch.int32, device="cuda")

    def select():
        fi.select_candidate_blocks(logits, C, CB, ks=ks, ke=ke, out=blocks,
                                   workspace=select_workspace)

    def consume():
        fi.candidate_topk_per_row(logits, blocks, CB, K, ks=ks, ke=ke, out=topk,
                                  workspace=consumer_workspace)

    score()
    select()
    consume()
    consumer_layer(layer_topk, blocks)
    plain_topk = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    for path in ("dense", "fused"):
        source_blocks.fill_(-7)
        source_layer(source_topk, source_blocks, path)
        source_layer(plain_topk, None, path)
        torch.cuda.synchronize()
        assert torch.equal(source_blocks, blocks), \
            f"{case.name}: the {path} source layer's blocks differ"
        assert torch.equal(source_topk, plain_topk), \
            f"{case.name}: the {path} source layer's top-k differs from the plain indexer's"
    peer_blocks = torch_select(logits, ke, C, CB)
    peer_topk = torch_consumer(logits, ke, blocks, CB, K)
    sample = sorted({0, rows // 2, rows - 1})
    _check(case.name, blocks, peer_blocks, topk, peer_topk, sample)
    _check(case.name + " (consumer layer)", blocks, peer_blocks, layer_topk, peer_topk, sample)
    first = (blocks.clone(), topk.clone())
    select()
    consume()
    torch.cuda.synchronize()
    assert torch.equal(first[0], blocks) and torch.equal(first[1], topk), \
        f"{case.name}: a repeated call gave other bits"

    iters, warm = ctx.iters(10), ctx.warm_ms
    logits_bytes = rows * width * 4
    select_ms = graph_ms(select, batch, iters, warm)
    select_peer_ms = graph_ms(lambda: torch_select(logits, ke, C, CB), batch, iters, warm)
    consume_ms = graph_ms(consume, batch, iters, warm)
    consume_peer_ms = graph_ms(lambda: torch_consumer(logits, ke, blocks, CB, K), batch, iters,
                               warm)
    layer_ms = graph_ms(lambda: consumer_layer(layer_topk, blocks), batch, iters, warm)
    layer_peer_ms = graph_ms(lambda: (score(), torch_consumer(logits, ke, blocks, CB, K)), batch,
                             iters, warm)
    source_ms = {path: graph_ms(lambda: source_layer(source_topk, source_blocks, path), batch,
                                iters, warm) for path in ("dense", "fused")}
    plain_fused_ms = graph_ms(lambda: source_layer(plain_topk, None, "fused"), batch, iters, warm)
    source_peer_ms = graph_ms(
        lambda: (score(), torch_select(logits, ke, C, CB), torch.topk(logits, K, dim=1)), batch,
        iters, warm)
    copy = ceilings.copy_gbs_sustained
    for what, ms, peer_ms in (("select_candidate_blocks", select_ms, select_peer_ms),
                              ("candidate_topk_per_row", consume_ms, consume_peer_ms)):
        gbs = logits_bytes / ms / 1e6
        table.add(Row(f"{case.name} {what}", ms, peer_ms, gbs, gbs / copy, None,
                      ctx.command("candidates", case.name), None))
    flop = 2 * pairs * HEADS * 128
    tflops = flop / layer_ms / 1e9
    table.add(Row(f"{case.name} consumer layer (scoring + selection in blocks)", layer_ms,
                  layer_peer_ms, tflops, tflops / ceilings.fp8_tflops_sustained, None,
                  ctx.command("candidates", case.name), None))
    for path, ms in source_ms.items():
        tflops = flop / ms / 1e9
        table.add(Row(f"{case.name} source layer (indexer + candidate output), {path} path", ms,
                      source_peer_ms, tflops, tflops / ceilings.fp8_tflops_sustained, None,
                      ctx.command("candidates", case.name), None))
    tflops = flop / plain_fused_ms / 1e9
    table.add(Row(f"{case.name} plain fused indexer (no candidate output)", plain_fused_ms,
                  None, tflops, tflops / ceilings.fp8_tflops_sustained, None,
                  ctx.command("candidates", case.name), None))


def published_candidates(visible):
    """Candidates as a source layer would publish them for rows of `visible` positions: C
    distinct blocks inside each row (the newest one among them), in no particular order."""
    rows = visible.shape[0]
    row_blocks = (visible + CB - 1) // CB
    draw = torch.rand(rows, int(row_blocks.max()), device="cuda")
    draw[torch.arange(draw.shape[1], device="cuda")[None, :] >= row_blocks[:, None]] = -1.0
    draw.scatter_(1, (row_blocks - 1).clamp(min=0)[:, None], 2.0)
    top = torch.topk(draw, min(C, draw.shape[1]), dim=1)
    blocks = torch.full((rows, C), -1, dtype=torch.int32, device="cuda")
    blocks[:, :top.indices.shape[1]] = torch.where(top.values >= 0, top.indices, -1).int()
    return blocks


def _measure_consumer(ctx, fi, case, table, ceilings, fmt="fp8"):
    """One consumer layer both ways: the dense-masked path (all the context scored into the
    workspace's logits slab, then the selection inside the blocks) and the sparse path (only the
    candidate blocks' keys scored); the same answer, checked bit for bit. fmt: the operands'
    format, "fp8" or "mxfp4" (random E2M1 codes and scales, q and the cache or workspace)."""
    mxfp4 = fmt == "mxfp4"
    key_bytes = KEY_BYTES if mxfp4 else 132
    if case.form == "prefill":
        inputs = PrefillInputs(HEADS, case.rows, case.keys, "suffix")
        visible = (inputs.ke - inputs.ks).long()
        width = case.keys
        q = random_mxfp4((case.rows, HEADS)) if mxfp4 else inputs.q
        keys = random_mxfp4((case.keys,)) if mxfp4 else (inputs.keys, inputs.kscale)

        def layer(out, path, step_rows=None):
            fi.indexer_prefill(q, keys, inputs.weights, inputs.ks,
                               inputs.ke, K, out=out, workspace=workspace, candidates=blocks,
                               candidate_block_size=CB, path=path, candidate_rows=step_rows)

        def build_rows(out):
            fi.build_sparse_consumer_rows_prefill(blocks, CB, inputs.ks, inputs.ke, case.keys,
                                                  out=out)
        batch = 1
    else:
        inputs = DecodeInputs(HEADS, case.rows, case.keys)
        if mxfp4:
            cache = fi.PagedKCache(mxfp4_cache(inputs, inputs.page_bytes)[0], PAGE, 128, "mxfp4")
            q = random_mxfp4((case.rows, 1, HEADS))
        else:
            cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
            q = inputs.q
        visible = inputs.lens2d.reshape(-1).long()
        width = inputs.width

        def layer(out, path, step_rows=None):
            fi.indexer_decode(q, cache, inputs.weights, inputs.lens, inputs.table, K,
                              out=out, workspace=workspace, candidates=blocks,
                              candidate_block_size=CB, path=path, candidate_rows=step_rows)

        def build_rows(out):
            fi.build_sparse_consumer_rows_decode(blocks, CB, inputs.lens, inputs.table, 1, cache,
                                                 out=out)
        batch = 10
    rows = case.rows
    workspace = torch.empty(fi.indexer_cuda_workspace_size(K), dtype=torch.uint8, device="cuda")
    blocks = published_candidates(visible)
    dense_out = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    sparse_out = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    layer(dense_out, "dense")
    layer(sparse_out, "sparse")
    torch.cuda.synchronize()
    assert torch.equal(dense_out, sparse_out), f"{case.name} {fmt}: the sparse consumer differs"
    iters, warm = ctx.iters(10), ctx.warm_ms
    dense_ms = graph_ms(lambda: layer(dense_out, "dense"), batch, iters, warm)
    sparse_ms = graph_ms(lambda: layer(sparse_out, "sparse"), batch, iters, warm)
    # Bytes of the candidate blocks' keys the sparse path reads (132 per FP8 key, 68 per MXFP4).
    candidate_keys = int(torch.minimum(visible, torch.full_like(visible, C * CB)).sum())
    gbs = candidate_keys * key_bytes / sparse_ms / 1e6
    label = f"{case.name}{' MXFP4' if mxfp4 else ''}"
    table.add(Row(f"{label} consumer layer, sparse", sparse_ms, dense_ms, gbs,
                  gbs / ceilings.copy_gbs_sustained, None,
                  ctx.command("candidates", case.name), None))
    # The step's sparse rows built once (every consumer layer of a step then reads them): the
    # layer without its own rows build, and the build alone (at the targets' shapes).
    if case.keys < 131072 or mxfp4:
        return
    step_rows = torch.empty(fi.sparse_consumer_rows_size(rows, C, CB), dtype=torch.uint8,
                            device="cuda")
    build_rows(step_rows)
    shared_out = torch.empty(rows, K, dtype=torch.int32, device="cuda")
    layer(shared_out, "sparse", step_rows)
    torch.cuda.synchronize()
    assert torch.equal(shared_out, dense_out), f"{case.name}: the shared-rows consumer differs"
    shared_ms = graph_ms(lambda: layer(shared_out, "sparse", step_rows), batch, iters, warm)
    build_ms = graph_ms(lambda: build_rows(step_rows), batch, iters, warm)
    shared_gbs = candidate_keys * key_bytes / shared_ms / 1e6
    table.add(Row(f"{case.name} consumer layer, sparse, the step's rows prebuilt", shared_ms,
                  dense_ms, shared_gbs, shared_gbs / ceilings.copy_gbs_sustained, None,
                  ctx.command("candidates", case.name), None))
    table.add(Row(f"{case.name} the step's sparse rows (once a step)", build_ms, None, None,
                  None, None, ctx.command("candidates", case.name), None))


def run(ctx):
    import flashindexer as fi

    ceilings = ctx.gpu_ceilings()
    table = Table(TITLE, "ms", "PyTorch (same operation)", "GB/s or TFLOP/s",
                  "device copy or FP8 GEMM (sustained)", command=ctx.command("candidates"),
                  notes=f"H {HEADS}, k {K}, cb {CB}, C {C}; causal-suffix prefill rows, equal "
                        "decode lengths, next_n 1. Rates: logits bytes read / time against the "
                        "sustained device copy (source, consumer selection); 2 * visible pairs "
                        "* H * 128 FLOP / time against the sustained FP8 GEMM (consumer layer, "
                        "whose peer is our scoring + the PyTorch mask and top-k; source layer, "
                        "whose peer is our scoring + the PyTorch block selection and top-k).")
    ctx.start(table)
    torch.manual_seed(0)
    for case in _cases(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        _measure_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    consumer = Table("GPU V4.1 consumer layer: sparse scoring of the candidates against the "
                     "dense-masked path", "ms", "dense-masked consumer (ours)", "GB/s",
                     "device copy (sustained)", command=ctx.command("candidates"),
                     notes=f"H {HEADS}, k {K}, cb {CB}, C {C}. The dense-masked path scores "
                           "every visible key into the workspace's logits slab and selects "
                           "inside the blocks; the sparse path scores only the candidate "
                           "blocks' keys. Same answer, checked bit for bit. FP8 rows, and "
                           "MXFP4 rows (random E2M1 codes and scales) at the targets' shapes. "
                           "Rate: the candidate keys' bytes (132 per FP8 key, 68 per MXFP4 "
                           "key, min(C cb, visible) a row) / time.")
    ctx.start(consumer)
    for case in _consumer_cases(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        _measure_consumer(ctx, fi, case, consumer, ceilings)
        torch.cuda.empty_cache()
        if case.keys >= 131072 or ctx.preset != "full":
            _measure_consumer(ctx, fi, case, consumer, ceilings, "mxfp4")
            torch.cuda.empty_cache()
    return [table, consumer]
