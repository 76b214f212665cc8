//! `kernels::gemm_s8`: the int8 tensor-core convolution / GEMM with its
//! requantizing epilogue. Checks that every spec shape gives IR that LLVM
//! accepts and PTX that ptxas assembles for sm_80 … sm_90a, that the PTX
//! uses the intended instructions (the s8 or u8 `mma.sync`, `ldmatrix`,
//! `cp.async`, the epilogue's rounding, the store widths), the tile rule
//! and launch geometry, the refusals, the weight packing, that the tiles
//! do not spill, and runs the kernels on the host with the warp
//! instructions emulated (`kernels_gemm_s8/host.rs`), bit for bit against
//! an exact reference. `AOC_PTX_DUMP_DIR=dir` also writes the sm_86 and
//! sm_90 modules and a manifest of their specs there, for
//! `tests/gpu_checks/gemm_s8.py` on a GPU.

#[path = "kernels_gemm_s8/host.rs"]
mod host;

use aoc_backend_ptx::kernels::gemm_s8::{
    QConvSpec, S8Tile, choose_tile, pack_weights, packed_len, qconv_s8, qconv_s8_tile,
};
use aoc_backend_ptx::kernels::{ConvGeom, Geometry};
use aoc_backend_ptx::kernels::gemm_wgmma::{
    WgTile, choose_q_tile, pack_weights_wg, packed_weights_wg_len, qconv_wgmma, qconv_wgmma_tile,
    supports,
};
use aoc_backend_ptx::expr::{Binary, Expr, Unary};
use aoc_backend_ptx::kernels::GemmEpilogue;
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_ir::types::Scalar;
use aoc_plan::plan::{QuantConv, QuantElem};

const SMS: [Sm; 5] = [Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a];

/// An NHWC convolution `n×h×w×c → oc`, kernel `kh×kw`, strides `[sh,
/// sw]`, pads `[top, left, bottom, right]`, dilations, groups; i8 in and
/// out, no zero points, the full i8 range.
#[allow(clippy::too_many_arguments)]
pub(super) fn qconv(
    n: u64,
    [h, w]: [u64; 2],
    c: u64,
    oc: u64,
    [kh, kw]: [u64; 2],
    stride: [u64; 2],
    pads: [u64; 4],
    dilation: [u64; 2],
    group: u64,
) -> QConvSpec {
    let oh = (h + pads[0] + pads[2] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
    let ow = (w + pads[1] + pads[3] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
    QConvSpec {
        geom: ConvGeom {
            n,
            h,
            w,
            c,
            oh,
            ow,
            oc,
            kh,
            kw,
            stride,
            dilation,
            pads,
            group,
        },
        q: QuantConv {
            x_signed: true,
            x_zero: 0,
            y_signed: true,
            y_zero: 0,
            y_min: -128,
            y_max: 127,
            elem: QuantElem::Int8,
        },
    }
}

/// A square `k×k` convolution with equal pads and stride, no dilation.
#[allow(clippy::too_many_arguments)]
pub(super) fn sq(n: u64, hw: u64, c: u64, oc: u64, k: u64, stride: u64, pad: u64, group: u64) -> QConvSpec {
    qconv(
        n,
        [hw, hw],
        c,
        oc,
        [k, k],
        [stride, stride],
        [pad; 4],
        [1, 1],
        group,
    )
}

/// Named specs covering the load paths (16-byte `cp.async`, 4-byte words,
/// bytes), the store widths (4, 2, 1 bytes), u8 and i8 inputs and
/// outputs, zero points, padding, groups and the empty shapes.
fn specs() -> Vec<(&'static str, QConvSpec)> {
    let mut v = vec![
        // The stem: 3 channels (bytes), 3×3, pads 1.
        ("stem", sq(2, 17, 3, 32, 3, 2, 1, 1)),
        ("c32_3x3", sq(2, 10, 32, 32, 3, 1, 1, 1)),
        ("c32_1x1_s2", sq(2, 9, 32, 64, 1, 2, 0, 1)),
        ("groups2", sq(1, 8, 32, 64, 3, 1, 1, 2)),
        // A GEMM m=100, k=64, n=10 as a 1×1 convolution (2-byte stores).
        ("gemm", sq(1, 1, 64, 10, 1, 1, 0, 1)),
        // 4-byte words of A, kh ≠ kw, dilation, stride and pads per axis.
        (
            "c24_dilated",
            qconv(2, [11, 9], 24, 20, [3, 2], [1, 2], [1, 0, 2, 1], [2, 3], 1),
        ),
        // Bytes everywhere: 2 channels per group, 3 outputs per group.
        ("odd_groups", sq(1, 7, 6, 9, 3, 1, 1, 3)),
        ("k0", sq(1, 4, 0, 8, 1, 1, 0, 1)),
        ("m0", sq(0, 4, 16, 16, 3, 1, 1, 1)),
        ("oc0", sq(1, 4, 16, 0, 3, 1, 1, 1)),
    ];
    v[4].1.geom.h = 100;
    v[4].1.geom.oh = 100;
    // u8 x with zero point 128 (padding reads 128), 16-byte copies.
    let mut s = sq(2, 9, 16, 16, 3, 1, 1, 1);
    s.q.x_signed = false;
    s.q.x_zero = 128;
    v.push(("u8x_zp128", s));
    // u8 x with a zero point through the byte path (the stem).
    let mut s = sq(1, 12, 3, 16, 3, 1, 1, 1);
    s.q.x_signed = false;
    s.q.x_zero = 7;
    v.push(("u8x_stem", s));
    // i8 y, zero point -128, a fused relu (y_min = y_zero).
    let mut s = sq(2, 8, 32, 48, 3, 1, 1, 1);
    s.q.y_zero = -128;
    s.q.y_min = -128;
    v.push(("relu_i8y", s));
    // u8 y with a zero point and a narrowed range; i8 x with a zero point.
    let mut s = sq(1, 9, 8, 12, 3, 2, 1, 1);
    s.q.x_zero = -5;
    s.q.y_signed = false;
    s.q.y_zero = 100;
    s.q.y_min = 3;
    s.q.y_max = 250;
    v.push(("u8y_words", s));
    // Larger: several k-tiles (K = 576) and blocks, ring wrap-around.
    v.push(("c64_28", sq(4, 28, 64, 128, 3, 1, 1, 1)));
    v
}

/// A module of every spec for `sm`, with the geometries by name.
fn module(sm: Sm) -> (String, Vec<(String, QConvSpec, Geometry)>) {
    let mut m = ModuleText::new();
    let mut out = Vec::new();
    for (what, s) in specs() {
        let name = format!("q8_{what}");
        let g = qconv_s8(&mut m, &name, &s, sm).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, s, g));
    }
    (m.finish(), out)
}

