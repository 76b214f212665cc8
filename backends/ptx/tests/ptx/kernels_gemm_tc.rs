//! `kernels::gemm_tc`: the tensor-core GEMM / implicit-GEMM convolution in
//! f16, bf16 and tf32. Checks that every spec shape gives IR that LLVM
//! accepts and PTX that ptxas assembles for sm_80 … sm_90a, that the PTX
//! uses the intended instructions, the launch geometry of edge shapes, the
//! refusals, that the main tiles do not spill, and the fused pointwise
//! epilogues (extra parameters, their loads, one evaluation per stored
//! element). `AOC_PTX_DUMP_DIR=dir`
//! also writes the sm_90 modules and a manifest of their specs there (for a
//! run on a GPU).

use aoc_backend_ptx::expr::{Binary, Expr, Unary};
use aoc_backend_ptx::kernels::gemm_tc::{
    TcPrecision, TcTile, choose_tile, gemm_tc, gemm_tc_tile, gemm_tc_with,
};
use aoc_backend_ptx::kernels::{AMode, ConvGeom, GemmEpilogue, GemmSpec, Geometry};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_ir::types::Scalar;

const SMS: [Sm; 5] = [Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a];

/// A row-major `m×k · k×n` product, batch 1, packed and aligned.
fn dense(m: u64, n: u64, k: u64) -> GemmSpec {
    GemmSpec {
        batch: 1,
        m,
        n,
        k,
        a: AMode::Strided {
            batch: 0,
            row: k,
            col: 1,
        },
        b_strides: [0, n, 1],
        c_strides: [0, n, 1],
        bias: Some(0),
        relu: true,
        aligned16: true,
    }
}

/// The NHWC convolution of `x: n×h×w×c` into `oc` channels as a gemm.
#[allow(clippy::too_many_arguments)]
fn conv(n: u64, hw: u64, c: u64, oc: u64, k: u64, stride: u64, pad: u64, group: u64) -> GemmSpec {
    let o = (hw + 2 * pad - k) / stride + 1;
    let geom = ConvGeom {
        n,
        h: hw,
        w: hw,
        c,
        oh: o,
        ow: o,
        oc,
        kh: k,
        kw: k,
        stride: [stride, stride],
        dilation: [1, 1],
        pads: [pad, pad, pad, pad],
        group,
    };
    let (cg, ocg) = (c / group, oc / group);
    GemmSpec {
        batch: group,
        m: n * o * o,
        n: ocg,
        k: k * k * cg,
        a: AMode::Conv(geom),
        b_strides: [k * k * cg * ocg, ocg, 1],
        c_strides: [ocg, oc, 1],
        bias: Some(ocg),
        relu: true,
        aligned16: true,
    }
}

/// Named specs covering the addressing paths; `b_half` where B is weights.
fn specs() -> Vec<(&'static str, GemmSpec, bool)> {
    let mut v = vec![
        ("dense", dense(300, 200, 136), true),
        ("big", dense(1024, 1024, 1024), true),
        ("bert_qkv", dense(128, 2304, 768), true),
        ("classifier", dense(1, 1000, 2048), true),
    ];
    let mut s = dense(37, 50, 19);
    s.a = AMode::Strided {
        batch: 0,
        row: 21,
        col: 1,
    };
    s.b_strides = [0, 53, 1];
    s.c_strides = [0, 55, 1];
    s.aligned16 = false;
    s.bias = None;
    s.relu = false;
    v.push(("ragged", s, true));
    // Attention scores Q·Kᵀ: B is K read column-wise; 12 heads.
    let mut s = dense(128, 128, 64);
    s.batch = 12;
    s.a = AMode::Strided {
        batch: 128 * 64,
        row: 64,
        col: 1,
    };
    s.b_strides = [128 * 64, 1, 64];
    s.c_strides = [128 * 128, 128, 1];
    s.bias = None;
    s.relu = false;
    v.push(("qk", s, false));
    // P·V with a broadcast A (batch stride 0) and a transposed-A layout.
    let mut s = dense(40, 24, 33);
    s.batch = 3;
    s.a = AMode::Strided {
        batch: 0,
        row: 1,
        col: 40,
    };
    s.b_strides = [33 * 24, 24, 1];
    s.c_strides = [40 * 24, 24, 1];
    s.bias = Some(24);
    v.push(("broadcast", s, false));
    // B with neither unit stride (scalar loads).
    let mut s = dense(20, 12, 10);
    s.b_strides = [0, 3, 30];
    v.push(("strided_b", s, false));
    v.push(("conv3x3_s2_g2", conv(2, 9, 32, 64, 3, 2, 1, 2), true));
    v.push(("conv7x7_stem", conv(1, 32, 3, 64, 7, 2, 3, 1), true));
    v.push(("conv1x1", conv(2, 7, 64, 256, 1, 1, 0, 1), true));
    v.push(("conv3x3_cg4", conv(1, 8, 8, 16, 3, 1, 1, 2), true));
    let mut s = dense(5, 7, 9);
    s.relu = false;
    v.push(("norelu", s, true));
    // Partial 8-element chunks: A rows (k = 18), B rows (n = 13), B
    // columns (k = 18), half B rows through cp.async (n = 13).
    let mut s = dense(37, 13, 18);
    s.a = AMode::Strided {
        batch: 0,
        row: 20,
        col: 1,
    };
    s.b_strides = [0, 16, 1];
    v.push(("tails", s, false));
    s.b_strides = [0, 1, 20];
    v.push(("tails_kvec", s, false));
    let mut s = dense(20, 13, 16);
    s.b_strides = [0, 16, 1];
    v.push(("async_tail", s, true));
    let mut s = dense(20, 12, 16);
    s.b_strides = [0, 12, 1];
    v.push(("b_vec4", s, false));
    let mut s = dense(30, 20, 40);
    s.b_strides = [0, 1, 40];
    s.aligned16 = false;
    v.push(("kfast_b", s, false));
    // Dilation, stride and asymmetric padding per axis, kh ≠ kw.
    let geom = ConvGeom {
        n: 2,
        h: 11,
        w: 9,
        c: 16,
        oh: 5,
        ow: 8,
        oc: 24,
        kh: 3,
        kw: 2,
        stride: [2, 1],
        dilation: [2, 3],
        pads: [0, 1, 2, 1],
        group: 1,
    };
    let mut s = conv(2, 9, 16, 24, 3, 1, 1, 1);
    s.a = AMode::Conv(geom);
    s.m = 2 * 5 * 8;
    s.k = 3 * 2 * 16;
    s.b_strides = [0, 24, 1];
    v.push(("conv_dilated", s, true));
    let mut s = conv(1, 6, 16, 16, 3, 1, 1, 2);
    s.aligned16 = false;
    v.push(("conv_unaligned", s, true));
    v.push(("k0", dense(16, 16, 0), true));
    v.push(("m0", dense(0, 16, 16), true));
    v.push(("n0", dense(16, 0, 16), true));
    let mut s = dense(8, 8, 8);
    s.batch = 70000;
    s.a = AMode::Strided {
        batch: 64,
        row: 8,
        col: 1,
    };
    s.b_strides = [64, 8, 1];
    s.c_strides = [64, 8, 1];
    s.bias = Some(8);
    v.push(("many_batches", s, true));
    v
}

