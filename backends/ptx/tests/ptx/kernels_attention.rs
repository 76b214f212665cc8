//! `kernels::attention`: fused attention. The IR lowers and ptxas
//! assembles for every architecture a precision supports (sm_75 too for
//! fp32) without spilling; the PTX uses what each kernel is built on
//! (`mma.sync` f16/bf16, `ldmatrix`, `shfl.sync` for the tensor-core
//! kernels; shared memory and `fma` for fp32); launch geometry of edge
//! shapes and the refusals; and the fp32 kernel *runs* on the host JIT
//! (`host_sim`) against a naive f64 reference with the CPU softmax's
//! semantics (strided BERT layout, odd sizes, broadcast and full masks,
//! `sk = 0`). `AOC_PTX_DUMP_DIR=dir` writes the modules and a manifest of
//! their specs there for `tests/gpu_checks/attention.py`.

use aoc_backend_ptx::kernels::Geometry;
use aoc_backend_ptx::kernels::HalfCopy;
use aoc_backend_ptx::kernels::attention::{AttentionSpec, AttnPrecision, attention, attention_with};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};

use super::host_sim::{Mem, with_jit};

/// Contiguous `[b, h, s, f]` strides.
fn bhsf(heads: u64, s: u64, f: u64) -> [u64; 4] {
    [heads * s * f, s * f, f, 1]
}

/// `[b, s, h, f]` physical layout (BERT's projections before the
/// transpose), as `[b, h, s, f]` strides.
fn bshf(heads: u64, s: u64, f: u64) -> [u64; 4] {
    [s * heads * f, f, heads * f, 1]
}

fn spec(batch: u64, heads: u64, sq: u64, sk: u64, d: u64, dv: u64) -> AttentionSpec {
    AttentionSpec {
        batch,
        heads,
        sq,
        sk,
        d,
        dv,
        q: bhsf(heads, sq, d),
        k: bhsf(heads, sk, d),
        v: bhsf(heads, sk, dv),
        y: bhsf(heads, sq, dv),
        mask: None,
        scale: 1.0 / (d.max(1) as f32).sqrt(),
        aligned16: true,
    }
}

/// Named cases: what the tests lower, assemble and dump.
fn cases() -> Vec<(&'static str, AttentionSpec)> {
    let mut bert = spec(4, 12, 128, 128, 64, 64);
    bert.q = bshf(12, 128, 64);
    bert.k = bshf(12, 128, 64);
    bert.v = bshf(12, 128, 64);
    bert.y = bshf(12, 128, 64);
    let mut masked = spec(2, 3, 70, 45, 32, 40);
    masked.mask = Some([45, 0, 0, 1]);
    let mut odd = spec(1, 2, 5, 7, 3, 5);
    odd.mask = Some([0, 0, 7, 1]);
    vec![
        ("attn_bert", bert),
        ("attn_long", spec(1, 8, 1024, 1024, 64, 64)),
        ("attn_d128", spec(2, 2, 100, 300, 128, 128)),
        ("attn_masked", masked),
        ("attn_odd", odd),
        ("attn_nokeys", spec(1, 2, 9, 0, 8, 8)),
    ]
}

fn prec_name(p: AttnPrecision) -> &'static str {
    match p {
        AttnPrecision::F32 => "f32",
        AttnPrecision::F16 => "f16",
        AttnPrecision::Bf16 => "bf16",
    }
}

fn sms(p: AttnPrecision) -> Vec<Sm> {
    let mut v = vec![Sm::Sm80, Sm::Sm86, Sm::Sm90, Sm::Sm90a];
    if p == AttnPrecision::F32 {
        v.insert(0, Sm::Sm75);
    }
    v
}

