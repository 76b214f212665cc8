#!/usr/bin/env python3
"""The tensor cores' own ceiling for dense `wgmma` against 2:4 sparse
`wgmma.sp` on this GPU (sm_90a: H100/H200), with no global memory in the
loop: every warpgroup issues the same instruction over and over on
operands already in shared memory (128-byte swizzle, K-major, as aoc's
kernels lay them out), four per commit group, `wgmma.wait_group 1`
between groups, as aoc's k loops do. It bounds what a GEMM kernel can
reach: a sparse/dense ratio below 1.5 here means no 2:4 fp16 kernel that
reads its activations from shared memory can be 1.5× a dense one.

Variants (dense-equivalent TFLOP/s: 2·64·N·K per instruction, K the
dense reduction length, 16 for `wgmma` and 32 for `wgmma.sp`):
- dense m64n128k16 and m64n256k16, A and B from shared memory;
- sparse m64n128k32 and m64n256k32, A (the compressed 2:4 operand) and B
  from shared memory;
- sparse m64n256k32 with A from registers (only B read from shared
  memory).
Each with 1 to 3 warpgroups per block (n256: 1 or 2), 132·4 blocks, 64 KiB of
shared memory per block.

Usage, on the GPU machine (nvcc on PATH):
    python3 bench/gpu/wgmma_peak.py [--iters N]
It writes the CUDA source to a temporary directory, compiles it with
`nvcc -arch=sm_90a`, runs it (CUDA events, median of 5 launches) and
prints one line per variant and the sparse/dense ratios.
"""

import os
import subprocess
import sys
import tempfile


def acc_list(n):
    return ", ".join(f"%{i}" for i in range(n))


def variant(name, shape, sparse, a_regs):
    """One `__device__` function issuing four instructions of `shape`
    (`m64nNkK`) into `acc` (N/2 floats)."""
    n = int(shape.split("n")[1].split("k")[0])
    nacc = n // 2
    regs = ", ".join(f'"+f"(acc[{i}])' for i in range(nacc))
    if sparse:
        op = f"wgmma.mma_async.sp.sync.aligned.{shape}.f32.f16.f16"
    else:
        op = f"wgmma.mma_async.sync.aligned.{shape}.f32.f16.f16"
    # Operand numbers after the accumulators: A (a descriptor or four
    # registers), B's descriptor, [the metadata word], a 1 for scale-d's
    # predicate.
    k = nacc
    a = "%" + str(k) if not a_regs else "{" + ", ".join(f"%{k + i}" for i in range(4)) + "}"
    k += 1 if not a_regs else 4
    b = f"%{k}"
    meta = f"%{k + 1}, 0, " if sparse else ""
    one = f"%{k + 2}" if sparse else f"%{k + 1}"
    trans = "0" if a_regs else "0, 0"
    lines = ['"{\\n.reg .pred p;\\nsetp.ne.b32 p, ' + one + ', 0;\\n"']
    for _ in range(4):
        lines.append(f'"{op} {{{acc_list(nacc)}}}, {a}, {b}, {meta}p, 1, 1, {trans};\\n"')
    lines.append('"}\\n"')
    if a_regs:
        ins = '"r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(bd)'
    else:
        ins = '"l"(ad), "l"(bd)'
    ins += (', "r"(meta)' if sparse else "") + ', "r"(1)'
    body = "\n      ".join(lines)
    return f"""
__device__ __forceinline__ void {name}(float* acc, unsigned long long ad, unsigned long long bd, const unsigned* ar, unsigned meta) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      {body}
      : {regs}
      : {ins});
#else
  __trap();  // compiled for a target without wgmma: never chosen on sm_90a
#endif
}}
"""


VARIANTS = [
    # name, shape, sparse, A from registers, dense-equivalent k
    ("dense_n128", "m64n128k16", False, False, 16),
    ("dense_n256", "m64n256k16", False, False, 16),
    ("sparse_n128", "m64n128k32", True, False, 32),
    ("sparse_n256", "m64n256k32", True, False, 32),
    ("sparse_n256_areg", "m64n256k32", True, True, 32),
]


def max_wgs(n):
    """Warpgroups per block: three of m64n128 (64 accumulators each), two
    of m64n256 (128 each: three leave ptxas too few registers to keep the
    wgmma pipeline, and it serializes the instructions)."""
    return 3 if n <= 128 else 2