fn prec_name(p: TcPrecision) -> &'static str {
    match p {
        TcPrecision::F16 => "f16",
        TcPrecision::Bf16 => "bf16",
        TcPrecision::Tf32 => "tf32",
    }
}

/// One module per precision holding every spec; the geometries by name.
fn module(p: TcPrecision, sm: Sm) -> (String, Vec<(String, GemmSpec, bool, Geometry)>) {
    let mut m = ModuleText::new();
    let mut out = Vec::new();
    for (what, s, half) in specs() {
        let half = half && p != TcPrecision::Tf32;
        let name = format!("tc_{}_{what}", prec_name(p));
        let g = gemm_tc(&mut m, &name, &s, p, half, sm).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, s, half, g));
    }
    (m.finish(), out)
}

#[test]
fn gemm_tc_assembles_for_every_precision_and_sm() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for p in TcPrecision::ALL {
        for sm in SMS {
            let (ir, kernels) = module(p, sm);
            let ptx = ir_to_ptx(&ir, sm).unwrap_or_else(|e| panic!("{p:?} {sm}: {e}"));
            assert_eq!(ptx.matches(".visible .entry ").count(), kernels.len());
            let mma = match p {
                TcPrecision::F16 => "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                TcPrecision::Bf16 => "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                TcPrecision::Tf32 => "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
            };
            for (name, s, half, _) in &kernels {
                let body = super::entry(&ptx, name);
                if s.m == 0 || s.n == 0 {
                    assert!(!body.contains("mma.sync"), "{name}: {body}");
                    continue;
                }
                if s.k > 0 {
                    assert!(body.contains(mma), "{name}: {body}");
                    assert!(body.contains("ldmatrix.sync.aligned.m8n8.x4"), "{name}");
                    assert!(body.contains("bar.sync") || body.contains("barrier.sync"));
                }
                let cvt = match p {
                    TcPrecision::F16 => "cvt.rn.f16",
                    TcPrecision::Bf16 => "cvt.rn.bf16",
                    TcPrecision::Tf32 => "cvt.rna.tf32.f32",
                };
                if s.k > 0 {
                    assert!(body.contains(cvt), "{name}: no {cvt}");
                }
                // 16-byte loads of A: packed rows and 8- or 4-channel
                // pixels; none at all for the 3-channel stem with half B.
                let vec = body.contains("ld.global.nc.v4");
                for wide in [
                    "_dense",
                    "_qk",
                    "_conv3x3_s2_g2",
                    "_conv1x1",
                    "_conv3x3_cg4",
                ] {
                    assert!(!name.ends_with(wide) || vec, "{name}");
                }
                if name.ends_with("_conv7x7_stem") && p != TcPrecision::Tf32 {
                    assert!(!vec, "{name}");
                }
                let [_, sk, sn] = s.b_strides;
                let aligned_half_b = *half && s.aligned16 && sn == 1 && sk % 8 == 0 && s.k > 0;
                assert_eq!(body.contains("cp.async"), aligned_half_b, "{name}");
                // A throughput tile (64×64) with half B: a ring of B
                // stages, four on Hopper, three elsewhere.
                if name.ends_with("_big") && *half {
                    let n = if sm >= Sm::Sm90 { 2 } else { 1 };
                    let wait = format!("cp.async.wait_group \t{n};");
                    assert!(body.contains(&wait), "{name}");
                }
            }
            if let (Some(dir), Sm::Sm90) = (&dump, sm) {
                std::fs::create_dir_all(dir).unwrap();
                let base = format!("gemm_tc_{}", prec_name(p));
                std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
                let lines: Vec<String> = kernels
                    .iter()
                    .map(|(n, s, h, g)| manifest_line(n, p, s, *h, g))
                    .collect();
                std::fs::write(dir.join(format!("{base}.txt")), lines.join("\n") + "\n").unwrap();
            }
            if let Ok(x) = &ptxas {
                super::assemble(x, &ptx, sm, &format!("gemm_tc_{}", prec_name(p)));
            }
        }
    }
}

