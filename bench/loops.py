"""The benchmark programs: TVMScript loops over one tile per warp, and hand-written CUDA.

Every TVMScript program here is built twice, with our pipeline and with TVM's built-in
one, and checked against numpy before it is timed. The hand-written kernels are the
hardware references (what a careful CUDA programmer reaches), compiled by CuPy.
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout


def row_per_lane(k: int) -> Any:
    """Lane ``i`` owns row ``i`` of a 32 x k tile (seed 000's register layout)."""
    return TileLayout(S[(32, k) : (1 @ Axis.laneid, 1)])


WARPS = 4  # warps per CTA in the loop programs; each warp works on its own tile


def shared_loop(
    r_layout: Any,
    shape: tuple[int, int],
    dtype: str,
    ctas: int,
    s_layout: Any = None,
    add_one: bool = False,
    dispatch: str | None = None,
) -> Any:
    """Each warp's tile of A goes global -> shared, then ``iters`` times shared -> registers
    -> shared, then shared -> B. ``iters`` is a kernel argument, so the compiler cannot
    unroll the loop away. A warp barrier (``__syncwarp``, a memory fence for the compiler)
    separates the copies, so no load is forwarded from the store before it; with
    ``add_one`` the registers get +1 in between, so they must hold the right values.

    ``s_layout`` is the layout of the CTA's shared buffer, ``WARPS`` tiles stacked along
    the rows; ``dispatch`` forces a variant of ours for the two register copies.
    """
    rows, cols = shape
    tile_rows = WARPS * rows
    s_layout = s_layout if s_layout is not None else TileLayout(S[(tile_rows, cols)])
    full = (slice(0, rows), slice(0, cols))
    one = T.FloatImm(dtype, 1.0)
    kw = {"dispatch": dispatch} if dispatch else {}

    # fmt: off
    @T.prim_func
    def loop(A_ptr: T.handle, B_ptr: T.handle, iters: T.int32):
        A = T.match_buffer(A_ptr, (ctas * tile_rows, cols), dtype)
        B = T.match_buffer(B_ptr, (ctas * tile_rows, cols), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        w = T.warp_id([WARPS])
        T.lane_id([32])
        T.thread_id([WARPS * 32])
        R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        Sm = T.alloc_buffer((tile_rows, cols), dtype, scope="shared", layout=s_layout)
        g0 = bx * tile_rows + w * rows
        Tx.warp.copy(Sm[w * rows:(w + 1) * rows, 0:cols], A[g0:g0 + rows, 0:cols])
        T.cuda.warp_sync()
        for _it in T.serial(iters):
            Tx.warp.copy(R[full], Sm[w * rows:(w + 1) * rows, 0:cols], **kw)
            T.cuda.warp_sync()
            if add_one:
                Tx.warp.add(R[full], R[full], one)
            Tx.warp.copy(Sm[w * rows:(w + 1) * rows, 0:cols], R[full], **kw)
            T.cuda.warp_sync()
        Tx.warp.copy(B[g0:g0 + rows, 0:cols], Sm[w * rows:(w + 1) * rows, 0:cols])
    # fmt: on
    return loop


def elementwise_loop(
    op: str, r_layout: Any, shape: tuple[int, int], dtype: str, ctas: int, once: bool = False
) -> Any:
    """One warp per CTA: its tile of A into registers R and Q, then ``iters`` times
    ``R = op(R, Q)`` (``fma(R, Q, Q)``; ``op(R)`` for unary ops) on the registers, then
    R -> B. Q is a second tile so that no op is idempotent (``max(x, x)`` folds away).
    ``once`` applies the op a single time without the loop (for counting SASS)."""
    rows, cols = shape
    full = (slice(0, rows), slice(0, cols))
    fn = getattr(Tx.warp, op)
    arity = {"fma": 3, "add": 2, "sub": 2, "mul": 2, "maximum": 2, "minimum": 2}.get(op, 1)

    # fmt: off
    @T.prim_func
    def loop(A_ptr: T.handle, B_ptr: T.handle, iters: T.int32):
        A = T.match_buffer(A_ptr, (ctas * rows, cols), dtype)
        B = T.match_buffer(B_ptr, (ctas * rows, cols), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        Q = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        Tx.warp.copy(R[full], A[bx * rows:(bx + 1) * rows, 0:cols])
        Tx.warp.copy(Q[full], B[bx * rows:(bx + 1) * rows, 0:cols])
        for _it in T.serial(1 if once else iters):
            if arity == 3:
                fn(R[full], R[full], Q[full], Q[full])
            elif arity == 2:
                fn(R[full], R[full], Q[full])
            else:
                fn(R[full], R[full])
        Tx.warp.copy(B[bx * rows:(bx + 1) * rows, 0:cols], R[full])
    # fmt: on
    return loop


def smem_elementwise_loop(
    op: str, shape: tuple[int, int], dtype: str, ctas: int, once: bool = False
) -> Any:
    """One warpgroup per CTA: its tile of A and B into shared tiles S and Q, then ``iters``
    times ``S = op(S, Q)`` on shared memory (a barrier between: the next application reads
    what other threads wrote), then S -> B. ``once`` applies the op a single time without
    the loop (for counting SASS: the compiler unrolls the two pipelines' loops differently)."""
    rows, cols = shape
    full = (slice(0, rows), slice(0, cols))
    fn = getattr(Tx.wg, op)
    layout = TileLayout(S[shape])

    # fmt: off
    @T.prim_func
    def loop(A_ptr: T.handle, B_ptr: T.handle, iters: T.int32):
        A = T.match_buffer(A_ptr, (ctas * rows, cols), dtype)
        B = T.match_buffer(B_ptr, (ctas * rows, cols), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.warp_id([4])
        T.lane_id([32])
        T.thread_id([128])
        Sa = T.alloc_buffer(shape, dtype, scope="shared", layout=layout)
        Q = T.alloc_buffer(shape, dtype, scope="shared", layout=layout)
        Tx.wg.copy(Sa[full], A[bx * rows:(bx + 1) * rows, 0:cols])
        Tx.wg.copy(Q[full], B[bx * rows:(bx + 1) * rows, 0:cols])
        T.cuda.cta_sync()
        for _it in T.serial(1 if once else iters):
            fn(Sa[full], Sa[full], Q[full])
            T.cuda.cta_sync()
        Tx.wg.copy(B[bx * rows:(bx + 1) * rows, 0:cols], Sa[full])
    # fmt: on
    return loop


# -- hand-written CUDA references -----------------------------------------------------------
CLOCK_KERNEL = r"""
extern "C" __global__ void spin(long long cycles, long long* out) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
  out[0] = clock64() - start;
}
"""


def reg_loop_source(k: int, mode: str, group: int, period: int) -> str:
    """Four warps per CTA, each with its own 32 x k float32 tile in shared memory; lane ``i``
    owns row ``i``. ``iters`` times it loads its row's 16-byte chunks into registers, warp
    barrier, stores them back, warp barrier (volatile: ptxas cannot forward or drop them).

    ``mode``: ``plain`` (every lane in chunk order), ``rotate_address`` (the shared address
    rotates, registers do not follow: the issue's hand-written upper bound, not a correct
    copy), ``rotate_select`` (rotated, and a barrel shifter of selects puts chunks in their
    own registers, which are then pinned so the compiler cannot cancel the shifts), and
    ``rotate_branch`` (one code path per shift value, registers indexed by constants).
    """
    chunks = k // 4
    stages = (period - 1).bit_length()
    return f"""
#define K {k}
#define C {chunks}
#define GROUP {group}
#define PERIOD {period}
#define STAGES {stages}
struct V {{ unsigned x, y, z, w; }};
__device__ __forceinline__ V ld(const volatile V* p) {{
  V v; unsigned a = (unsigned)__cvta_generic_to_shared((const void*)p);
  asm volatile("ld.volatile.shared.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v; }}
__device__ __forceinline__ void st(volatile V* p, V v) {{
  unsigned a = (unsigned)__cvta_generic_to_shared((const void*)p);
  asm volatile("st.volatile.shared.v4.u32 [%0], {{%1,%2,%3,%4}};" :: "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory"); }}
__device__ __forceinline__ void pin(V& v) {{ asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)); }}
__device__ __forceinline__ V sel(bool p, V a, V b) {{ V r; r.x = p ? a.x : b.x; r.y = p ? a.y : b.y; r.z = p ? a.z : b.z; r.w = p ? a.w : b.w; return r; }}

// one code path per shift value: register indices are constants in each
template <int SH> __device__ __forceinline__ void load_const(const V* row, V* r) {{
#pragma unroll
  for (int s = 0; s < C; ++s) r[(s + SH) % C] = ld(row + (s + SH) % C);
}}
template <int SH> __device__ __forceinline__ void store_const(V* row, const V* r) {{
#pragma unroll
  for (int s = 0; s < C; ++s) st(row + (s + SH) % C, r[(s + SH) % C]);
}}

extern "C" __global__ void __launch_bounds__(128) reg_loop(const float* A, float* B, int iters) {{
  __shared__ __align__(128) V tiles[4 * 32 * C];
  int lane = threadIdx.x % 32;
  V* tile = tiles + threadIdx.x / 32 * 32 * C;  // the warp's own tile
  const V* a = (const V*)(A + (blockIdx.x * 4 + threadIdx.x / 32) * 32 * K);
  for (int i = lane; i < 32 * C; i += 32) tile[i] = a[i];
  __syncwarp();
  V* row = tile + lane * C;
  int shift = (lane / GROUP) % PERIOD;
  V r[C];
  for (int it = 0; it < iters; ++it) {{
    if ({int(mode == "plain")}) {{
#pragma unroll
      for (int s = 0; s < C; ++s) r[s] = ld(row + s);
      __syncwarp();
#pragma unroll
      for (int s = 0; s < C; ++s) st(row + s, r[s]);
      __syncwarp();
    }} else if ({int(mode == "rotate_address")}) {{
#pragma unroll
      for (int s = 0; s < C; ++s) r[s] = ld(row + (s + shift) % C);
      __syncwarp();
#pragma unroll
      for (int s = 0; s < C; ++s) st(row + (s + shift) % C, r[s]);
      __syncwarp();
    }} else if ({int(mode == "rotate_select")}) {{
      V w[C];
#pragma unroll
      for (int s = 0; s < C; ++s) w[s] = ld(row + (s + shift) % C);
#pragma unroll
      for (int b = 0; b < STAGES; ++b) {{
        V n[C];
#pragma unroll
        for (int q = 0; q < C; ++q) n[q] = sel((shift >> b) & 1, w[(q + C - (1 << b)) % C], w[q]);
#pragma unroll
        for (int q = 0; q < C; ++q) w[q] = n[q];
      }}
#pragma unroll
      for (int q = 0; q < C; ++q) {{ r[q] = w[q]; pin(r[q]); }}
      __syncwarp();
#pragma unroll
      for (int q = 0; q < C; ++q) w[q] = r[q];
#pragma unroll
      for (int b = STAGES - 1; b >= 0; --b) {{
        V n[C];
#pragma unroll
        for (int q = 0; q < C; ++q) n[q] = sel((shift >> b) & 1, w[(q + (1 << b)) % C], w[q]);
#pragma unroll
        for (int q = 0; q < C; ++q) w[q] = n[q];
      }}
#pragma unroll
      for (int s = 0; s < C; ++s) st(row + (s + shift) % C, w[s]);
      __syncwarp();
    }} else {{  // the barriers stay outside the divergent paths
      switch (shift) {{
{"".join(f"        case {v}: load_const<{v}>(row, r); break;{chr(10)}" for v in range(period))}      }}
      __syncwarp();
      switch (shift) {{
{"".join(f"        case {v}: store_const<{v}>(row, r); break;{chr(10)}" for v in range(period))}      }}
      __syncwarp();
    }}
  }}
  V* b = (V*)(B + (blockIdx.x * 4 + threadIdx.x / 32) * 32 * K);
  for (int i = lane; i < 32 * C; i += 32) b[i] = tile[i];
}}
"""


LDSTMATRIX_SOURCE = r"""
// ldmatrix.x4 then stmatrix.x4 of one 16x16 float16 tile per warp (four warps per CTA),
// rows XOR-swizzled at 16-byte granularity so the 8 rows of each matrix use distinct banks.
__device__ __forceinline__ unsigned row_addr(const void* base, int r, int c16) {
  return (unsigned)__cvta_generic_to_shared(base) + r * 32 + ((c16 ^ ((r >> 2) & 1)) * 16);
}
extern "C" __global__ void __launch_bounds__(128) ldst_loop(const unsigned* A, unsigned* B, int iters) {
  __shared__ __align__(128) unsigned tiles[4 * 128];
  int lane = threadIdx.x % 32, warp = blockIdx.x * 4 + threadIdx.x / 32;
  unsigned* tile = tiles + threadIdx.x / 32 * 128;
  for (int i = lane; i < 128; i += 32) tile[i] = A[warp * 128 + i];
  __syncwarp();
  unsigned addr = row_addr(tile, lane % 16, lane / 16);
  unsigned r0, r1, r2, r3;
  for (int it = 0; it < iters; ++it) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
    __syncwarp();
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
    __syncwarp();
  }
  for (int i = lane; i < 128; i += 32) B[warp * 128 + i] = tile[i];
}
"""
