//! `kernels::gemm_wgmma`: the sm_90a GEMM on `wgmma`. Checks that the
//! kernels lower to PTX for sm_90a that ptxas assembles without spills and
//! without serializing the `wgmma` pipeline, that the PTX has the intended
//! instructions and descriptor bits, the launch geometry, the refusals, and
//! the packed-B layout. `AOC_PTX_DUMP_DIR=dir` writes `gemm_wgmma.ptx`, its
//! manifest `gemm_wgmma.txt` and `gemm_wgmma_pack.bin` (a packed sample B)
//! for `tests/gpu_checks/gemm_wgmma.py`.

use aoc_backend_ptx::expr::{Binary, Expr, Unary};
use aoc_backend_ptx::kernels::gemm_wgmma::{
    WgPrecision, WgTile, choose_wg_tile, gemm_wgmma, gemm_wgmma_tile, pack_b, packed_b_len,
    packed_b_offset,
};
use aoc_backend_ptx::kernels::{AMode, ConvGeom, GemmEpilogue, GemmSpec, Geometry};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_ir::types::Scalar;

/// `m×k · k×n`, A rows `ka ≥ k` apart, C rows `nc ≥ n` apart, bias and
/// relu.
fn spec(m: u64, n: u64, k: u64, ka: u64, nc: u64) -> GemmSpec {
    GemmSpec {
        batch: 1,
        m,
        n,
        k,
        a: AMode::Strided {
            batch: 0,
            row: ka,
            col: 1,
        },
        b_strides: [0, n, 1],
        c_strides: [0, nc, 1],
        bias: Some(0),
        relu: true,
        aligned16: true,
    }
}

/// `relu(v + r)`, `r` laid out as C.
fn residual(s: &GemmSpec) -> GemmEpilogue {
    let ops: Vec<(Scalar, &[u64])> = vec![
        (Scalar::F32, &s.c_strides[1..]),
        (Scalar::F32, &s.c_strides[1..]),
    ];
    let exprs = [
        Expr::Load(0),
        Expr::Load(1),
        Expr::Binary(Binary::Add, 0, 1),
        Expr::Unary(Unary::Relu, 2),
    ];
    GemmEpilogue {
        kernel: super::kernel("", &[s.m, s.n], &ops, &exprs, Scalar::F32),
        strides: vec![s.c_strides],
    }
}

/// A kernel of the GPU check: name, spec, precision, tile, epilogue.
struct Case {
    name: &'static str,
    s: GemmSpec,
    p: WgPrecision,
    t: WgTile,
    epi: bool,
}