/// One line a GPU check can parse: `key=value` fields separated by spaces.
fn manifest_line(name: &str, p: TcPrecision, s: &GemmSpec, half: bool, g: &Geometry) -> String {
    let a = match s.a {
        AMode::Strided { batch, row, col } => format!("a=strided:{batch}:{row}:{col}"),
        AMode::Conv(c) => format!(
            "a=conv:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
            c.n,
            c.h,
            c.w,
            c.c,
            c.oh,
            c.ow,
            c.oc,
            c.kh,
            c.kw,
            c.stride[0],
            c.stride[1],
            c.dilation[0],
            c.dilation[1],
            c.pads[0],
            c.pads[1],
            c.pads[2],
            c.pads[3],
            c.group
        ),
    };
    let [bb, bk, bn] = s.b_strides;
    let [cb, cr, cc] = s.c_strides;
    format!(
        "name={name} prec={} half={} batch={} m={} n={} k={} {a} b={bb}:{bk}:{bn} c={cb}:{cr}:{cc} bias={} relu={} grid={}:{}:{} block={} smem={}",
        prec_name(p),
        half as u8,
        s.batch,
        s.m,
        s.n,
        s.k,
        s.bias.map_or("none".to_string(), |b| b.to_string()),
        s.relu as u8,
        g.grid[0],
        g.grid[1],
        g.grid[2],
        g.block[0],
        g.smem
    )
}

#[test]
fn gemm_tc_geometry() {
    let mut m = ModuleText::new();
    let sm = Sm::Sm86;
    let g = gemm_tc(
        &mut m,
        "g_big",
        &dense(2048, 2048, 2048),
        TcPrecision::F16,
        true,
        sm,
    );
    let g = g.unwrap();
    assert_eq!(g.grid, [256, 1, 1]);
    assert_eq!(g.block, [256, 1, 1]);
    // Two A tiles and a ring of three B tiles: two blocks fit an sm_86
    // multiprocessor (100 KiB).
    assert_eq!(g.smem, 2 * 128 * 40 * 2 + 3 * 32 * 136 * 2);
    assert!(2 * g.smem <= 100 * 1024);
    // On Hopper a ring of three stages of f32 A and half B.
    let big = dense(2048, 2048, 2048);
    let g = gemm_tc(&mut m, "g_h", &big, TcPrecision::F16, true, Sm::Sm90);
    let g = g.unwrap();
    assert_eq!(g.smem, 2 * 128 * 40 * 2 + 3 * (128 * 32 * 4 + 32 * 136 * 2));
    assert_eq!(g.smem, TcTile::ALL[0].smem_bytes(TcPrecision::F16));
    // Four stages of B alone where A moves element by element.
    let mut odd = big;
    odd.a = AMode::Strided {
        batch: 0,
        row: 2049,
        col: 1,
    };
    let g = gemm_tc(&mut m, "g_h1", &odd, TcPrecision::F16, true, Sm::Sm90);
    assert_eq!(g.unwrap().smem, 2 * 128 * 40 * 2 + 4 * 32 * 136 * 2);
    // f32 B: two stages of A and B.
    let g = gemm_tc(
        &mut m,
        "g_f32b",
        &dense(2048, 2048, 2048),
        TcPrecision::F16,
        false,
        sm,
    );
    assert_eq!(g.unwrap().smem, 2 * (128 * 40 * 2 + 32 * 136 * 2));
    // tf32 elements are 4 bytes; still under sm_86's 99 KiB.
    let g = gemm_tc(
        &mut m,
        "g_tf32",
        &dense(2048, 2048, 2048),
        TcPrecision::Tf32,
        false,
        sm,
    );
    assert_eq!(g.unwrap().smem, 2 * (128 * 36 * 4 + 32 * 136 * 4));
    for t in TcTile::ALL {
        for p in TcPrecision::ALL {
            t.check(p).unwrap();
            assert!(t.smem_bytes(p) <= 99 * 1024);
        }
    }
    // Empty products return at once.
    for (name, s) in [
        ("g_m0", dense(0, 8, 8)),
        ("g_n0", dense(8, 0, 8)),
        (
            "g_b0",
            GemmSpec {
                batch: 0,
                ..dense(8, 8, 8)
            },
        ),
    ] {
        let g = gemm_tc(&mut m, name, &s, TcPrecision::Bf16, true, sm).unwrap();
        assert_eq!((g.grid, g.smem), ([1, 1, 1], 0), "{name}");
    }
    // k = 0: bias (and relu) only, but a real launch.
    let g = gemm_tc(
        &mut m,
        "g_k0",
        &dense(100, 100, 0),
        TcPrecision::F16,
        true,
        sm,
    )
    .unwrap();
    assert!(g.grid[0] >= 1 && g.smem > 0);
    // Batches beyond grid.z loop.
    let mut s = dense(8, 8, 8);
    s.batch = 200_000;
    let g = gemm_tc(&mut m, "g_batches", &s, TcPrecision::F16, true, sm).unwrap();
    assert_eq!(g.grid, [1, 1, 65535]);
    // Tiles by shape: big GEMMs 128×128, BERT's 128×768 and m = 1 the
    // latency tile, n = 64 128×64.
    let latency = TcTile::ALL[TcTile::ALL.len() - 1];
    assert_eq!(latency.bk, 128);
    assert_eq!(choose_tile(&dense(4096, 4096, 4096)), TcTile::ALL[0]);
    assert_eq!(choose_tile(&dense(128, 768, 768)), latency);
    assert_eq!(choose_tile(&dense(1, 1000, 2048)), latency);
    let c = conv(32, 56, 64, 64, 3, 1, 1, 1);
    assert_eq!(choose_tile(&c), TcTile::ALL[1]);
    let g = gemm_tc(&mut m, "g_conv", &c, TcPrecision::F16, true, sm).unwrap();
    assert_eq!(g.grid, [(32 * 56 * 56 / 128) as u32, 1, 1]);
    let ir = m.finish();
    ir_to_ptx(&ir, sm).unwrap();
}