/// `cg` and `ocg` of a spec.
fn per_group(s: &QConvSpec) -> (u64, u64) {
    (s.geom.c / s.geom.group, s.geom.oc / s.geom.group)
}

#[test]
fn gemm_s8_assembles_for_every_sm() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for sm in SMS {
        let (ir, kernels) = module(sm);
        let ptx = ir_to_ptx(&ir, sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        assert_eq!(ptx.matches(".visible .entry ").count(), kernels.len());
        if let (Some(dir), Sm::Sm86 | Sm::Sm90) = (&dump, sm) {
            std::fs::create_dir_all(dir).unwrap();
            let base = format!("gemm_s8_{}", sm.name());
            std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
            let lines: Vec<String> = kernels
                .iter()
                .map(|(n, s, g)| manifest_line(n, s, g))
                .collect();
            std::fs::write(dir.join(format!("{base}.txt")), lines.join("\n") + "\n").unwrap();
        }
        for (name, s, _) in &kernels {
            let body = super::entry(&ptx, name);
            let g = &s.geom;
            if g.n == 0 || g.oc == 0 {
                assert!(!body.contains("mma.sync"), "{name}: {body}");
                assert!(!body.contains("st.global"), "{name}");
                continue;
            }
            let (cg, ocg) = per_group(s);
            let k = g.kh * g.kw * cg;
            let mma = if s.q.x_signed {
                "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
            } else {
                "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32"
            };
            // The epilogue's operations, in the CPU's order; 8-bit outputs
            // round and convert in one saturating instruction, then clamp
            // the integer.
            for op in ["cvt.rn.f32.s32", "fma.rn.f32", "cvt.rni.s32.f32", "max.s32", "min.s32"] {
                assert!(body.contains(op), "{name}: no {op}");
            }
            assert!(!body.contains("cvt.rzi.s64.f32"), "{name}: an 8-bit requantization converts through i64");
            if k == 0 {
                assert!(!body.contains("mma.sync"), "{name}");
                continue;
            }
            assert!(body.contains(mma), "{name}: no {mma}");
            assert!(
                body.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                "{name}"
            );
            assert!(
                !body.contains("ldmatrix.sync.aligned.m8n8.x4.trans"),
                "{name}"
            );
            // B always moves with 16-byte copies; A where cg % 16 == 0,
            // else through registers (words or bytes).
            assert!(body.contains("cp.async.cg.shared.global"), "{name}");
            let bytes = ["ld.global.nc.b8", "ld.global.nc.u8", "ld.global.nc.s8"]
                .iter()
                .any(|l| body.contains(l));
            assert_eq!(bytes, cg % 4 != 0, "{name}");
            let (words, copies) = x_accesses(&ir, name);
            assert_eq!(words, cg % 4 == 0 && cg % 16 != 0, "{name}");
            assert_eq!(copies, cg % 16 == 0, "{name}");
            // Padding in `x_zero` bytes: stored by the thread on the
            // cp.async path when the zero point is not 0.
            if cg % 16 == 0 {
                assert_eq!(body.contains("st.shared.v4"), s.q.x_zero != 0, "{name}");
            }
            // Store widths: 4 bytes (after a lane swap), 2, or 1.
            let w4 = g.oc % 4 == 0 && ocg % 4 == 0;
            let w2 = !w4 && g.oc % 2 == 0 && ocg % 2 == 0;
            assert_eq!(body.contains("shfl.sync.bfly"), w4, "{name}");
            assert_eq!(
                body.contains("st.global.u32") || body.contains("st.global.b32"),
                w4,
                "{name}"
            );
            assert_eq!(
                body.contains("st.global.u16") || body.contains("st.global.b16"),
                w2,
                "{name}"
            );
            assert_eq!(
                body.contains("st.global.u8") || body.contains("st.global.b8"),
                !w4 && !w2,
                "{name}"
            );
            let wait = format!("cp.async.wait_group \t{};", S8Tile::stages(sm) - 2);
            assert!(body.contains(&wait), "{name}");
        }
        if let Ok(x) = &ptxas {
            super::assemble(x, &ptx, sm, "gemm_s8");
        }
    }
}