fn cases() -> Vec<Case> {
    use WgPrecision::{Bf16, F16};
    let case = |name, s: GemmSpec, p, t, epi| Case { name, s, p, t, epi };
    let mut plain = spec(4096, 4096, 4096, 4096, 4096);
    plain.bias = None;
    plain.relu = false;
    let mut v = vec![
        case(
            "wg_f16_128",
            spec(128, 128, 64, 64, 128),
            F16,
            WgTile::NARROW,
            false,
        ),
        // Every edge: m, n and k tails, odd C rows (no pair stores).
        case(
            "wg_f16_edges",
            spec(300, 200, 70, 72, 203),
            F16,
            WgTile::NARROW,
            false,
        ),
        case(
            "wg_f16_edges_wide",
            spec(300, 200, 70, 72, 200),
            F16,
            WgTile::WIDE,
            false,
        ),
        case(
            "wg_bf16_edges",
            spec(300, 200, 70, 72, 203),
            Bf16,
            WgTile::NARROW,
            false,
        ),
        case(
            "wg_f16_epi",
            spec(300, 200, 70, 72, 200),
            F16,
            WgTile::NARROW,
            true,
        ),
        // Fewer k-tiles than the ring has stages; a k tail inside a chunk.
        case(
            "wg_f16_short_k",
            spec(130, 260, 13, 16, 260),
            F16,
            WgTile::WIDE,
            false,
        ),
        case(
            "wg_f16_k0",
            spec(50, 60, 0, 8, 60),
            F16,
            WgTile::NARROW,
            false,
        ),
        case(
            "wg_f16_4096",
            spec(4096, 4096, 4096, 4096, 4096),
            F16,
            WgTile::WIDE,
            false,
        ),
        case("wg_f16_4096_plain", plain, F16, WgTile::WIDE, false),
        case(
            "wg_f16_4096_n128",
            spec(4096, 4096, 4096, 4096, 4096),
            F16,
            WgTile::NARROW,
            false,
        ),
        case(
            "wg_bf16_4096",
            spec(4096, 4096, 4096, 4096, 4096),
            Bf16,
            WgTile::WIDE,
            false,
        ),
        case(
            "wg_f16_8192",
            spec(8192, 8192, 8192, 8192, 8192),
            F16,
            WgTile::WIDE,
            false,
        ),
    ];
    let mut s5 = WgTile::NARROW;
    s5.stages = 6;
    v.push(case(
        "wg_f16_4096_n128s6",
        spec(4096, 4096, 4096, 4096, 4096),
        F16,
        s5,
        false,
    ));
    // Implicit convolutions: 3×3 padded, strided, dilated, 1×1 strided, more
    // than one k-tile per tap, m and n tails.
    let narrow64 = WgTile { bn: 64, stages: 4 };
    for (name, g, t) in [
        (
            "wg_conv3x3",
            conv_geom(2, 10, 10, 64, 64, 3, 1, 1, 1),
            narrow64,
        ),
        (
            "wg_conv3x3_s2",
            conv_geom(3, 9, 11, 128, 96, 3, 2, 1, 1),
            WgTile::NARROW,
        ),
        (
            "wg_conv3x3_d2",
            conv_geom(1, 12, 12, 64, 200, 3, 1, 2, 2),
            WgTile::WIDE,
        ),
        (
            "wg_conv1x1_s2",
            conv_geom(4, 14, 14, 256, 128, 1, 2, 1, 0),
            narrow64,
        ),
    ] {
        v.push(case(name, conv_spec(&g), F16, t, false));
    }
    let mut s3 = WgTile::WIDE;
    s3.stages = 3;
    v.push(case(
        "wg_f16_4096_s3",
        spec(4096, 4096, 4096, 4096, 4096),
        F16,
        s3,
        false,
    ));
    v
}

fn prec_name(p: WgPrecision) -> &'static str {
    match p {
        WgPrecision::F16 => "f16",
        WgPrecision::Bf16 => "bf16",
    }
}

/// One line the GPU check parses: `key=value` fields.
fn manifest_line(c: &Case, g: &Geometry) -> String {
    let AMode::Strided { row, .. } = c.s.a else {
        unreachable!()
    };
    format!(
        "name={} prec={} m={} n={} k={} arow={row} crow={} bias={} relu={} epi={} bn={} stages={} grid={} block={} smem={}",
        c.name,
        prec_name(c.p),
        c.s.m,
        c.s.n,
        c.s.k,
        c.s.c_strides[1],
        c.s.bias.is_some() as u8,
        c.s.relu as u8,
        if c.epi { "residual" } else { "none" },
        c.t.bn,
        c.t.stages,
        g.grid[0],
        g.block[0],
        g.smem
    )
}

/// The value of the sample B's element `i` (row-major): every bit
/// pattern distinct for `i < 65536`.
fn sample(i: u64) -> u16 {
    (i as u16).wrapping_mul(40503).wrapping_add(1)
}