fn manifest_line(name: &str, p: AttnPrecision, s: &AttentionSpec, g: &Geometry) -> String {
    let j = |x: [u64; 4]| format!("{}:{}:{}:{}", x[0], x[1], x[2], x[3]);
    format!(
        "name={name} prec={} batch={} heads={} sq={} sk={} d={} dv={} q={} k={} v={} y={} mask={} scale={:e} grid={} block={} smem={}",
        prec_name(p),
        s.batch,
        s.heads,
        s.sq,
        s.sk,
        s.d,
        s.dv,
        j(s.q),
        j(s.k),
        j(s.v),
        j(s.y),
        s.mask.map_or("none".to_string(), j),
        s.scale,
        g.grid[0],
        g.block[0],
        g.smem
    )
}

/// Every case in every precision lowers and assembles for every
/// architecture it supports, without spills; the PTX has the intended
/// instructions; dumps for the GPU check.
#[test]
fn attention_ptx_assembles_without_spills() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for p in [AttnPrecision::F32, AttnPrecision::F16, AttnPrecision::Bf16] {
        for sm in sms(p) {
            let mut m = ModuleText::new();
            let mut lines = Vec::new();
            for (name, s) in cases() {
                let g = attention(&mut m, name, &s, p, sm).unwrap();
                assert!(g.smem <= 99 * 1024, "{name}: {g:?}");
                assert_eq!(g.block, [128, 1, 1]);
                lines.push(manifest_line(name, p, &s, &g));
            }
            let ptx = ir_to_ptx(&m.finish(), sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
            let what = format!("attention-{}", prec_name(p));
            if let Some(dir) = &dump {
                std::fs::create_dir_all(dir).unwrap();
                let base = format!("{what}-{}", sm.name());
                std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
                std::fs::write(dir.join(format!("{base}.txt")), lines.join("\n") + "\n").unwrap();
            }
            for (name, s) in cases() {
                let body = super::entry(&ptx, name);
                let params = 4 + usize::from(s.mask.is_some());
                assert_eq!(body.matches(".param .u64").count(), params, "{name}");
                assert!(!body.contains("local"), "{sm} {name}: local memory");
                if s.sk == 0 {
                    continue;
                }
                assert!(body.contains("bar.sync"), "{name}");
                match p {
                    AttnPrecision::F32 => {
                        assert!(body.contains("fma.rn.f32"), "{name}");
                        assert!(body.contains("ld.shared.v4"), "{name}");
                        assert!(!body.contains("mma"), "{name}");
                    }
                    _ => {
                        let t = if p == AttnPrecision::F16 {
                            "f16.f16"
                        } else {
                            "bf16.bf16"
                        };
                        assert!(
                            body.contains(&format!(
                                "mma.sync.aligned.m16n8k16.row.col.f32.{t}.f32"
                            )),
                            "{sm} {name}"
                        );
                        assert!(body.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
                        assert!(body.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
                        assert!(body.contains("shfl.sync.bfly.b32"), "{name}");
                        assert!(body.contains("ex2.approx"), "{name}");
                    }
                }
            }
            // 16-byte loads where the layout allows them (BERT), element
            // loads where it does not (odd).
            let bert = super::entry(&ptx, "attn_bert");
            assert!(bert.contains("ld.global.nc.v4") || bert.contains("ld.global.v4"));
            assert!(!super::entry(&ptx, "attn_odd").contains("ld.global.nc.v4"));
            if let Ok(x) = &ptxas {
                let report = super::assemble(x, &ptx, sm, &what);
                let mut current = String::new();
                for line in report.lines() {
                    if let Some(i) = line.find("Compiling entry function '") {
                        let rest = &line[i + 26..];
                        current = rest[..rest.find('\'').unwrap()].to_string();
                    }
                    if line.contains("spill stores") {
                        assert!(
                            line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                            "{sm} {what} {current}: {line}"
                        );
                    }
                    if let Some(i) = line.find("Used ")
                        && (sm == Sm::Sm86 || sm == Sm::Sm90)
                    {
                        println!("{sm} {what} {current}: {}", &line[i..]);
                    }
                }
                assert_eq!(report.matches("spill stores").count(), cases().len());
            }
        }
    }
}

/// A buffer starting inside a tensor may not be 16-byte aligned: then no
/// kernel reads it in 16-byte chunks, whatever its strides allow.
#[test]
fn attention_unaligned_buffers_use_element_loads() {
    let mut bert = cases()[0].1;
    for p in [AttnPrecision::F32, AttnPrecision::F16] {
        for aligned in [true, false] {
            bert.aligned16 = aligned;
            let mut m = ModuleText::new();
            attention(&mut m, "attn", &bert, p, Sm::Sm90).unwrap();
            let ptx = ir_to_ptx(&m.finish(), Sm::Sm90).unwrap();
            let v4 = ptx.contains("ld.global.nc.v4") || ptx.contains("ld.global.v4");
            assert_eq!(v4, aligned, "{p:?} aligned16 = {aligned}");
        }
    }
}

#[test]
fn attention_geometry_and_refusals() {
    let mut m = ModuleText::new();
    let s = spec(2, 3, 100, 50, 64, 64);
    let g = attention(&mut m, "a32", &s, AttnPrecision::F32, Sm::Sm70).unwrap();
    assert_eq!(g.grid, [2 * 3 * 4, 1, 1]);
    let mut m16 = ModuleText::new();
    let g = attention(&mut m16, "a16", &s, AttnPrecision::F16, Sm::Sm86).unwrap();
    assert_eq!(g.grid, [2 * 3 * 2, 1, 1]);
    assert_eq!(g.smem, (64 * 72 * 2 * 2 + 64 * 72 * 2) as u32);
    for (b, h, sq, dv) in [(0, 3, 5, 4), (2, 0, 5, 4), (2, 3, 0, 4), (2, 3, 5, 0)] {
        let s = spec(b, h, sq, 7, 4, dv);
        let name = format!("empty_{b}_{h}_{sq}_{dv}");
        let g = attention(&mut m16, &name, &s, AttnPrecision::F16, Sm::Sm80).unwrap();
        assert_eq!((g.grid, g.smem), ([1, 1, 1], 0));
    }
    ir_to_ptx(&m16.finish(), Sm::Sm80).unwrap();
    // Huge: 2^20 problems of 4096 rows.
    let s = spec(1 << 10, 1 << 10, 4096, 64, 64, 64);
    let g = attention(&mut m, "huge", &s, AttnPrecision::F32, Sm::Sm86).unwrap();
    assert_eq!(g.grid[0] as u64, (1 << 20) * 128);
    let e = attention(
        &mut m,
        "big",
        &spec(1 << 12, 1 << 12, 4096, 1, 1, 1),
        AttnPrecision::F32,
        Sm::Sm86,
    )
    .unwrap_err();
    assert!(e.contains("more than a grid holds"), "{e}");
    let e = attention(
        &mut m,
        "wide",
        &spec(1, 1, 4, 4, 129, 4),
        AttnPrecision::F32,
        Sm::Sm86,
    )
    .unwrap_err();
    assert!(e.contains("exceed 128"), "{e}");
    let e = attention(&mut m, "t", &s, AttnPrecision::Bf16, Sm::Sm75).unwrap_err();
    assert!(e.contains("needs sm_80"), "{e}");
    let e = attention(&mut m, "bad-name", &s, AttnPrecision::F32, Sm::Sm86).unwrap_err();
    assert!(e.contains("C identifier"), "{e}");
    let mut o = spec(2, 1, 4, 4, 4, 4);
    o.k = [u64::MAX / 2, 0, 4, 1];
    let e = attention(&mut m, "ovf", &o, AttnPrecision::F32, Sm::Sm86).unwrap_err();
    assert!(e.contains("operand k"), "{e}");
    // Every architecture lowers the fp32 kernel, sm_70 included.
    ir_to_ptx(&m.finish(), Sm::Sm70).unwrap();
}

/// Pseudo-random values in [-1, 1) (an LCG), seeded.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Elements a strided operand spans.
fn span(st: [u64; 4], ext: [u64; 4]) -> usize {
    if ext.contains(&0) {
        return 1;
    }
    (0..4).map(|i| st[i] * (ext[i] - 1)).sum::<u64>() as usize + 1
}

fn at(st: [u64; 4], i: [u64; 4]) -> usize {
    (0..4).map(|k| st[k] * i[k]).sum::<u64>() as usize
}

/// The naive result in f64, softmax as the CPU's: the maximum ignores
/// NaN, `exp(x − max) / Σ`, so an all `-inf` row is NaN.
fn reference(s: &AttentionSpec, q: &[f32], k: &[f32], v: &[f32], mask: &[f32]) -> Vec<f64> {
    let mut y = vec![0.0f64; span(s.y, [s.batch, s.heads, s.sq, s.dv])];
    for b in 0..s.batch {
        for h in 0..s.heads {
            for i in 0..s.sq {
                let sc: Vec<f64> = (0..s.sk)
                    .map(|j| {
                        let mut x = 0.0f64;
                        for f in 0..s.d {
                            x += q[at(s.q, [b, h, i, f])] as f64 * k[at(s.k, [b, h, j, f])] as f64;
                        }
                        x *= s.scale as f64;
                        if let Some(ms) = s.mask {
                            x += mask[at(ms, [b, h, i, j])] as f64;
                        }
                        x
                    })
                    .collect();
                let mx = sc
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &x| if x > m { x } else { m });
                let p: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
                let sum: f64 = p.iter().sum();
                for f in 0..s.dv {
                    let mut acc = 0.0;
                    for j in 0..s.sk {
                        acc += p[j as usize] / sum * v[at(s.v, [b, h, j, f])] as f64;
                    }
                    y[at(s.y, [b, h, i, f])] = acc;
                }
            }
        }
    }
    y
}

/// Runs the fp32 kernel of `s` on the host and compares with [`reference`].
fn run_case(name: &str, s: &AttentionSpec, mask: Option<Vec<f32>>) {
    let mut m = ModuleText::new();
    let g = attention(&mut m, name, s, AttnPrecision::F32, Sm::Sm86).unwrap();
    // The host has no `ex2.approx`.
    let ir = m
        .finish()
        .replace("@llvm.nvvm.ex2.approx.f32", "@llvm.exp2.f32");
    let ext = |r: u64, f: u64| [s.batch, s.heads, r, f];
    let q = values(span(s.q, ext(s.sq, s.d)), 1);
    let k = values(span(s.k, ext(s.sk, s.d)), 2);
    let v = values(span(s.v, ext(s.sk, s.dv)), 3);
    let mask = mask.unwrap_or_default();
    let want = reference(s, &q, &k, &v, &mask);
    let mut bufs = vec![Mem::from_f32s(&q), Mem::from_f32s(&k), Mem::from_f32s(&v)];
    if s.mask.is_some() {
        bufs.push(Mem::from_f32s(&mask));
    }
    // Y starts as garbage: every element the problem defines is written.
    bufs.push(Mem::from_f32s(&vec![7.5; want.len()]));
    let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
    with_jit(&ir, |run| run(name, g, &mut refs));
    let got = bufs.last().unwrap().to_f32s();
    for b in 0..s.batch {
        for h in 0..s.heads {
            for i in 0..s.sq {
                for f in 0..s.dv {
                    let o = at(s.y, [b, h, i, f]);
                    let (x, w) = (got[o] as f64, want[o]);
                    let ok = (x.is_nan() && w.is_nan()) || (x - w).abs() <= 2e-5 * (1.0 + w.abs());
                    assert!(ok, "{name}: y[{b},{h},{i},{f}] = {x}, expected {w}");
                }
            }
        }
    }
}

#[test]
fn attention_f32_runs_bert_layout() {
    // [b, s, h, d] buffers, two query tiles (the second partial), two key
    // tiles (the second partial): 16-byte loads.
    let mut s = spec(2, 3, 40, 37, 64, 64);
    s.q = bshf(3, 40, 64);
    s.k = bshf(3, 37, 64);
    s.v = bshf(3, 37, 64);
    s.y = bshf(3, 40, 64);
    run_case("attn_run_bert", &s, None);
}

#[test]
fn attention_f32_runs_odd_shapes() {
    run_case("attn_run_odd", &spec(2, 1, 5, 7, 3, 5), None);
    // d = dv = 128, features of V across 4 lanes' groups; K transposed in
    // memory (feature stride != 1: element loads).
    let mut s = spec(1, 1, 33, 33, 128, 128);
    s.k = [0, 0, 1, 33];
    run_case("attn_run_d128", &s, None);
    // d = 0: scores are the mask (here none: 0), uniform weights.
    run_case("attn_run_d0", &spec(1, 1, 3, 4, 0, 2), None);
}

#[test]
fn attention_f32_runs_masks_and_no_keys() {
    // Broadcast mask [b, 1, 1, sk]: strides [sk, 0, 0, 1]; values 0 or a
    // large negative; 3 heads share it.
    let mut s = spec(2, 3, 6, 45, 8, 8);
    s.mask = Some([45, 0, 0, 1]);
    let mask: Vec<f32> = (0..90)
        .map(|i| if i % 7 == 3 { -1e4 } else { 0.0 })
        .collect();
    run_case("attn_run_bmask", &s, Some(mask));
    // Per-row mask [sq, sk] (strides [0, 0, sk, 1]): row 1 fully masked
    // (NaN, as the CPU), row 2 masked on the whole first key tile (the
    // running maximum stays -inf for a tile), row 3 NaN in one score.
    let (sq, sk) = (5u64, 45u64);
    let mut s = spec(1, 2, sq, sk, 4, 3);
    s.mask = Some([0, 0, sk, 1]);
    let mut mask = values((sq * sk) as usize, 9);
    for j in 0..sk as usize {
        mask[sk as usize + j] = f32::NEG_INFINITY;
        if j < 32 {
            mask[2 * sk as usize + j] = f32::NEG_INFINITY;
        }
    }
    mask[3 * sk as usize + 40] = f32::NAN;
    run_case("attn_run_rowmask", &s, Some(mask));
    // No keys: Y = 0.
    run_case("attn_run_nokeys", &spec(2, 2, 3, 0, 4, 5), None);
}

/// The problem the second-output tests run: BERT's `[b, s, h, d]`
/// layout, two query tiles and two key tiles (both partial); its Q, K, V
/// values and y's element count.
fn second_output_case() -> (AttentionSpec, [Vec<f32>; 3], usize) {
    let mut s = spec(2, 3, 40, 37, 64, 64);
    (s.q, s.k, s.v, s.y) = (bshf(3, 40, 64), bshf(3, 37, 64), bshf(3, 37, 64), bshf(3, 40, 64));
    let ext = |r: u64, f: u64| [s.batch, s.heads, r, f];
    let q = values(span(s.q, ext(s.sq, s.d)), 1);
    let k = values(span(s.k, ext(s.sk, s.d)), 2);
    let v = values(span(s.v, ext(s.sk, s.dv)), 3);
    let n = span(s.y, ext(s.sq, s.dv));
    (s, [q, k, v], n)
}

/// Runs the f32 kernel `name` of `m` on `qkv` with y (`n` elements, 7.5
/// beforehand) and a second output of `bytes` bytes an element after it;
/// returns both.
fn run_second(m: ModuleText, name: &str, g: Geometry, qkv: [&[f32]; 3], n: usize, bytes: usize) -> (Vec<f32>, Vec<u8>) {
    let ir = m.finish().replace("@llvm.nvvm.ex2.approx.f32", "@llvm.exp2.f32");
    let mut bufs: Vec<Mem> = qkv.iter().map(|x| Mem::from_f32s(x)).collect();
    bufs.push(Mem::from_f32s(&vec![7.5; n]));
    bufs.push(Mem::new(&vec![0xAB; bytes * n], 0));
    let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
    with_jit(&ir, |run| run(name, g, &mut refs));
    (bufs[3].to_f32s(), bufs[4].bytes().to_vec())
}

/// The half copy of y (for a following `wgmma` GEMM) holds each element
/// of y rounded to nearest even, at y's element offsets, f16 and bf16;
/// without `keep_f32` y itself is left untouched and the copy is the same.
#[test]
fn attention_half_copy_is_y_rounded() {
    let (s, [q, k, v], n) = second_output_case();
    let run = |h: HalfCopy| -> (Vec<f32>, Vec<u16>) {
        let name = format!("attn_half_{}_{}", u8::from(h.bf16), u8::from(h.keep_f32));
        let mut m = ModuleText::new();
        let g = attention_with(&mut m, &name, &s, AttnPrecision::F32, Sm::Sm86, Some(h)).unwrap();
        let (y, copy) = run_second(m, &name, g, [&q, &k, &v], n, 2);
        (y, copy.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
    };
    let (y, f16) = run(HalfCopy::F16);
    let (y2, bf16) = run(HalfCopy::BF16);
    assert_eq!(y, y2);
    for (o, &x) in y.iter().enumerate() {
        assert_eq!(f16[o], half::f16::from_f32(x).to_bits(), "f16 copy of element {o}: y = {x}");
        assert_eq!(bf16[o], half::bf16::from_f32(x).to_bits(), "bf16 copy of element {o}: y = {x}");
    }
    let (untouched, only) = run(HalfCopy { keep_f32: false, ..HalfCopy::F16 });
    assert!(untouched.iter().all(|&x| x == 7.5), "y written without keep_f32");
    assert_eq!(only, f16);
}

/// An attention whose output the next step quantizes writes the bytes
/// itself (`attention_quant`): each byte at y's element offset is y's
/// quantization (`clamp(round_even(y / s) + z)`, folded, so within one
/// unit of the step-by-step value and mostly equal), beside y or, without
/// `keep_f32`, instead of it; the refusals hold.
#[test]
fn attention_quant_stores_y_quantized() {
    use aoc_backend_ptx::expr::{Binary, Expr, Unary};
    use aoc_backend_ptx::kernels::GemmEpilogue;
    use aoc_backend_ptx::kernels::attention::attention_quant;
    use aoc_ir::types::Scalar;
    let (s, [q, k, v], n) = second_output_case();
    let (scale, zero) = (0.004f32, 128.0f32);
    let exprs = [
        Expr::Load(0),
        Expr::Const(scale),
        Expr::Binary(Binary::Div, 0, 1),
        Expr::Unary(Unary::RoundEven, 2),
        Expr::Const(zero),
        Expr::Binary(Binary::Add, 3, 4),
        Expr::Const(0.0),
        Expr::Binary(Binary::Max, 5, 6),
        Expr::Const(255.0),
        Expr::Binary(Binary::Min, 7, 8),
    ];
    let epi = GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(Scalar::F32, &[1])], &exprs, Scalar::U8), strides: vec![] };
    let run = |keep: bool| -> (Vec<f32>, Vec<u8>) {
        let name = format!("attn_q_{}", u8::from(keep));
        let mut m = ModuleText::new();
        let g = attention_quant(&mut m, &name, &s, AttnPrecision::F32, Sm::Sm86, &epi, keep).unwrap();
        run_second(m, &name, g, [&q, &k, &v], n, 1)
    };
    let (y, bytes) = run(true);
    let mut exact = 0;
    for (o, (&x, &b)) in y.iter().zip(&bytes).enumerate() {
        let want = ((x / scale).round_ties_even() + zero).clamp(0.0, 255.0);
        assert!((b as f32 - want).abs() <= 1.0, "element {o}: y = {x} stores {b}, expected {want}");
        exact += usize::from(b as f32 == want);
    }
    assert!(exact * 100 >= n * 99, "{exact} of {n} bytes exact");
    let (untouched, only) = run(false);
    assert!(untouched.iter().all(|&x| x == 7.5), "y written without keep_f32");
    assert_eq!(only, bytes);
    // A quantization with another operand, or storing floats, is refused.
    let mut m = ModuleText::new();
    let two = GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(Scalar::F32, &[1]), (Scalar::F32, &[1])], &exprs, Scalar::U8), strides: vec![[0, 0, 1]] };
    assert!(attention_quant(&mut m, "attn_q_bad", &s, AttnPrecision::F32, Sm::Sm86, &two, true).is_err());
    let float = GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(Scalar::F32, &[1])], &exprs, Scalar::F32), strides: vec![] };
    assert!(attention_quant(&mut m, "attn_q_bad", &s, AttnPrecision::F32, Sm::Sm86, &float, true).is_err());
}