/// How kernel `name` of module `ir` reads x (`%p0`): whether it loads
/// 4-byte words of it, and whether it copies it with `cp.async` (read off
/// the IR, where x's addresses are the `getelementptr`s on `%p0`).
fn x_accesses(ir: &str, name: &str) -> (bool, bool) {
    let head = format!("define ptx_kernel void @{name}(");
    let f = &ir[ir.find(&head).unwrap()..];
    let f = &f[..f.find("\n}\n").unwrap()];
    let ptrs: Vec<&str> = f
        .lines()
        .filter(|l| l.contains("getelementptr i8, ptr addrspace(1) %p0,"))
        .map(|l| l.trim().split(' ').next().unwrap())
        .collect();
    let uses = |pat: &dyn Fn(&str) -> String| ptrs.iter().any(|p| f.contains(&pat(p)));
    (
        uses(&|p| format!("load i32, ptr addrspace(1) {p},")),
        uses(&|p| format!("ptr addrspace(1) {p}, i32 %")),
    )
}

/// One line the GPU check parses: `key=value` fields separated by spaces.
pub(super) fn manifest_line(name: &str, s: &QConvSpec, g: &Geometry) -> String {
    let c = &s.geom;
    format!(
        "name={name} geom={}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{} x_signed={} x_zero={} y_signed={} y_zero={} y_min={} y_max={} grid={}:{}:{} block={} smem={}",
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
        c.group,
        s.q.x_signed as u8,
        s.q.x_zero,
        s.q.y_signed as u8,
        s.q.y_zero,
        s.q.y_min,
        s.q.y_max,
        g.grid[0],
        g.grid[1],
        g.grid[2],
        g.block[0],
        g.smem
    )
}

#[test]
fn gemm_s8_tiles_and_geometry() {
    let sm = Sm::Sm86;
    let mut m = ModuleText::new();
    // Large: 128×128 tiles, 8 warps; three stages of 16 KiB (four on
    // Hopper).
    let big = sq(32, 56, 64, 256, 3, 1, 1, 1);
    assert_eq!(choose_tile(&big), S8Tile::ALL[0]);
    let g = qconv_s8(&mut m, "q_big", &big, sm).unwrap();
    assert_eq!(g.grid, [(32 * 56 * 56 / 128) * 2, 1, 1]);
    assert_eq!(g.block, [256, 1, 1]);
    assert_eq!(g.smem, 3 * 256 * 64);
    let g = qconv_s8(&mut m, "q_big90", &big, Sm::Sm90).unwrap();
    assert_eq!(g.smem, 4 * 256 * 64);
    // 64 output channels: 128×64.
    let mid = sq(32, 56, 64, 64, 3, 1, 1, 1);
    assert_eq!(choose_tile(&mid), S8Tile::ALL[1]);
    // Few rows: 128×128 and 128×64 give fewer than 132 blocks → 64×64.
    let small = sq(1, 14, 256, 256, 3, 1, 1, 1);
    assert_eq!(choose_tile(&small), S8Tile::ALL[2]);
    let g = qconv_s8(&mut m, "q_small", &small, sm).unwrap();
    assert_eq!(g.grid, [4 * 4, 1, 1]);
    assert_eq!(g.block, [128, 1, 1]);
    // Groups multiply the blocks: 2 groups × ⌈64/64⌉ × ⌈32/64⌉.
    let gr = sq(1, 8, 32, 64, 3, 1, 1, 2);
    let g = qconv_s8(&mut m, "q_groups", &gr, sm).unwrap();
    assert_eq!(g.grid, [2, 1, 1]);
    for t in S8Tile::ALL {
        t.check().unwrap();
        assert!(t.smem_bytes(Sm::Sm90) <= 64 * 1024);
        // Two blocks fit an sm_86 multiprocessor (100 KiB).
        assert!(2 * t.smem_bytes(Sm::Sm86) <= 100 * 1024);
    }
    // Empty outputs return at once; K = 0 is a real launch.
    for (name, s) in [
        ("q_m0", sq(0, 4, 16, 16, 3, 1, 1, 1)),
        ("q_oc0", sq(1, 4, 16, 0, 3, 1, 1, 1)),
    ] {
        let g = qconv_s8(&mut m, name, &s, sm).unwrap();
        assert_eq!((g.grid, g.smem), ([1, 1, 1], 0), "{name}");
    }
    let g = qconv_s8(&mut m, "q_k0", &sq(1, 4, 0, 8, 1, 1, 0, 1), sm).unwrap();
    assert_eq!(g.grid, [1, 1, 1]);
    assert!(g.smem > 0);
    // Very many blocks: the grid's x holds 2^31 - 1.
    let mut huge = sq(1, 1, 16, 16, 1, 1, 0, 1);
    huge.geom.h = 1 << 30;
    huge.geom.oh = 1 << 30;
    huge.geom.w = 4;
    huge.geom.ow = 4;
    assert!(qconv_s8(&mut m, "q_huge", &huge, sm).is_err());
    huge.geom.w = 1;
    huge.geom.ow = 1;
    let g = qconv_s8(&mut m, "q_huge1", &huge, sm).unwrap();
    assert_eq!(g.grid, [(1 << 30) / 128, 1, 1]);
    ir_to_ptx(&m.finish(), sm).unwrap();
}