#[test]
fn gemm_wgmma_assembles_without_spills() {
    let mut m = ModuleText::new();
    let mut lines = Vec::new();
    let cases = cases();
    for c in &cases {
        let e = c.epi.then(|| residual(&c.s));
        let g = gemm_wgmma_tile(&mut m, c.name, &c.s, c.p, e.as_ref(), Sm::Sm90a, c.t)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        // (The GPU check runs the plain GEMMs; convolutions run end to end
        // in compiler/tests/gpu.rs.)
        if matches!(c.s.a, AMode::Strided { .. }) {
            lines.push(manifest_line(c, &g));
        }
    }
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm90a).unwrap();
    // Written before the checks, so that a failure can be looked at.
    if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gemm_wgmma.ptx"), &ptx).unwrap();
        std::fs::write(dir.join("gemm_wgmma.txt"), lines.join("\n") + "\n").unwrap();
        // B of 100 × 300 (`sample(i)` at row-major index i) packed for
        // the narrow tile: the script checks its own packing against it.
        let s = spec(1, 300, 100, 104, 300);
        let b: Vec<u16> = (0..100 * 300).map(sample).collect();
        let packed = pack_b(&s, WgTile::NARROW, &b);
        let bytes: Vec<u8> = packed.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.join("gemm_wgmma_pack.bin"), bytes).unwrap();
    }
    assert!(ptx.contains(".target sm_90a"), "{ptx}");
    assert!(ptx.contains(".extern .shared .align 1024 .b8 aoc_wg_smem[]"));
    for c in &cases {
        let body = super::entry(&ptx, c.name);
        if c.s.k == 0 {
            assert!(!body.contains("wgmma"), "{}", c.name);
            continue;
        }
        let mma = format!(
            "wgmma.mma_async.sync.aligned.m64n{}k16.f32.{p}.{p}",
            c.t.bn,
            p = prec_name(c.p)
        );
        // Four k16 steps per k-tile, in one loop (unrolled where there
        // are few k-tiles).
        let n = body.matches(&mma).count();
        assert!(n >= 4 && n % 4 == 0, "{}: {n} wgmma", c.name);
        for ins in [
            "wgmma.fence.sync.aligned;",
            "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 1;",
            "wgmma.wait_group.sync.aligned 0;",
            "fence.proxy.async.shared::cta;",
            "cp.async.cg.shared.global",
            "bar.sync",
            // Descriptor bits: 128-byte swizzle, stride 1024 B, leading 16 B.
            "4611686293305360384",
        ] {
            assert!(body.contains(ins), "{}: no {ins}", c.name);
        }
        let wait = format!("cp.async.wait_group \t{};", c.t.stages - 3);
        assert!(body.contains(&wait), "{}: no {wait}", c.name);
        assert!(body.contains(".maxntid 256"), "{}", c.name);
        // a, b, [bias], c, [the residual].
        let params = 3 + c.s.bias.is_some() as usize + c.epi as usize;
        assert_eq!(body.matches(".param .u64").count(), params, "{}", c.name);
        let pairs = c.s.c_strides[1] % 2 == 0 && c.s.n % 2 == 0;
        let v2 = body.contains("st.global.v2.f32") || body.contains("st.global.v2.b32");
        assert_eq!(v2, pairs, "{}", c.name);
    }
    if let Ok(x) = super::find_ptxas() {
        let report = super::assemble(&x, &ptx, Sm::Sm90a, "gemm_wgmma");
        let mut current = String::new();
        for line in report.lines() {
            if let Some(i) = line.find("Compiling entry function '") {
                let rest = &line[i + 26..];
                current = rest[..rest.find('\'').unwrap()].to_string();
            }
            assert!(!line.contains("serialized"), "{current}: {line}");
            if line.contains("spill stores") {
                assert!(
                    line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                    "{current}: {line}"
                );
            }
            if let Some(i) = line.find("Used ") {
                println!("{current}: {}", &line[i..]);
            }
        }
        assert_eq!(report.matches("spill stores").count(), cases.len());
    } else {
        println!("skipping the ptxas part: no ptxas");
    }
}

