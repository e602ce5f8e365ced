import time, numpy as np, flashindexer as fi
from flashindexer import _C, planning as FP
from bench.routines import planning as P
def med(fn, n=300):
    fn(); t=[]
    for _ in range(n):
        s=time.perf_counter_ns(); fn(); t.append(time.perf_counter_ns()-s)
    return np.median(t)/1e3
for req, pre in ((256,16),(256,64)):
    seq, query, pre = P._batch(req, pre, req+pre)
    k, q = FP._lengths(seq[:pre]), FP._lengths(query[:pre])
    raw = _C.plan_prefill_chunks(k, q, P.WORKSPACE_KEYS, P.LOGITS_BYTES, 0)
    chunks = FP.plan_prefill_chunks(k, q, P.WORKSPACE_KEYS, P.LOGITS_BYTES)
    print("raw C", med(lambda: _C.plan_prefill_chunks(k, q, P.WORKSPACE_KEYS, P.LOGITS_BYTES, 0)),
          "lengths", med(lambda: (FP._lengths(seq[:pre]), FP._lengths(query[:pre]))),
          "tolist+tuples", med(lambda: [FP.PrefillChunk(rb, re, qb, qe, tb, te, n, g != 0) for rb, re, qb, qe, tb, te, n, g in raw.tolist()]),
          "np.array(chunks)", med(lambda: np.array(chunks, dtype=np.int64)),
          "empty x2", med(lambda: (np.empty(120557, np.int32), np.empty(120557, np.int32))))
    n = int((raw[:,3]-raw[:,2]).sum()); ks=np.empty(n,np.int32); ke=np.empty(n,np.int32); f=raw.reshape(-1).copy()
    print(" C bounds into reused buffers", med(lambda: _C.build_prefill_step_row_bounds(ks, ke, f, k, q, 1, 1, 1, 0)), "rows", n)