#[test]
fn gemm_s8_refusals() {
    let mut m = ModuleText::new();
    let ok = sq(1, 8, 16, 16, 3, 1, 1, 1);
    for sm in [Sm::Sm70, Sm::Sm75] {
        let e = qconv_s8(&mut m, "q", &ok, sm).unwrap_err();
        assert!(e.contains("sm_80"), "{e}");
    }
    assert!(qconv_s8(&mut m, "q-1", &ok, Sm::Sm86).is_err());
    let mut bad = ok;
    bad.geom.group = 3;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    bad.geom.group = 0;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    let mut bad = ok;
    bad.q.x_zero = 128;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    bad.q.x_signed = false;
    qconv_s8(&mut m, "q_u8", &bad, Sm::Sm86).unwrap();
    bad.q.x_zero = -1;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    let mut bad = ok;
    bad.q.y_max = 200;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    bad.q.y_signed = false;
    bad.q.y_min = 0;
    qconv_s8(&mut m, "q_u8y", &bad, Sm::Sm86).unwrap();
    bad.q.y_min = 201;
    assert!(qconv_s8(&mut m, "q", &bad, Sm::Sm86).is_err());
    let e = qconv_s8_tile(
        &mut m,
        "q",
        &ok,
        Sm::Sm86,
        S8Tile {
            bm: 48,
            bn: 64,
            warps_m: 2,
            warps_n: 2,
        },
    );
    assert!(e.unwrap_err().contains("unsupported"));
}

#[test]
fn gemm_s8_pack_weights() {
    // K = 3·3·3 = 27 → rows of 32 bytes, zero-padded.
    let s = sq(1, 8, 3, 5, 3, 1, 1, 1);
    assert_eq!(packed_len(&s), 5 * 32);
    let w: Vec<i8> = (0..5 * 27).map(|i| (i % 251) as i8).collect();
    let p = pack_weights(&s, &w);
    assert_eq!(p.len(), 5 * 32);
    for o in 0..5 {
        assert_eq!(&p[o * 32..o * 32 + 27], &w[o * 27..o * 27 + 27]);
        assert!(p[o * 32 + 27..o * 32 + 32].iter().all(|&b| b == 0));
    }
    // Groups: K = 3·3·8 = 72 → rows of 80.
    let s = sq(1, 8, 16, 4, 3, 1, 1, 2);
    let w: Vec<i8> = (0..4 * 72).map(|i| (i * 7 % 256) as u8 as i8).collect();
    assert_eq!(packed_len(&s), 4 * 80);
    let p = pack_weights(&s, &w);
    assert_eq!(&p[80..152], &w[72..144]);
    // K a multiple of 16: the OHWI bytes unchanged.
    let s = sq(1, 8, 32, 4, 3, 1, 1, 2);
    let w: Vec<i8> = (0..4 * 144).map(|i| (i * 7 % 256) as u8 as i8).collect();
    assert_eq!(pack_weights(&s, &w), w);
    // K = 0: nothing.
    assert!(
        pack_weights(&sq(1, 4, 0, 8, 1, 1, 0, 1), &[])
            .iter()
            .all(|&b| b == 0)
    );
}