#[test]
fn gemm_tc_refuses_what_it_cannot_do() {
    let mut m = ModuleText::new();
    let s = dense(64, 64, 64);
    for sm in [Sm::Sm70, Sm::Sm75] {
        let e = gemm_tc(&mut m, "r_old", &s, TcPrecision::F16, true, sm).unwrap_err();
        assert!(e.contains(sm.name()) && e.contains("sm_80"), "{e}");
    }
    let e = gemm_tc(&mut m, "r_tf32", &s, TcPrecision::Tf32, true, Sm::Sm86).unwrap_err();
    assert!(e.contains("tf32"), "{e}");
    let e = gemm_tc(&mut m, "bad name", &s, TcPrecision::F16, true, Sm::Sm86).unwrap_err();
    assert!(e.contains("kernel name"), "{e}");
    let mut c = conv(1, 8, 16, 16, 3, 1, 1, 2);
    c.k += 1;
    let e = gemm_tc(&mut m, "r_conv", &c, TcPrecision::F16, true, Sm::Sm86).unwrap_err();
    assert!(e.contains("does not match its geometry"), "{e}");
    let e = gemm_tc(
        &mut m,
        "r_big",
        &dense(1 << 31, 8, 8),
        TcPrecision::F16,
        true,
        Sm::Sm86,
    );
    assert!(e.unwrap_err().contains("too large"));
    let huge = dense(1 << 30, 1 << 26, 8);
    let e = gemm_tc(&mut m, "r_grid", &huge, TcPrecision::F16, true, Sm::Sm86);
    assert!(e.unwrap_err().contains("more than a grid holds"));
    let bad = TcTile {
        bm: 48,
        ..TcTile::ALL[0]
    };
    let e = gemm_tc_tile(&mut m, "r_tile", &s, TcPrecision::F16, true, Sm::Sm86, bad);
    assert!(e.unwrap_err().contains("unsupported"));
}