#[test]
fn gemm_wgmma_geometry() {
    let mut m = ModuleText::new();
    let f16 = WgPrecision::F16;
    let big = spec(4096, 4096, 4096, 4096, 4096);
    assert_eq!(choose_wg_tile(&big), WgTile::WIDE);
    let g = gemm_wgmma(&mut m, "g_big", &big, f16, None, Sm::Sm90a).unwrap();
    assert_eq!(g.grid, [32 * 16, 1, 1]);
    assert_eq!(g.block, [256, 1, 1]);
    assert_eq!(g.smem, 4 * (128 * 64 * 2 + 256 * 64 * 2) + 1024);
    assert!(g.smem <= 227 * 1024);
    assert_eq!(WgTile::NARROW.smem_bytes(), 4 * 32 * 1024 + 1024);
    // Far fewer wide tiles than multiprocessors: the narrowest.
    let small = spec(512, 768, 768, 768, 768);
    assert_eq!(choose_wg_tile(&small), WgTile { bn: 64, stages: 4 });
    let g = gemm_wgmma(&mut m, "g_small", &small, f16, None, Sm::Sm90a).unwrap();
    assert_eq!(g.grid, [4 * 12, 1, 1]);
    // No tile wider than n needs: 64 columns, one width.
    assert_eq!(
        choose_wg_tile(&spec(100352, 64, 576, 576, 64)),
        WgTile { bn: 64, stages: 4 }
    );
    assert_eq!(choose_wg_tile(&spec(100352, 128, 1152, 1152, 128)).bn, 128);
    // ResNet-50's last stage at batch 32 (13 tile rows, n = 512): 128×64.
    assert_eq!(
        choose_wg_tile(&spec(1568, 512, 4608, 4608, 512)),
        WgTile { bn: 64, stages: 4 }
    );
    // BERT-base at batch 32: n = 768 fills one wave with 128×192 tiles
    // (128 blocks); n = 3072 with k = 768 pairs 128×128 blocks (three
    // stages) on each multiprocessor, k = 3072 does not.
    assert_eq!(
        choose_wg_tile(&spec(4096, 768, 768, 768, 768)),
        WgTile { bn: 192, stages: 4 }
    );
    assert_eq!(
        choose_wg_tile(&spec(4096, 3072, 768, 768, 3072)),
        WgTile { bn: 128, stages: 3 }
    );
    assert_eq!(
        choose_wg_tile(&spec(4096, 3072, 3072, 3072, 3072)),
        WgTile::WIDE
    );
    assert!(WgTile { bn: 128, stages: 3 }.smem_bytes() * 2 <= 227 * 1024);
    // m = 1: one tile row of 16 128×64 tiles (no tile fills a wave).
    let g = gemm_wgmma(
        &mut m,
        "g_m1",
        &spec(1, 1000, 2048, 2048, 1000),
        f16,
        None,
        Sm::Sm90a,
    );
    assert_eq!(g.unwrap().grid, [16, 1, 1]);
    // Empty products return at once; k = 0 is a real launch.
    for (name, s) in [("g_m0", spec(0, 8, 8, 8, 8)), ("g_n0", spec(8, 0, 8, 8, 8))] {
        let g = gemm_wgmma(&mut m, name, &s, f16, None, Sm::Sm90a).unwrap();
        assert_eq!((g.grid, g.smem), ([1, 1, 1], 0), "{name}");
    }
    let g = gemm_wgmma(&mut m, "g_k0", &spec(8, 8, 0, 8, 8), f16, None, Sm::Sm90a).unwrap();
    assert_eq!(g.grid, [1, 1, 1]);
    for t in [WgTile::WIDE, WgTile::NARROW] {
        t.check().unwrap();
    }
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm90a).unwrap();
    assert!(!super::entry(&ptx, "g_m0").contains("wgmma"));
}