/// An attention reading q, k or v as bytes (`attention_bytes`) computes
/// exactly what it does on the dequantized f32 tensors: each byte goes
/// through its dequantization (`(b − z)·s`, u8 or i8) as it is staged.
/// Runs the f32 kernel on the host JIT, in BERT's layout (4-byte loads)
/// and an odd one (byte loads), every operand as bytes and one alone, with
/// y's quantization beside; the PTX of the tensor-core kernels assembles
/// without spills; a dequantization of f32 values is refused.
#[test]
fn attention_reads_dequantized_bytes() {
    use aoc_backend_ptx::expr::{Binary, Expr};
    use aoc_backend_ptx::kernels::GemmEpilogue;
    use aoc_backend_ptx::kernels::attention::attention_bytes;
    use aoc_ir::types::Scalar;
    let dequantize = |n: usize, dtype: Scalar, zero: f32, scale: f32| {
        let exprs = [Expr::Load(0), Expr::Const(zero), Expr::Binary(Binary::Sub, 0, 1), Expr::Const(scale), Expr::Binary(Binary::Mul, 2, 3)];
        GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(dtype, &[1])], &exprs, Scalar::F32), strides: vec![] }
    };
    let (bert, _, _) = second_output_case();
    let mut odd = spec(1, 2, 5, 7, 3, 5);
    odd.mask = Some([0, 0, 7, 1]);
    for (case, s) in [("bert", bert), ("odd", odd)] {
        let ext = |r: u64, f: u64| [s.batch, s.heads, r, f];
        let lens = [span(s.q, ext(s.sq, s.d)), span(s.k, ext(s.sk, s.d)), span(s.v, ext(s.sk, s.dv))];
        let n = span(s.y, ext(s.sq, s.dv));
        let mask = s.mask.map(|m| values(span(m, [s.batch, s.heads, s.sq, s.sk]), 4));
        // q and v unsigned, k signed; the bytes, their dequantization, and
        // the f32 values it gives.
        let params = [(Scalar::U8, 121.0, 0.021f32), (Scalar::I8, -3.0, 0.017), (Scalar::U8, 130.0, 0.013)];
        let mut seed = 7u64;
        let raw: Vec<Vec<u8>> = lens
            .iter()
            .map(|&len| {
                (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (seed >> 56) as u8
                    })
                    .collect()
            })
            .collect();
        let dqs: Vec<GemmEpilogue> = (0..3).map(|i| dequantize(lens[i], params[i].0, params[i].1, params[i].2)).collect();
        let floats: Vec<Vec<f32>> = (0..3)
            .map(|i| {
                let (t, z, sc) = params[i];
                raw[i].iter().map(|&b| (if t == Scalar::I8 { b as i8 as f32 } else { b as f32 } - z) * sc).collect()
            })
            .collect();
        let run = |name: &str, which: [bool; 3]| -> Vec<f32> {
            let mut m = ModuleText::new();
            let inputs = [0, 1, 2].map(|i| which[i].then_some(&dqs[i]));
            let g = attention_bytes(&mut m, name, &s, AttnPrecision::F32, Sm::Sm86, inputs, None).unwrap();
            let ir = m.finish().replace("@llvm.nvvm.ex2.approx.f32", "@llvm.exp2.f32");
            let mut bufs: Vec<Mem> = (0..3).map(|i| if which[i] { Mem::new(&raw[i], 0) } else { Mem::from_f32s(&floats[i]) }).collect();
            bufs.extend(mask.as_ref().map(|m| Mem::from_f32s(m)));
            bufs.push(Mem::from_f32s(&vec![7.5; n]));
            let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
            with_jit(&ir, |run| run(name, g, &mut refs));
            bufs.last().unwrap().to_f32s()
        };
        let want = run(&format!("attn_dq_{case}_none"), [false; 3]);
        assert!(want.iter().any(|&x| x != 7.5 && x != 0.0), "{case}: y not written");
        for (tag, which) in [("all", [true; 3]), ("k", [false, true, false])] {
            let got = run(&format!("attn_dq_{case}_{tag}"), which);
            for (o, (&a, &b)) in got.iter().zip(&want).enumerate() {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{case} {tag}: element {o}: {a} from bytes, {b} from f32");
            }
        }
    }
    // The tensor-core kernels with bytes in and bytes out assemble.
    let (s, _, n) = second_output_case();
    let q_exprs = [Expr::Load(0), Expr::Const(0.01), Expr::Binary(Binary::Div, 0, 1), Expr::Const(0.0), Expr::Binary(Binary::Max, 2, 3), Expr::Const(255.0), Expr::Binary(Binary::Min, 4, 5)];
    let quant = GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(Scalar::F32, &[1])], &q_exprs, Scalar::U8), strides: vec![] };
    let dq = dequantize(n, Scalar::U8, 128.0, 0.02);
    for (p, sm) in [(AttnPrecision::F16, Sm::Sm90a), (AttnPrecision::Bf16, Sm::Sm86), (AttnPrecision::F32, Sm::Sm75)] {
        let mut m = ModuleText::new();
        attention_bytes(&mut m, "attn_dq_tc", &s, p, sm, [Some(&dq); 3], Some((&quant, false))).unwrap();
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        let body = super::entry(&ptx, "attn_dq_tc");
        assert!(!body.contains("ld.global.nc.v4.f32") && !body.contains("ld.global.v4.f32"), "{sm}: f32 vector loads of byte operands");
        assert!(body.contains(".u32") || body.contains(".b32"), "{sm}");
        if let Ok(x) = super::find_ptxas() {
            let report = super::assemble(&x, &ptx, sm, "attention-bytes");
            assert!(report.contains(" 0 bytes spill stores, 0 bytes spill loads"), "{sm}: {report}");
        }
    }
    // fp8: f32 q, k and v, the output quantized to e4m3 (sm_90a, fp16).
    let e4m3 = GemmEpilogue { kernel: super::kernel("", &[n as u64], &[(Scalar::F32, &[1])], &q_exprs[..3], Scalar::F8E4M3FN), strides: vec![] };
    let mut m = ModuleText::new();
    attention_bytes(&mut m, "attn_e4m3", &s, AttnPrecision::F16, Sm::Sm90a, [None; 3], Some((&e4m3, false))).unwrap();
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm90a).unwrap();
    let body = super::entry(&ptx, "attn_e4m3");
    assert!(body.contains("cvt.rn.satfinite.e4m3x2.f32"), "no e4m3 rounding of the output");
    if let Ok(x) = super::find_ptxas() {
        let report = super::assemble(&x, &ptx, Sm::Sm90a, "attention-e4m3");
        assert!(report.contains(" 0 bytes spill stores, 0 bytes spill loads"), "{report}");
    }
    // Refused: a dequantization reading f32, or with another operand.
    let mut m = ModuleText::new();
    let f32_in = dequantize(n, Scalar::F32, 0.0, 1.0);
    assert!(attention_bytes(&mut m, "attn_dq_bad", &s, AttnPrecision::F32, Sm::Sm86, [Some(&f32_in), None, None], None).is_err());
    let mut two = dequantize(n, Scalar::U8, 0.0, 1.0);
    two.kernel.operands.push(two.kernel.operands[0].clone());
    two.strides.push([0, 0, 1]);
    assert!(attention_bytes(&mut m, "attn_dq_bad", &s, AttnPrecision::F32, Sm::Sm86, [None, Some(&two), None], None).is_err());
}