/// The main tiles on the main paths: ptxas reports no spill stores or
/// loads; prints the register counts.
#[test]
fn gemm_tc_main_tiles_do_not_spill() {
    let Ok(ptxas) = super::find_ptxas() else {
        println!("skipping: no ptxas");
        return;
    };
    let big = dense(4096, 4096, 4096);
    let rn50 = conv(32, 56, 64, 64, 3, 1, 1, 1);
    let mut qk = dense(128, 128, 64);
    qk.b_strides = [0, 1, 64];
    for sm in [Sm::Sm86, Sm::Sm90] {
        let mut m = ModuleText::new();
        let mut names = Vec::new();
        for p in TcPrecision::ALL {
            let half = p != TcPrecision::Tf32;
            for (ti, t) in TcTile::ALL.iter().enumerate() {
                if t.check(p).is_err() {
                    continue;
                }
                for (what, s, h) in [
                    ("dense", &big, half),
                    ("conv", &rn50, half),
                    ("qk", &qk, false),
                ] {
                    let name = format!("s_{}_{what}_t{ti}", prec_name(p));
                    gemm_tc_tile(&mut m, &name, s, p, h, sm, *t).unwrap();
                    names.push(name);
                }
            }
        }
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
        let report = super::assemble(&ptxas, &ptx, sm, "gemm_tc_spills");
        let mut current = String::new();
        for line in report.lines() {
            if let Some(i) = line.find("Compiling entry function '") {
                let rest = &line[i + 26..];
                current = rest[..rest.find('\'').unwrap()].to_string();
            }
            if line.contains("spill stores") {
                assert!(
                    line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                    "{sm} {current}: {line}"
                );
            }
            if let Some(i) = line.find("Used ") {
                println!("{sm} {current}: {}", &line[i..]);
            }
        }
        assert_eq!(
            report.matches("spill stores").count(),
            names.len(),
            "{report}"
        );
    }
}

/// Large products for timing on a GPU, each throughput tile on a few of
/// them, and ragged products on each throughput tile (rows past a tile, n
/// past 256, a k tail, fewer k-tiles than the ring has stages, a grouped
/// convolution). With `AOC_PTX_DUMP_DIR` the sm_90 module and its manifest
/// go there as `perf.*` (the GPU check times every kernel and checks each
/// against a reference where the product is small enough), and an sm_86
/// module of the checks and two products as `perf86.*` (its ring of B is
/// shorter; a Hopper runs it through the driver's JIT). Here they must
/// compile and assemble without spilling.
#[test]
fn gemm_tc_perf_dump() {
    perf_module(Sm::Sm90, "perf", |_| true);
    let few = |n: &str| n.contains("check") || n == "perf_f16_4096" || n == "perf_rn50_3x3_14";
    perf_module(Sm::Sm86, "perf86", few);
}

fn perf_module(sm: Sm, base: &str, keep: impl Fn(&str) -> bool) {
    let mut m = ModuleText::new();
    let mut lines = Vec::new();
    for (name, s, p, t) in perf_specs().into_iter().filter(|x| keep(&x.0)) {
        let g = match t {
            None => gemm_tc(&mut m, &name, &s, p, true, sm),
            Some(t) => gemm_tc_tile(&mut m, &name, &s, p, true, sm, t),
        };
        lines.push(manifest_line(&name, p, &s, true, &g.unwrap()));
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    // 4096³ on Hopper: A's f32 tiles in the ring (three stages, no
    // register loads of A); elsewhere, and for a convolution, B alone in
    // the ring (four stages on Hopper, three elsewhere).
    let hopper = sm >= Sm::Sm90;
    for (name, ring_a) in [("perf_f16_4096", hopper), ("perf_rn50_3x3_14", false)] {
        let body = super::entry(&ptx, name);
        assert_eq!(body.contains("ld.global.nc.v4"), !ring_a, "{sm} {name}");
        let n = if hopper && !ring_a { 2 } else { 1 };
        let wait = format!("cp.async.wait_group \t{n};");
        assert!(body.contains(&wait), "{sm} {name}");
    }
    if let Ok(x) = super::find_ptxas() {
        let report = super::assemble(&x, &ptx, sm, base);
        for line in report.lines().filter(|l| l.contains("spill stores")) {
            assert!(
                line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                "{line}"
            );
        }
    }
    if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
        std::fs::write(dir.join(format!("{base}.txt")), lines.join("\n") + "\n").unwrap();
    }
}

/// `(name, spec, precision, tile or None for choose_tile)`.
type PerfSpec = (String, GemmSpec, TcPrecision, Option<TcTile>);