#[test]
fn gemm_wgmma_refuses_what_it_cannot_do() {
    let mut m = ModuleText::new();
    let f16 = WgPrecision::F16;
    let s = spec(64, 64, 64, 64, 64);
    for sm in Sm::ALL.into_iter().filter(|&x| x != Sm::Sm90a) {
        let e = gemm_wgmma(&mut m, "r_sm", &s, f16, None, sm).unwrap_err();
        assert!(e.contains("sm_90a") && e.contains(sm.name()), "{e}");
    }
    let err = |s: &GemmSpec| gemm_wgmma(&mut ModuleText::new(), "r", s, f16, None, Sm::Sm90a);
    let mut b = s;
    b.batch = 2;
    assert!(err(&b).unwrap_err().contains("batch 1"));
    let mut b = s;
    b.a = AMode::Strided {
        batch: 0,
        row: 1,
        col: 64,
    };
    assert!(err(&b).unwrap_err().contains("unit column stride"));
    // Rows of 70 halves are not 16-byte aligned.
    assert!(
        err(&spec(64, 64, 70, 70, 64))
            .unwrap_err()
            .contains("multiple of 8")
    );
    let mut b = s;
    b.aligned16 = false;
    assert!(err(&b).is_err());
    let mut b = s;
    b.c_strides = [0, 1, 64];
    assert!(err(&b).unwrap_err().contains("C with unit column stride"));
    assert!(
        err(&spec(1 << 31, 8, 8, 8, 8))
            .unwrap_err()
            .contains("too large")
    );
    let e = gemm_wgmma(&mut m, "bad name", &s, f16, None, Sm::Sm90a).unwrap_err();
    assert!(e.contains("kernel name"), "{e}");
    for t in [
        WgTile { bn: 48, stages: 4 },
        WgTile { bn: 256, stages: 2 },
        WgTile { bn: 256, stages: 5 },
    ] {
        let e = gemm_wgmma_tile(&mut m, "r_t", &s, f16, None, Sm::Sm90a, t).unwrap_err();
        assert!(e.contains("wgmma tile"), "{e}");
    }
    // Implicit convolutions: channels in 16-byte runs, one group, a GEMM
    // of the geometry's shape.
    let g = conv_geom(2, 8, 8, 64, 64, 3, 1, 1, 1);
    gemm_wgmma(&mut m, "r_conv", &conv_spec(&g), f16, None, Sm::Sm90a).unwrap();
    for bad in [
        conv_geom(2, 8, 8, 12, 64, 3, 1, 1, 1),
        ConvGeom {
            group: 2,
            oc: 128,
            ..conv_geom(2, 8, 8, 128, 128, 3, 1, 1, 1)
        },
    ] {
        assert!(
            err(&conv_spec(&bad))
                .unwrap_err()
                .contains("multiples of 8")
        );
    }
    let mut b = conv_spec(&g);
    b.k -= 64;
    assert!(err(&b).unwrap_err().contains("internal error"));
}