/// Every tile on each load path, s8 and u8, for sm_86 and sm_90: ptxas
/// reports no spill stores or loads; prints the register counts.
#[test]
fn gemm_s8_tiles_do_not_spill() {
    let Ok(ptxas) = super::find_ptxas() else {
        println!("skipping: no ptxas");
        return;
    };
    let mut u8x = sq(8, 28, 64, 128, 3, 1, 1, 1);
    u8x.q.x_signed = false;
    u8x.q.x_zero = 128;
    let paths = [
        ("async", sq(8, 28, 64, 128, 3, 1, 1, 1)),
        ("async_u8", u8x),
        ("words", sq(8, 28, 24, 128, 3, 1, 1, 1)),
        ("bytes", sq(8, 56, 3, 64, 7, 2, 3, 1)),
        ("gemm", sq(1, 1, 512, 500, 1, 1, 0, 1)),
    ];
    for sm in [Sm::Sm86, Sm::Sm90] {
        let mut m = ModuleText::new();
        let mut names = Vec::new();
        for (ti, t) in S8Tile::ALL.iter().enumerate() {
            for (what, s) in &paths {
                let mut s = *s;
                if *what == "gemm" {
                    s.geom.h = 4096;
                    s.geom.oh = 4096;
                }
                let name = format!("s8_{what}_t{ti}");
                qconv_s8_tile(&mut m, &name, &s, sm, *t).unwrap();
                names.push(name);
            }
        }
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
        let report = super::assemble(&ptxas, &ptx, sm, "gemm_s8_spills");
        let mut current = String::new();
        let mut spills = Vec::new();
        for line in report.lines() {
            if let Some(i) = line.find("Compiling entry function '") {
                let rest = &line[i + 26..];
                current = rest[..rest.find('\'').unwrap()].to_string();
            }
            if line.contains("spill stores")
                && !line.contains(" 0 bytes spill stores, 0 bytes spill loads")
            {
                spills.push(format!("{sm} {current}: {}", line.trim()));
            }
            if let Some(i) = line.find("Used ") {
                println!("{sm} {current}: {}", &line[i..]);
            }
        }
        assert!(spills.is_empty(), "{}", spills.join("\n"));
        assert_eq!(
            report.matches("spill stores").count(),
            names.len(),
            "{report}"
        );
    }
}

/// Every load path, store width, zero point and tile, run on the host with
/// the warp instructions emulated (`host.rs`), bit for bit against the
/// exact reference.
#[test]
fn gemm_s8_runs_on_the_host() {
    for (i, (what, s)) in specs().into_iter().enumerate() {
        let g = &s.geom;
        // Those with output, small enough for the host (each block's
        // threads are OS threads): all but `c64_28`.
        if g.n * g.oh * g.ow * g.oc == 0 || g.n * g.oh * g.ow > 1024 {
            continue;
        }
        host::check(what, &s, None, i as u64);
    }
    // Several k-tiles through the ring (K = 576: 9), each tile.
    let deep = sq(1, 9, 64, 40, 3, 1, 1, 1);
    for (ti, t) in S8Tile::ALL.iter().enumerate() {
        host::check(&format!("deep_t{ti}"), &deep, Some(*t), 100 + ti as u64);
    }
    // Bytes and words across several k-tiles, u8 x with a zero point, on
    // the largest tile; a tail of rows and channels in the last tiles.
    let mut s = sq(1, 11, 20, 36, 3, 1, 1, 1);
    s.q.x_signed = false;
    s.q.x_zero = 200;
    host::check("words_deep_t0", &s, Some(S8Tile::ALL[0]), 7);
    let mut s = sq(2, 10, 9, 18, 3, 1, 2, 1);
    s.q.x_zero = -3;
    host::check("bytes_deep_t1", &s, Some(S8Tile::ALL[1]), 8);
}

/// The specs of [`specs`] the sm_90a `wgmma` kernel takes (one group,
/// channels in multiples of 16), each with the tile it chooses, and more
/// with every tile width: odd channel counts (byte stores), rows that end
/// inside a tile, a u8 input with a zero point and padding.
pub(super) fn wgmma_specs() -> Vec<(String, QConvSpec, WgTile)> {
    let mut v: Vec<(String, QConvSpec, WgTile)> = specs()
        .into_iter()
        .filter(|(_, s)| supports(s, Sm::Sm90a))
        .map(|(n, s)| (format!("wg_{n}"), s, choose_q_tile(&s)))
        .collect();
    let mut odd = sq(3, 7, 16, 9, 3, 1, 1, 1);
    odd.q.x_signed = false;
    odd.q.x_zero = 3;
    let mut wide = sq(2, 13, 48, 200, 3, 2, 1, 1);
    wide.q.y_signed = false;
    wide.q.y_zero = 10;
    wide.q.y_min = 10;
    wide.q.y_max = 255;
    let deep = sq(1, 9, 272, 64, 3, 1, 1, 1);
    for (what, s) in [("odd_oc", odd), ("wide", wide), ("deep", deep)] {
        for bn in [64, 128, 256] {
            let tile = WgTile { bn, stages: 4 };
            v.push((format!("wg_{what}_{bn}"), s, tile));
        }
    }
    v.push(("wg_deep_paired".to_string(), deep, WgTile { bn: 128, stages: 3 }));
    v
}