/// Square GEMMs, ResNet-50 (batch 32) convolutions, BERT's FFN; then
/// the tiles one by one.
fn perf_specs() -> Vec<PerfSpec> {
    let mut v: Vec<PerfSpec> = Vec::new();
    let square = |n| GemmSpec {
        bias: None,
        relu: false,
        ..dense(n, n, n)
    };
    for (n, p) in [
        (4096, TcPrecision::F16),
        (4096, TcPrecision::Bf16),
        (8192, TcPrecision::F16),
    ] {
        v.push((format!("perf_{}_{n}", prec_name(p)), square(n), p, None));
    }
    let f16 = TcPrecision::F16;
    let rn50 = [
        ("3x3_56", conv(32, 56, 64, 64, 3, 1, 1, 1)),
        ("1x1_56", conv(32, 56, 64, 256, 1, 1, 0, 1)),
        ("3x3_28", conv(32, 28, 128, 128, 3, 1, 1, 1)),
        ("3x3_14", conv(32, 14, 256, 256, 3, 1, 1, 1)),
        ("1x1_7", conv(32, 7, 512, 2048, 1, 1, 0, 1)),
    ];
    for (what, s) in rn50 {
        v.push((format!("perf_rn50_{what}"), s, f16, None));
    }
    v.push(("perf_bert_ffn1".into(), dense(4096, 3072, 768), f16, None));
    let throughput = &TcTile::ALL[..TcTile::ALL.len() - 1];
    for (ti, t) in throughput.iter().enumerate() {
        let t = Some(*t);
        v.push((format!("tile{ti}_f16_4096"), square(4096), f16, t));
        v.push((format!("tile{ti}_rn50_1x1_56"), rn50[1].1, f16, t));
        // Fewer blocks than multiprocessors for the larger tiles.
        v.push((format!("tile{ti}_rn50_3x3_14"), rn50[3].1, f16, t));
        let c = conv(32, 7, 512, 512, 3, 1, 1, 1);
        v.push((format!("tile{ti}_rn50_3x3_7"), c, f16, t));
        v.push((
            format!("tile{ti}_bert_ffn2"),
            dense(4096, 768, 3072),
            f16,
            t,
        ));
        v.push((
            format!("tile{ti}_check_dense"),
            dense(300, 600, 200),
            f16,
            t,
        ));
        let bf16 = TcPrecision::Bf16;
        v.push((format!("tile{ti}_check_k40"), dense(130, 520, 40), bf16, t));
        // One k-tile of 18: partial chunks of A (rows 20 apart).
        let mut tail = dense(130, 264, 18);
        tail.a = AMode::Strided {
            batch: 0,
            row: 20,
            col: 1,
        };
        v.push((format!("tile{ti}_check_tail"), tail, f16, t));
        let c = conv(2, 12, 64, 256, 3, 1, 1, 1);
        v.push((format!("tile{ti}_check_conv"), c, f16, t));
        let c = conv(2, 10, 128, 512, 3, 2, 1, 2);
        v.push((format!("tile{ti}_check_conv_g2"), c, bf16, t));
    }
    v
}

/// An epilogue over the f32 result (operand 0) and `extra` operands
/// (type, `[batch, row, col]` strides) computing `exprs`.
fn epilogue(s: &GemmSpec, extra: &[(Scalar, [u64; 3])], exprs: &[Expr]) -> GemmEpilogue {
    let ops: Vec<(Scalar, &[u64])> = std::iter::once((Scalar::F32, &s.c_strides[1..]))
        .chain(extra.iter().map(|(t, st)| (*t, &st[1..])))
        .collect();
    GemmEpilogue {
        kernel: super::kernel("", &[s.m, s.n], &ops, exprs, Scalar::F32),
        strides: extra.iter().map(|e| e.1).collect(),
    }
}

/// The epilogues each spec is tried with, by name: `relu(v + r)` with `r`
/// laid out as C; `v · s[j]`, a per-column broadcast; `v − h` with an f16
/// `h` read transposed; and all three at once, `relu(v·s[j] + r) − h`.
fn epilogues(s: &GemmSpec) -> Vec<(&'static str, GemmEpilogue)> {
    let r = (Scalar::F32, s.c_strides);
    let col = (Scalar::F32, [0, 0, 1]);
    let h = (Scalar::F16, [s.m * s.n, 1, s.m]);
    let (l0, l1, l2, l3) = (Expr::Load(0), Expr::Load(1), Expr::Load(2), Expr::Load(3));
    let residual = [
        l0,
        l1,
        Expr::Binary(Binary::Add, 0, 1),
        Expr::Unary(Unary::Relu, 2),
    ];
    let scale = [l0, l1, Expr::Binary(Binary::Mul, 0, 1)];
    let half = [l0, l1, Expr::Binary(Binary::Sub, 0, 1)];
    let all = [
        l0,
        l1,
        l2,
        l3,
        Expr::Binary(Binary::Mul, 0, 2),
        Expr::Binary(Binary::Add, 4, 1),
        Expr::Unary(Unary::Relu, 5),
        Expr::Binary(Binary::Sub, 6, 3),
    ];
    vec![
        ("residual", epilogue(s, &[r], &residual)),
        ("colscale", epilogue(s, &[col], &scale)),
        ("half", epilogue(s, &[h], &half)),
        ("all", epilogue(s, &[r, col, h], &all)),
    ]
}

/// Specs for the epilogue tests: a dense product (paired stores), a
/// grouped convolution (batch = group, so `b·s0` matters), an unaligned
/// product (scalar stores), and batches past grid.z (the batch loop).
fn epi_specs() -> Vec<(&'static str, GemmSpec, bool)> {
    let all = specs();
    let pick = |n: &str| *all.iter().find(|x| x.0 == n).unwrap();
    vec![
        pick("dense"),
        ("conv", pick("conv3x3_s2_g2").1, true),
        ("unaligned", pick("ragged").1, true),
        pick("many_batches"),
    ]
}

/// The LLVM IR of kernel `name` in module text `ir`.
fn ir_func<'a>(ir: &'a str, name: &str) -> &'a str {
    let start = ir
        .find(&format!("define ptx_kernel void @{name}("))
        .unwrap();
    let len = ir[start..].find("\n}\n").unwrap();
    &ir[start..start + len]
}