def source():
    out = ["#include <cstdio>\n#include <vector>\n#include <algorithm>\n#include <cuda_runtime.h>\n"]
    out.append("""
__device__ __forceinline__ unsigned long long desc(unsigned addr) {
  // 128-byte swizzle, stride 1024 bytes between 8-row groups.
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
""")
    for name, shape, sparse, areg, _ in VARIANTS:
        out.append(variant(f"mma_{name}", shape, sparse, areg))
        n = int(shape.split("n")[1].split("k")[0])
        out.append(f"""
__global__ void __launch_bounds__({128 * max_wgs(n)}, 1) k_{name}(int iters, float* sink) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < 64 * 1024 / 4; i += blockDim.x)
    ((unsigned*)smem)[i] = 0x3c003c00u ^ (i * 2654435761u & 0x03ff03ffu);
  __syncthreads();
  unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  int wg = threadIdx.x / 128;
  unsigned long long ad = desc(base + wg * 128), bd = desc(base + 16384 + wg * 128);
  unsigned ar[4] = {{0x3c003c00u, 0x3c003c00u ^ threadIdx.x, 0x3c003c00u, 0x3c003c00u}};
  unsigned meta = 0x4e4e4e4eu;
  float acc[{n // 2}];
  for (int i = 0; i < {n // 2}; ++i) acc[i] = 0.f;
  for (int it = 0; it < iters; ++it) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
    mma_{name}(acc, ad, bd, ar, meta);
    asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\\n" ::: "memory");
#endif
  }}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
#endif
  float s = 0.f;
  for (int i = 0; i < {n // 2}; ++i) s += acc[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}}
""")
    out.append("""
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2048;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink;
  cudaMalloc(&sink, 4096);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
""")
    for name, shape, _, _, kk in VARIANTS:
        n = int(shape.split("n")[1].split("k")[0])
        out.append(f"""
  cudaFuncSetAttribute(k_{name}, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  for (int wgs = 1; wgs <= {max_wgs(n)}; ++wgs) {{
    std::vector<float> ms;
    for (int r = 0; r < 6; ++r) {{
      cudaEventRecord(a);
      k_{name}<<<sms * 4, 128 * wgs, 64 * 1024>>>(iters, sink);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t;
      cudaEventElapsedTime(&t, a, b);
      if (r) ms.push_back(t);
    }}
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {{ printf("{name}: %s\\n", cudaGetErrorString(e)); return 1; }}
    std::sort(ms.begin(), ms.end());
    double flops = 2.0 * 64 * {n} * {kk} * 4.0 * iters * wgs * sms * 4;
    printf("%-18s warpgroups %d  %8.3f ms  %7.0f TFLOP/s (dense-equivalent)\\n", "{name}", wgs, ms[2], flops / ms[2] / 1e9);
  }}
""")
    out.append("  return 0;\n}\n")
    return "".join(out)


def main():
    iters = "2048"
    if "--iters" in sys.argv:
        iters = sys.argv[sys.argv.index("--iters") + 1]
    d = tempfile.mkdtemp(prefix="wgmma_peak")
    src = os.path.join(d, "peak.cu")
    with open(src, "w") as f:
        f.write(source())
    exe = os.path.join(d, "peak")
    # Only sm_90a code: the wgmma instructions exist on no other target
    # (an NVCC_APPEND_FLAGS that adds one would fail the build).
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")}
    subprocess.run(["nvcc", "-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-o", exe, src], check=True, env=env)
    out = subprocess.run([exe, iters], check=True, capture_output=True, text=True).stdout
    print(out, end="")
    best = {}
    for line in out.splitlines():
        name, tf = line.split()[0], float(line.split()[-3])
        best[name] = max(best.get(name, 0.0), tf)
    d128, d256 = best["dense_n128"], best["dense_n256"]
    print(f"sparse/dense, best over warpgroups: n128 {best['sparse_n128'] / d128:.2f}x, "
          f"n256 {best['sparse_n256'] / d256:.2f}x, n256 with A in registers {best['sparse_n256_areg'] / d256:.2f}x")


if __name__ == "__main__":
    main()