/// An NHWC convolution `n × h × w × c → oc`, `kh × kh` filter, stride,
/// dilation, padding `pad` on every side.
#[allow(clippy::too_many_arguments)]
fn conv_geom(
    n: u64,
    h: u64,
    w: u64,
    c: u64,
    oc: u64,
    kh: u64,
    stride: u64,
    dil: u64,
    pad: u64,
) -> ConvGeom {
    let out = |x: u64| (x + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
    ConvGeom {
        n,
        h,
        w,
        c,
        oh: out(h),
        ow: out(w),
        oc,
        kh,
        kw: kh,
        stride: [stride; 2],
        dilation: [dil; 2],
        pads: [pad; 4],
        group: 1,
    }
}

/// The GEMM of convolution `g` as the translator states it: bias, relu,
/// C the NHWC output.
fn conv_spec(g: &ConvGeom) -> GemmSpec {
    GemmSpec {
        batch: 1,
        m: g.n * g.oh * g.ow,
        n: g.oc,
        k: g.kh * g.kw * g.c,
        a: AMode::Conv(*g),
        b_strides: [0, g.oc, 1],
        c_strides: [g.oc, g.oc, 1],
        bias: Some(g.oc),
        relu: true,
        aligned16: true,
    }
}

/// Every `(k, n)` lands where the shared-memory layout says: block
/// `(nt·ktiles + kt)` of `64·bn`, then byte `128·nr + 16·((kr/8) ^ (nr%8))
/// + 2·(kr%8)` in it; the offsets are distinct; the rest is zero.
#[test]
fn gemm_wgmma_pack_b_layout() {
    for (k, n, t) in [
        (64, 128, WgTile::NARROW),
        (70, 200, WgTile::NARROW),
        (130, 300, WgTile::WIDE),
        (13, 40, WgTile::WIDE),
        (0, 10, WgTile::NARROW),
    ] {
        let s = spec(1, n, k, k.next_multiple_of(8), n);
        let (bn, ktiles) = (t.bn as u64, k.div_ceil(64));
        let len = ktiles * n.div_ceil(bn) * 64 * bn;
        assert_eq!(packed_b_len(&s, t) as u64, len);
        let b: Vec<u16> = (0..k * n).map(sample).collect();
        let packed = pack_b(&s, t, &b);
        assert_eq!(packed.len() as u64, len);
        let mut seen = vec![false; len as usize];
        for kk in 0..k {
            for nn in 0..n {
                let (kt, kr, nt, nr) = (kk / 64, kk % 64, nn / bn, nn % bn);
                let byte = 128 * nr + 16 * ((kr / 8) ^ (nr % 8)) + 2 * (kr % 8);
                let at = ((nt * ktiles + kt) * 64 * bn + byte / 2) as usize;
                assert_eq!(packed_b_offset(&s, t, kk, nn), at, "({kk}, {nn})");
                assert_eq!(packed[at], b[(kk * n + nn) as usize], "({kk}, {nn})");
                assert!(!seen[at], "({kk}, {nn}) collides");
                seen[at] = true;
            }
        }
        let zeros = packed.iter().zip(&seen).all(|(x, used)| *used || *x == 0);
        assert!(zeros, "padding of {k}x{n} is not zero");
    }
}

/// The half-copy form (for a following `wgmma` GEMM): one more pointer,
/// 16-bit stores beside the f32 stores of C (only those without
/// `keep_f32`), and it assembles; a strided C is refused.
#[test]
fn gemm_wgmma_half_copy() {
    use aoc_backend_ptx::kernels::HalfCopy;
    use aoc_backend_ptx::kernels::gemm_wgmma::gemm_wgmma_with;
    let s = spec(300, 768, 256, 256, 768);
    let e = residual(&s);
    let mut m = ModuleText::new();
    let only = HalfCopy {
        keep_f32: false,
        ..HalfCopy::F16
    };
    for (name, h) in [
        ("wg_half_f16", HalfCopy::F16),
        ("wg_half_bf16", HalfCopy::BF16),
        ("wg_half_only", only),
    ] {
        gemm_wgmma_with(
            &mut m,
            name,
            &s,
            WgPrecision::F16,
            Some(&e),
            Sm::Sm90a,
            WgTile::NARROW,
            Some(h),
        )
        .unwrap();
    }
    gemm_wgmma_tile(
        &mut m,
        "wg_plain",
        &s,
        WgPrecision::F16,
        Some(&e),
        Sm::Sm90a,
        WgTile::NARROW,
    )
    .unwrap();
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm90a).unwrap();
    let stores = |name: &str| {
        let b = super::entry(&ptx, name);
        let wide = b.matches("st.global.v2.f32").count() + b.matches("st.global.v2.b32").count();
        let half = b.matches("st.global.b16").count()
            + b.matches("st.global.v2.b16").count()
            + b.matches("st.global.b32").count();
        (b.matches(".param .u64").count(), wide, half)
    };
    let (params, wide, half) = stores("wg_plain");
    assert!(wide > 0 && half == 0, "{wide} {half}");
    for name in ["wg_half_f16", "wg_half_bf16"] {
        assert_eq!(stores(name), (params + 1, wide, wide), "{name}");
    }
    assert_eq!(stores("wg_half_only"), (params + 1, 0, wide));
    if let Ok(x) = super::find_ptxas() {
        super::assemble(&x, &ptx, Sm::Sm90a, "gemm_wgmma_half");
    }
    let mut strided = s;
    strided.c_strides = [0, 1024, 1];
    let bad = gemm_wgmma_with(
        &mut ModuleText::new(),
        "wg_bad",
        &strided,
        WgPrecision::F16,
        None,
        Sm::Sm90a,
        WgTile::NARROW,
        Some(HalfCopy::F16),
    );
    assert!(bad.is_err());
}