/// One kernel of [`epi_module`]: name, spec, tile, extra operands, and
/// the name of its twin without an epilogue.
struct EpiKernel {
    name: String,
    spec: GemmSpec,
    tile: TcTile,
    extra: usize,
    kind: &'static str,
    twin: String,
}

/// Every epilogue on every [`epi_specs`] spec with the tile `gemm_tc`
/// picks, and the all-operand epilogue on each tile of [`TcTile::ALL`]
/// (dense and unaligned: both store paths); each beside its twin without
/// an epilogue.
fn epi_module(p: TcPrecision, sm: Sm) -> (String, Vec<EpiKernel>) {
    let mut m = ModuleText::new();
    let mut out = Vec::new();
    let mut cases: Vec<(String, GemmSpec, bool, Option<TcTile>)> = Vec::new();
    for (what, s, half) in epi_specs() {
        cases.push((what.to_string(), s, half, None));
    }
    for (ti, t) in TcTile::ALL.iter().enumerate() {
        for (what, s, half) in &epi_specs()[..3] {
            if *what != "conv" {
                cases.push((format!("{what}_t{ti}"), *s, *half, Some(*t)));
            }
        }
    }
    for (what, s, half, tile) in cases {
        let half = half && p != TcPrecision::Tf32;
        let twin = format!("e_{}_{what}_plain", prec_name(p));
        let g0 = gemm_tc_with(&mut m, &twin, &s, p, half, sm, tile, None).unwrap();
        let kinds = epilogues(&s);
        // Every epilogue with the chosen tile; the full one per tile.
        let kinds = kinds.iter().filter(|k| tile.is_none() || k.0 == "all");
        for (kind, e) in kinds {
            let name = format!("e_{}_{what}_{kind}", prec_name(p));
            let g = gemm_tc_with(&mut m, &name, &s, p, half, sm, tile, Some(e))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // An epilogue changes neither the launch nor shared memory.
            assert_eq!(g, g0, "{name}");
            out.push(EpiKernel {
                name,
                spec: s,
                tile: tile.unwrap_or_else(|| choose_tile(&s)),
                extra: e.strides.len(),
                kind,
                twin: twin.clone(),
            });
        }
    }
    (m.finish(), out)
}

/// Kernels with fused epilogues: the IR evaluates the epilogue once per
/// stored element (as many calls as accumulators per thread, each inside
/// a store's guard); the PTX takes one more pointer per extra operand and
/// reads each of them (more global loads than the twin without an
/// epilogue, f16 → f32 conversions for the f16 operand); ptxas assembles
/// it for sm_80 … sm_90a without spilling.
#[test]
fn gemm_tc_epilogues() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    for p in TcPrecision::ALL {
        for sm in [Sm::Sm80, Sm::Sm86, Sm::Sm90, Sm::Sm90a] {
            let (ir, kernels) = epi_module(p, sm);
            for k in &kernels {
                let f = ir_func(&ir, &k.name);
                let calls = f.matches(&format!("call float @{}_epi(", k.name)).count();
                let t = k.tile;
                assert_eq!(calls as u32, t.bm * t.bn / t.threads(), "{}", k.name);
                // Each call sits in a store's guarded block, which stores.
                for (i, _) in f.match_indices("_epi(") {
                    let (label, block) = block_at(f, i);
                    let guarded = label.starts_with("chunk.") && !label.starts_with("chunk.end");
                    assert!(guarded, "{}: in {label}", k.name);
                    assert!(block.contains("store "), "{}: {block}", k.name);
                }
                let sig = &f[..f.find('{').unwrap()];
                let base = if k.spec.bias.is_some() { 4 } else { 3 };
                assert_eq!(sig.matches("ptr addrspace(1)").count(), base + k.extra);
            }
            let ptx = ir_to_ptx(&ir, sm).unwrap_or_else(|e| panic!("{p:?} {sm}: {e}"));
            for k in &kernels {
                let what = format!("{sm} {}", k.name);
                let body = super::entry(&ptx, &k.name);
                let (head, code) = body.split_at(body.find(')').unwrap());
                let base = if k.spec.bias.is_some() { 4 } else { 3 };
                assert_eq!(
                    head.matches(".param .u64").count(),
                    base + k.extra,
                    "{what}"
                );
                for i in base..base + k.extra {
                    let param = format!("{}_param_{i}", k.name);
                    assert!(code.contains(&param), "{what}: {param} unused");
                }
                let twin = super::entry(&ptx, &k.twin);
                let loads = |b: &str| b.matches("ld.global").count();
                assert!(loads(code) > loads(twin), "{what}: no epilogue loads");
                if k.kind == "half" || k.kind == "all" {
                    assert!(code.contains("cvt.f32.f16"), "{what}");
                    assert!(!twin.contains("cvt.f32.f16"), "{what}");
                }
            }
            if let Ok(x) = &ptxas {
                let what = format!("gemm_tc_epi_{}", prec_name(p));
                let usage = ptxas_usage(&super::assemble(x, &ptx, sm, &what));
                for k in &kernels {
                    let (regs, spill) = usage[&k.name];
                    let (twin_regs, twin_spill) = usage[&k.twin];
                    assert_eq!(twin_spill, 0, "{sm} {}", k.twin);
                    // ptxas may trade a few bytes of spills for occupancy
                    // (fewer registers than the twin needs: sm_90, f16,
                    // the latency tile with three operands spills 8 bytes
                    // of a prologue address at 56 registers, and none at
                    // 64); anything else is a spill the epilogue causes.
                    assert!(
                        spill == 0 || (regs < twin_regs && spill <= 8),
                        "{sm} {}: {regs} registers, {spill} bytes spilled; without the epilogue {twin_regs}",
                        k.name
                    );
                }
            }
        }
    }
}