#[test]
fn qconv_wgmma_assembles_for_sm_90a() {
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let mut kernels = Vec::new();
    for (name, s, tile) in wgmma_specs() {
        let g = qconv_wgmma_tile(&mut m, &name, &s, sm, tile, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        kernels.push((name, s, tile, g));
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    assert_eq!(ptx.matches(".visible .entry ").count(), kernels.len());
    for (name, s, tile, g) in &kernels {
        let body = super::entry(&ptx, name);
        let gm = &s.geom;
        if gm.n == 0 || gm.oc == 0 {
            assert_eq!((g.grid, g.smem), ([1, 1, 1], 0), "{name}");
            assert!(!body.contains("wgmma") && !body.contains("st.global"), "{name}");
            continue;
        }
        let rows = gm.n * gm.oh * gm.ow;
        let blocks = rows.div_ceil(128) * gm.oc.div_ceil(tile.bn as u64);
        assert_eq!(g.grid, [blocks as u32, 1, 1], "{name}");
        assert_eq!((g.block, g.smem), ([256, 1, 1], tile.smem_bytes()), "{name}");
        let a = if s.q.x_signed { "s8" } else { "u8" };
        let mma = format!("wgmma.mma_async.sync.aligned.m64n{}k32.s32.{a}.s8", tile.bn);
        // Four k32 steps per 128-byte k-tile (LLVM may copy the loop body).
        let steps = body.matches(&mma).count();
        assert!(steps > 0 && steps % 4 == 0, "{name}: {steps} of {mma}");
        for op in ["cvt.rn.f32.s32", "fma.rn.f32", "cvt.rni.s32.f32", "max.s32", "min.s32"] {
            assert!(body.contains(op), "{name}: no {op}");
        }
        assert!(!body.contains("cvt.rzi.s64.f32"), "{name}: an 8-bit requantization converts through i64");
        // Padding in `x_zero` bytes is stored by the thread.
        assert_eq!(body.contains("st.shared.v4"), s.q.x_zero != 0, "{name}");
        // Bytes staged in shared memory, stored in 16-byte runs where oc
        // is a multiple of 16, else byte by byte.
        assert!(body.contains("st.shared.b16") || body.contains("st.shared.u16"), "{name}");
        let w16 = body.contains("st.global.v4.b32") || body.contains("st.global.v4.u32");
        let w1 = body.contains("st.global.u8") || body.contains("st.global.b8");
        assert_eq!((w16, w1), (gm.oc % 16 == 0, gm.oc % 16 != 0), "{name}");
    }
    if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gemm_s8_sm_90a.ptx"), &ptx).unwrap();
        let lines: Vec<String> = kernels
            .iter()
            .map(|(n, s, t, g)| format!("{} pack=wg:{}", manifest_line(n, s, g), t.bn))
            .collect();
        std::fs::write(dir.join("gemm_s8_sm_90a.txt"), lines.join("\n") + "\n").unwrap();
    }
    match super::find_ptxas() {
        Ok(x) => {
            let report = super::assemble(&x, &ptx, sm, "qconv_wgmma");
            for line in report.lines() {
                assert!(!line.contains("spill stores") || line.contains(" 0 bytes spill stores"), "{line}");
                assert!(!line.contains("serialized"), "{line}");
            }
        }
        Err(why) => println!("skipping the ptxas part: {why}"),
    }
}

/// BERT-base's GEMMs at batch 32 (4096 rows: q/k/v and the output
/// projection, the two FFN layers) as 1×1 convolutions, u8 input with a
/// zero point as `aoc quantize` makes them, each with the tile the
/// compiler chooses and with the others it could have: with
/// `AOC_PTX_DUMP_DIR` set, written as `gemm_s8_bench_sm_90a.{ptx,txt}`
/// for `gpu_checks/gemm_s8.py --time`, which checks and times them. Every
/// kernel assembles without spills or serialized `wgmma`s, and a tile
/// that two blocks share a multiprocessor by shared memory is asked to
/// share it by registers too.
#[test]
fn qconv_wgmma_bert_tiles_assemble() {
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let mut kernels = Vec::new();
    for (what, c, oc) in [("proj", 768, 768), ("ffn1", 768, 3072), ("ffn2", 3072, 768)] {
        let mut s = sq(4096, 1, c, oc, 1, 1, 0, 1);
        s.q.x_signed = false;
        s.q.x_zero = 121;
        let chosen = choose_q_tile(&s);
        let mut tiles = vec![chosen];
        for (bn, stages) in [(64, 4), (64, 6), (128, 3), (128, 4), (192, 4), (256, 4)] {
            let t = WgTile { bn, stages };
            if t != chosen && t.check().is_ok() {
                tiles.push(t);
            }
        }
        for (i, tile) in tiles.into_iter().enumerate() {
            let tag = if i == 0 { "chosen" } else { "alt" };
            let name = format!("wgb_{what}_{}x{}_{tag}", tile.bn, tile.stages);
            let g = qconv_wgmma_tile(&mut m, &name, &s, sm, tile, None).unwrap_or_else(|e| panic!("{name}: {e}"));
            kernels.push((name, s, tile, g));
        }
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    for (name, _, tile, _) in &kernels {
        let head = ptx.split(&format!(".entry {name}(")).nth(1).expect(name);
        let head = &head[..head.find('{').unwrap()];
        assert_eq!(head.contains(".minnctapersm 2"), tile.pairs(), "{name}: {head}");
    }
    if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gemm_s8_bench_sm_90a.ptx"), &ptx).unwrap();
        let lines: Vec<String> = kernels
            .iter()
            .map(|(n, s, t, g)| format!("{} pack=wg:{}", manifest_line(n, s, g), t.bn))
            .collect();
        std::fs::write(dir.join("gemm_s8_bench_sm_90a.txt"), lines.join("\n") + "\n").unwrap();
    }
    match super::find_ptxas() {
        Ok(x) => {
            let report = super::assemble(&x, &ptx, sm, "qconv_wgmma bench");
            for line in report.lines() {
                assert!(!line.contains("serialized"), "{line}");
            }
        }
        Err(why) => println!("skipping the ptxas part: {why}"),
    }
}

#[test]
fn qconv_wgmma_packs_rows_into_swizzled_tiles() {
    // 1×1, K = 160 (two k-tiles, the second 32 bytes long), oc = 70 (two
    // n-tiles of 64).
    let s = sq(1, 4, 160, 70, 1, 1, 0, 1);
    let tile = WgTile { bn: 64, stages: 4 };
    let (k, oc) = (160usize, 70usize);
    let ohwi: Vec<i8> = (0..oc * k).map(|i| ((i * 7 + i / k) % 251) as u8 as i8).collect();
    let p = pack_weights_wg(&s, tile, &ohwi);
    assert_eq!(p.len(), packed_weights_wg_len(&s, tile));
    assert_eq!(p.len(), 2 * 2 * 128 * 64);
    for o in 0..oc {
        for kk in 0..k {
            let (nt, nr, kt, kr) = (o / 64, o % 64, kk / 128, kk % 128);
            let block = (nt * 2 + kt) * 128 * 64;
            let at = block + nr * 128 + ((kr / 16) ^ (nr % 8)) * 16 + kr % 16;
            assert_eq!(p[at], ohwi[o * k + kk], "o {o} k {kk}");
        }
    }
    // Everything else is zero: the bytes past k and past oc.
    let nonzero = ohwi.iter().filter(|&&v| v != 0).count();
    assert_eq!(p.iter().filter(|&&v| v != 0).count(), nonzero);
}

#[test]
fn qconv_wgmma_refusals_and_choice() {
    let mut m = ModuleText::new();
    let ok = sq(1, 8, 32, 32, 3, 1, 1, 1);
    assert!(supports(&ok, Sm::Sm90a));
    qconv_wgmma(&mut m, "wg_ok", &ok, Sm::Sm90a).unwrap();
    for sm in [Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90] {
        assert!(!supports(&ok, sm));
        let e = qconv_wgmma(&mut m, "wg", &ok, sm).unwrap_err();
        assert!(e.contains("sm_90a"), "{e}");
    }
    // Grouped, channels not in 16-byte chunks, the stem's 3.
    for bad in [sq(1, 8, 32, 32, 3, 1, 1, 2), sq(1, 8, 24, 32, 3, 1, 1, 1), sq(1, 8, 3, 32, 3, 1, 1, 1)] {
        assert!(!supports(&bad, Sm::Sm90a));
        assert!(qconv_wgmma(&mut m, "wg", &bad, Sm::Sm90a).is_err());
    }
    let bad_tile = WgTile { bn: 40, stages: 4 };
    assert!(qconv_wgmma_tile(&mut m, "wg", &ok, Sm::Sm90a, bad_tile, None).is_err());
    // ResNet-50's 3×3 convolutions at batch 32 fill the GPU with wide tiles.
    let big = sq(32, 56, 64, 64, 3, 1, 1, 1);
    assert_eq!(choose_q_tile(&big).bn, 64);
    let wide = sq(32, 14, 256, 1024, 1, 1, 0, 1);
    assert!(choose_q_tile(&wide).bn >= 128);
}

/// An epilogue over the `m × n` output of `s`: `(y − 3)·0.5 + r·0.25`
/// stored as `out`, `r` an 8-bit operand laid out as the output.
fn residual_epilogue(s: &QConvSpec, out: Scalar) -> GemmEpilogue {
    let (m, n) = (s.geom.n * s.geom.oh * s.geom.ow, s.geom.oc);
    let own = if s.q.y_signed { Scalar::I8 } else { Scalar::U8 };
    let dense: &[u64] = &[n, 1];
    let exprs = [
        Expr::Load(0),
        Expr::Const(3.0),
        Expr::Binary(Binary::Sub, 0, 1),
        Expr::Const(0.5),
        Expr::Binary(Binary::Mul, 2, 3),
        Expr::Load(1),
        Expr::Const(0.25),
        Expr::Binary(Binary::Mul, 5, 6),
        Expr::Binary(Binary::Add, 4, 7),
    ];
    GemmEpilogue {
        kernel: super::kernel("", &[m, n], &[(own, dense), (Scalar::I8, dense)], &exprs, out),
        strides: vec![[0, n, 1]],
    }
}

/// An epilogue of the requantized byte alone that stores a byte: the
/// dequantized value through `erf`, quantized again (an int8 GELU's
/// shape) as `out`.
fn byte_function_epilogue(s: &QConvSpec, out: Scalar) -> GemmEpilogue {
    let (m, n) = (s.geom.n * s.geom.oh * s.geom.ow, s.geom.oc);
    let own = if s.q.y_signed { Scalar::I8 } else { Scalar::U8 };
    let exprs = [
        Expr::Load(0),
        Expr::Const(5.0),
        Expr::Binary(Binary::Sub, 0, 1),
        Expr::Const(0.05),
        Expr::Binary(Binary::Mul, 2, 3),
        Expr::Unary(Unary::Erf, 4),
        Expr::Const(100.0),
        Expr::Binary(Binary::Mul, 5, 6),
        Expr::Unary(Unary::RoundEven, 7),
    ];
    GemmEpilogue { kernel: super::kernel("", &[m, n], &[(own, &[n, 1])], &exprs, out), strides: vec![] }
}

/// A byte-to-byte epilogue is tabulated: each thread evaluates it once
/// (one `erf`, one table store) and each element is a shared-memory
/// lookup; with another operand, or a float result, it is evaluated per
/// element. Both assemble.
#[test]
fn qconv_wgmma_tabulates_byte_functions() {
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let s = sq(2, 9, 32, 48, 3, 1, 1, 1);
    let signed = QConvSpec { q: QuantConv { y_signed: true, ..s.q }, ..s };
    let cases = [
        ("wgt_u8", s, byte_function_epilogue(&s, Scalar::U8), true),
        ("wgt_i8", signed, byte_function_epilogue(&signed, Scalar::I8), true),
        ("wgt_f32", s, byte_function_epilogue(&s, Scalar::F32), false),
        ("wgt_residual", s, residual_epilogue(&s, Scalar::U8), false),
    ];
    for (name, s, e, _) in &cases {
        qconv_wgmma_tile(&mut m, name, s, sm, choose_q_tile(s), Some(e)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    for (name, _, _, table) in &cases {
        let body = super::entry(&ptx, name);
        let lookups = ["ld.shared.u8", "ld.shared.b8", "ld.shared.s8"].iter().map(|l| body.matches(l).count()).sum::<usize>();
        let erfs = body.matches("ex2.approx").count();
        if *table {
            assert!(lookups >= 16 && erfs == 1, "{name}: {lookups} byte lookups, {erfs} exp2");
        } else {
            assert_eq!(lookups, 0, "{name}");
        }
    }
    if let Ok(x) = super::find_ptxas() {
        super::assemble(&x, &ptx, sm, "qconv_wgmma_tables");
    }
}

#[test]
fn qconv_wgmma_takes_an_epilogue() {
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let even = sq(2, 9, 32, 48, 3, 1, 1, 1);
    let odd = sq(1, 7, 16, 9, 3, 1, 1, 1);
    let mut cases = Vec::new();
    for (what, s) in [("x16", even), ("odd", odd)] {
        for out in [Scalar::I8, Scalar::U8, Scalar::F32] {
            let name = format!("wge_{what}_{}", out.name());
            let e = residual_epilogue(&s, out);
            let g = qconv_wgmma_tile(&mut m, &name, &s, sm, choose_q_tile(&s), Some(&e)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(g.grid[0] > 0);
            cases.push((name, s, out));
        }
    }
    // The epilogue must read the convolution's own 8-bit output and store
    // 8-bit integers or f32.
    let mut bad = residual_epilogue(&even, Scalar::F16);
    assert!(qconv_wgmma_tile(&mut m, "wge_bad", &even, sm, choose_q_tile(&even), Some(&bad)).is_err());
    bad.kernel.out_dtype = Scalar::I8;
    bad.kernel.operands[0].dtype = Scalar::U8;
    assert!(qconv_wgmma_tile(&mut m, "wge_bad", &even, sm, choose_q_tile(&even), Some(&bad)).is_err());
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    for (name, s, out) in &cases {
        let body = super::entry(&ptx, name);
        // The residual operand is read (bytes) and the result stored in
        // its type. An 8-bit result goes through the staging tile: 16-byte
        // pieces where oc is a multiple of 16, and the residual then read
        // in 16-byte pieces too, never byte by byte. An f32 one (oc even)
        // is stored from the accumulators in pairs, reading the residual
        // at the pair, without the staging tile's barrier.
        let whole = s.geom.oc % 16 == 0;
        let direct = *out == Scalar::F32 && s.geom.oc % 2 == 0;
        let byte_loads = ["ld.global.nc.u8", "ld.global.nc.s8", "ld.global.u8", "ld.global.s8"].iter().any(|l| body.contains(l));
        assert_eq!(byte_loads, !whole || direct, "{name}: byte loads of the residual");
        assert!(!whole || direct || body.contains("ld.global.nc.v4"), "{name}: no 16-byte residual load");
        let staged = ["st.shared.u16", "st.shared.b16"].iter().any(|l| body.contains(l));
        assert_eq!(staged, !direct, "{name}: the staging tile");
        let want: &[&str] = match (out, whole) {
            _ if direct => &["st.global.v2.f32", "st.global.v2.b32"],
            (Scalar::F32, true) => &["st.global.v4.f32", "st.global.v4.b32"],
            (Scalar::F32, false) => &["st.global.f32", "st.global.b32"],
            (_, true) => &["st.global.v4.b32", "st.global.v4.u32"],
            _ => &["st.global.b8", "st.global.u8"],
        };
        assert!(want.iter().any(|w| body.contains(w)), "{name}: none of {want:?}");
    }
    if let Ok(x) = super::find_ptxas() {
        super::assemble(&x, &ptx, sm, "qconv_wgmma_epilogue");
    }
}