/// The label and the text of the basic block holding position `i` of
/// function text `f`.
fn block_at(f: &str, i: usize) -> (&str, &str) {
    let head = f[..i].rfind(":\n").unwrap();
    let label = &f[f[..head].rfind('\n').unwrap() + 1..head];
    let end = f[i..].find(":\n").map_or(f.len(), |e| i + e);
    (label, &f[head + 2..end])
}

/// Per entry of a `ptxas -v` report: registers used and bytes of spill
/// stores.
fn ptxas_usage(report: &str) -> std::collections::HashMap<String, (u32, u32)> {
    let mut out = std::collections::HashMap::new();
    let (mut current, mut spill) = (String::new(), None);
    let number_before = |l: &str, what: &str| -> u32 {
        let head = l[..l.find(what).unwrap()].trim_end();
        head[head.rfind(' ').map_or(0, |i| i + 1)..]
            .parse()
            .unwrap()
    };
    for line in report.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + 26..];
            current = rest[..rest.find('\'').unwrap()].to_string();
        }
        if line.contains("spill stores") {
            spill = Some(number_before(line, " bytes spill stores"));
        }
        if line.contains("Used ") && line.contains(" registers") {
            let regs = number_before(line, " registers");
            out.insert(current.clone(), (regs, spill.take().unwrap()));
        }
    }
    out
}

/// An epilogue on an empty product: the kernel still takes its pointers
/// (a launch passes them whatever the shape) and returns at once; and the
/// refusals: a stride triple per extra operand, an f32 result, offsets
/// that fit i64.
#[test]
fn gemm_tc_epilogue_edges_and_refusals() {
    let mut m = ModuleText::new();
    let (p, sm) = (TcPrecision::F16, Sm::Sm86);
    let empty = dense(0, 16, 16);
    let e = &epilogues(&empty)[3].1;
    let g = gemm_tc_with(&mut m, "z_m0", &empty, p, true, sm, None, Some(e)).unwrap();
    assert_eq!((g.grid, g.smem), ([1, 1, 1], 0));
    // k = 0: the epilogue applies to relu(bias).
    let k0 = dense(40, 40, 0);
    let e = &epilogues(&k0)[0].1;
    gemm_tc_with(&mut m, "z_k0", &k0, p, true, sm, None, Some(e)).unwrap();
    // No extra operand: `sigmoid(v)`, no extra pointer.
    let s = dense(40, 40, 40);
    let e = epilogue(&s, &[], &[Expr::Load(0), Expr::Unary(Unary::Sigmoid, 0)]);
    gemm_tc_with(&mut m, "z_sig", &s, p, true, sm, None, Some(&e)).unwrap();
    let ir = m.finish();
    assert!(ir_func(&ir, "z_sig").contains("call float @z_sig_epi(float "));
    assert_eq!(
        ir_func(&ir, "z_m0").matches("ptr addrspace(1)").count(),
        4 + 3
    );
    assert!(ir_func(&ir, "z_k0").contains("call float @z_k0_epi("));
    let ptx = ir_to_ptx(&ir, sm).unwrap();
    assert_eq!(super::entry(&ptx, "z_m0").matches(".param .u64").count(), 7);
    let sig = super::entry(&ptx, "z_sig");
    assert_eq!(sig.matches(".param .u64").count(), 4);
    assert!(sig.contains("ex2.approx"), "{sig}");
    let s = dense(64, 64, 64);
    let mut m = ModuleText::new();
    let mut bad = epilogues(&s)[0].1.clone();
    bad.strides.push([0, 0, 1]);
    let e = gemm_tc_with(&mut m, "r_n", &s, p, true, sm, None, Some(&bad)).unwrap_err();
    assert!(e.contains("stride triples"), "{e}");
    let mut bad = epilogues(&s)[0].1.clone();
    bad.kernel.out_dtype = Scalar::F16;
    let e = gemm_tc_with(&mut m, "r_t", &s, p, true, sm, None, Some(&bad)).unwrap_err();
    assert!(e.contains("must produce f32"), "{e}");
    let mut bad = epilogues(&s)[0].1.clone();
    bad.strides[0] = [0, 1 << 62, 1 << 62];
    let e = gemm_tc_with(&mut m, "r_o", &s, p, true, sm, None, Some(&bad)).unwrap_err();
    assert!(e.contains("overflow"), "{e}");
}
