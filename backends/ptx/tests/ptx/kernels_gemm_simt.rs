//! Tests of `kernels::gemm_simt` (fp32 GEMM and implicit-GEMM convolution
//! on the CUDA cores): the IR verifies and lowers for every target, ptxas
//! accepts it without spills, the code has the intended shape (`fma.rn.f32`,
//! shared-memory tiles, 16-byte global loads where the strides allow them)
//! and the launch geometry covers the problem. Pointwise epilogues
//! (`gemm_f32_with`): parameters, inlined helper and its loads, one call
//! per stored element, register use, error cases. The child module `host`
//! runs the kernels on the host (LLVM's JIT) against a naive product.
//!
//! `AOC_PTX_DUMP_DIR=dir` also writes `gemm_simt-<sm>.ptx` and
//! `gemm_simt.cases` (one line per kernel: name, spec, geometry) there, for
//! a run of the kernels against a reference on a GPU machine.

use aoc_backend_ptx::expr::{Binary, Expr, Operand, PointwiseKernel, Unary};
use aoc_backend_ptx::kernels::gemm_simt::{
    SimtTile, gemm_f32, gemm_f32_tile, gemm_f32_with, pick_tile,
};
use aoc_backend_ptx::kernels::{AMode, ConvGeom, GemmEpilogue, GemmSpec, Geometry};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_ir::types::Scalar;

use super::{assemble, entry, find_ptxas};

/// The kernels run on the host through LLVM's JIT.
#[path = "kernels_gemm_simt/host.rs"]
mod host;

/// Row-major `A (m×k) · B (k×n) → C (m×n)`, 16-byte aligned.
fn dense(m: u64, n: u64, k: u64) -> GemmSpec {
    GemmSpec {
        batch: 1,
        m,
        n,
        k,
        a: AMode::Strided {
            batch: m * k,
            row: k,
            col: 1,
        },
        b_strides: [k * n, n, 1],
        c_strides: [m * n, n, 1],
        bias: None,
        relu: false,
        aligned16: true,
    }
}

#[allow(clippy::too_many_arguments)]
fn geom(n: u64, hw: u64, c: u64, oc: u64, kk: u64, stride: u64, pad: u64, group: u64) -> ConvGeom {
    let o = (hw + 2 * pad - kk) / stride + 1;
    ConvGeom {
        n,
        h: hw,
        w: hw,
        c,
        oh: o,
        ow: o,
        oc,
        kh: kk,
        kw: kk,
        stride: [stride; 2],
        dilation: [1; 2],
        pads: [pad; 4],
        group,
    }
}

/// The product a `Step::Conv2d` lowers to: one batch per group, B the
/// group's `(kh·kw·cg) × ocg` weights, C the group's output columns.
fn conv(g: ConvGeom, bias: bool, relu: bool) -> GemmSpec {
    let (cg, ocg) = (g.c / g.group, g.oc / g.group);
    let k = g.kh * g.kw * cg;
    GemmSpec {
        batch: g.group,
        m: g.n * g.oh * g.ow,
        n: ocg,
        k,
        a: AMode::Conv(g),
        b_strides: [k * ocg, ocg, 1],
        c_strides: [ocg, g.oc, 1],
        bias: bias.then_some(ocg),
        relu,
        aligned16: true,
    }
}

/// The specs every target compiles: each load path, guard and epilogue.
fn cases() -> Vec<(&'static str, GemmSpec)> {
    let mut v = vec![
        (
            "dense_bias_relu",
            GemmSpec {
                bias: Some(0),
                relu: true,
                ..dense(1000, 600, 300)
            },
        ),
        ("dense_square", dense(2048, 2048, 2048)),
        (
            "b_transposed",
            GemmSpec {
                b_strides: [0, 1, 264],
                ..dense(300, 200, 264)
            },
        ),
        (
            "a_transposed",
            GemmSpec {
                a: AMode::Strided {
                    batch: 0,
                    row: 1,
                    col: 256,
                },
                ..dense(256, 96, 70)
            },
        ),
        (
            "batch_broadcast",
            GemmSpec {
                batch: 3,
                a: AMode::Strided {
                    batch: 0,
                    row: 64,
                    col: 1,
                },
                b_strides: [64 * 80, 80, 1],
                c_strides: [100 * 80, 80, 1],
                bias: Some(80),
                ..dense(100, 80, 64)
            },
        ),
        (
            "unaligned_strided",
            GemmSpec {
                batch: 2,
                a: AMode::Strided {
                    batch: 600,
                    row: 15,
                    col: 1,
                },
                b_strides: [13 * 31 * 2, 2, 31],
                c_strides: [37 * 40, 40, 1],
                bias: Some(29),
                relu: true,
                aligned16: false,
                ..dense(37, 29, 13)
            },
        ),
        (
            "conv3x3_s2_g2",
            conv(geom(2, 15, 16, 32, 3, 2, 1, 2), true, true),
        ),
        (
            "conv1x1",
            conv(geom(2, 14, 64, 32, 1, 1, 0, 1), true, false),
        ),
        (
            "conv1x1_s2",
            conv(geom(1, 14, 32, 64, 1, 2, 0, 1), false, true),
        ),
        (
            "conv7x7_c3",
            conv(geom(1, 32, 3, 16, 7, 2, 3, 1), true, true),
        ),
    ];
    let mut dil = geom(1, 12, 8, 24, 3, 1, 2, 1);
    dil.dilation = [2, 1];
    dil.pads = [1, 2, 3, 0];
    // Stride 1: padded extent − window span + 1.
    (dil.oh, dil.ow) = (12 + 1 + 3 - 5 + 1, 12 + 2 - 3 + 1);
    v.push(("conv_dilated", conv(dil, false, false)));
    v.push((
        "m1_bias",
        GemmSpec {
            bias: Some(0),
            ..dense(1, 1000, 512)
        },
    ));
    v.push((
        "k0_bias_relu",
        GemmSpec {
            bias: Some(0),
            relu: true,
            ..dense(5, 7, 0)
        },
    ));
    v.push(("m0", dense(0, 7, 3)));
    v.push(("n0", dense(7, 0, 3)));
    v.push((
        "batch0",
        GemmSpec {
            batch: 0,
            ..dense(4, 4, 4)
        },
    ));
    v.push((
        "batch_70000",
        GemmSpec {
            batch: 70000,
            a: AMode::Strided {
                batch: 8,
                row: 4,
                col: 1,
            },
            b_strides: [12, 3, 1],
            c_strides: [6, 3, 1],
            aligned16: false,
            ..dense(2, 3, 4)
        },
    ));
    v
}

/// Specs whose buffers are too large for a quick GPU run (`huge_` names).
fn huge_cases() -> Vec<(&'static str, GemmSpec)> {
    vec![(
        "huge_offsets",
        GemmSpec {
            batch: 2,
            a: AMode::Strided {
                batch: 1 << 31,
                row: 64,
                col: 1,
            },
            ..dense(256, 256, 64)
        },
    )]
}

fn spec_line(name: &str, s: &GemmSpec, g: &Geometry) -> String {
    let list = |v: &[u64]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let a = match s.a {
        AMode::Strided { batch, row, col } => format!("strided:{}", list(&[batch, row, col])),
        AMode::Conv(c) => format!(
            "conv:{}",
            list(&[
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
            ])
        ),
    };
    format!(
        "{name} batch={} m={} n={} k={} a={a} b={} c={} bias={} relu={} aligned={} grid={} block={} smem={}",
        s.batch,
        s.m,
        s.n,
        s.k,
        list(&s.b_strides),
        list(&s.c_strides),
        s.bias.map_or(-1, |x| x as i64),
        s.relu as u8,
        s.aligned16 as u8,
        list(&g.grid.map(u64::from)),
        list(&g.block.map(u64::from)),
        g.smem
    )
}

/// One module with every case (picked tile) and every candidate tile on a
/// 16-byte path and a scalar convolution path; the case lines.
fn module() -> (String, Vec<String>) {
    let mut m = ModuleText::new();
    let mut lines = Vec::new();
    for (name, s) in cases().into_iter().chain(huge_cases()) {
        let g = gemm_f32(&mut m, name, &s).unwrap_or_else(|e| panic!("{name}: {e}"));
        lines.push(spec_line(name, &s, &g));
    }
    for t in SimtTile::CANDIDATES {
        let tag = format!("{}x{}x{}_{}x{}_k{}", t.bm, t.bn, t.bk, t.tm, t.tn, t.ks);
        let specs = [
            (
                "dense",
                GemmSpec {
                    bias: Some(0),
                    relu: true,
                    ..dense(1000, 600, 300)
                },
            ),
            ("conv", conv(geom(2, 15, 6, 32, 3, 2, 1, 2), true, true)),
        ];
        for (what, s) in specs {
            let name = format!("tile_{tag}_{what}");
            let g = gemm_f32_tile(&mut m, &name, &s, t).unwrap_or_else(|e| panic!("{name}: {e}"));
            lines.push(spec_line(&name, &s, &g));
        }
    }
    (m.finish(), lines)
}

/// `(registers, spill bytes)` per entry from a `ptxas -v` report.
fn ptxas_usage(report: &str) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut spill = 0;
    for line in report.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + "Compiling entry function '".len()..];
            cur = Some(rest[..rest.find('\'').unwrap()].to_string());
            spill = 0;
        } else if line.contains("bytes spill stores") {
            let nums: Vec<u32> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            // "N bytes stack frame, S bytes spill stores, L bytes spill loads"
            spill = nums[1] + nums[2];
        } else if let Some(i) = line.find("Used ") {
            let regs: u32 = line[i + 5..].split(' ').next().unwrap().parse().unwrap();
            let name = cur.take().expect("a usage line follows an entry line");
            out.push((name, regs, spill));
        }
    }
    out
}

#[test]
fn gemm_simt_ptxas_accepts_every_case() {
    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    let (ir, lines) = module();
    let names: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
    let mut spills = Vec::new();
    for sm in [Sm::Sm75, Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a] {
        let ptx = ir_to_ptx(&ir, sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        assert!(ptx.contains(&format!(".target {}", sm.name())));
        for n in &names {
            assert!(ptx.contains(&format!(".entry {n}(")), "{sm}: no entry {n}");
        }
        if let Some(dir) = &dump {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("gemm_simt-{}.ptx", sm.name())), &ptx).unwrap();
            std::fs::write(dir.join("gemm_simt.cases"), lines.join("\n") + "\n").unwrap();
        }
        let Ok(p) = &ptxas else { continue };
        let report = assemble(p, &ptx, sm, "gemm_simt");
        let usage = ptxas_usage(&report);
        assert_eq!(usage.len(), names.len(), "{report}");
        for (name, regs, spill) in &usage {
            if *spill > 0 {
                spills.push(format!(
                    "{sm} {name}: {regs} registers, {spill} bytes spilled"
                ));
            }
            if sm == Sm::Sm86 || sm == Sm::Sm90 {
                println!("{sm} {name}: {regs} registers");
            }
        }
    }
    assert!(spills.is_empty(), "spills:\n{}", spills.join("\n"));
    // sm_70 lowers too (CUDA 13's ptxas no longer assembles it).
    ir_to_ptx(&ir, Sm::Sm70).unwrap();
}

#[test]
fn gemm_simt_code_shape() {
    let mut m = ModuleText::new();
    let main = GemmSpec {
        bias: Some(0),
        relu: true,
        ..dense(4096, 4096, 1024)
    };
    let g = gemm_f32(&mut m, "main", &main).unwrap();
    assert_eq!(pick_tile(&main), SimtTile::CANDIDATES[0]);
    assert_eq!(g.block, [256, 1, 1]);
    let scalar = GemmSpec {
        aligned16: false,
        ..main
    };
    gemm_f32(&mut m, "scalar", &scalar).unwrap();
    gemm_f32(
        &mut m,
        "convs",
        &conv(geom(1, 56, 3, 64, 7, 2, 3, 1), true, true),
    )
    .unwrap();
    gemm_f32(
        &mut m,
        "convv",
        &conv(geom(1, 56, 64, 64, 3, 1, 1, 1), true, true),
    )
    .unwrap();
    gemm_f32(&mut m, "empty", &dense(0, 4, 4)).unwrap();
    let ir = m.finish();
    assert!(ir.contains("\"nvvm.maxntid\"=\"256\""));
    let ptx = ir_to_ptx(&ir, Sm::Sm86).unwrap();
    let main = entry(&ptx, "main");
    // 8 k-rows of an 8×8 register tile per k-tile; 128 k-tiles: the loop
    // does two (constant buffer offsets), then one odd step and the last
    // tile follow.
    assert_eq!(main.matches("fma.rn.f32").count(), 4 * 8 * 64, "{main}");
    assert!(main.contains("ld.shared.v4.f32") || main.contains("ld.shared.v4.b32"));
    assert!(main.contains("ld.global.nc.v4"), "16-byte loads of A and B");
    assert!(main.contains("st.global.v4"), "16-byte stores of C");
    assert!(main.contains("st.shared.v4"), "B's tile row stored whole");
    assert!(main.contains("bar.sync"));
    assert!(main.contains("max.NaN.f32"), "relu keeping NaN");
    assert!(main.contains(".maxntid 256"));
    assert!(main.contains(".minnctapersm 2"));
    assert_eq!(main.matches(".param ").count(), 4, "a, b, bias, c");
    let scalar = entry(&ptx, "scalar");
    assert!(
        !scalar.contains("ld.global.nc.v4") && !scalar.contains("st.global.v4"),
        "unaligned: no 16-byte global access"
    );
    assert!(scalar.contains("fma.rn.f32"));
    // The 3-channel image is gathered element by element, the 64-channel
    // one four channels at a time (B, the weights, is 16-byte in both).
    let scalar_loads = |body: &str| {
        body.lines()
            .filter(|l| l.contains("ld.global.nc.") && !l.contains(".v4") && !l.contains(".v2"))
            .count()
    };
    let (convs, convv) = (entry(&ptx, "convs"), entry(&ptx, "convv"));
    assert!(convv.contains("ld.global.nc.v4"));
    assert!(
        scalar_loads(convs) >= scalar_loads(convv) + 8,
        "{} vs {}",
        scalar_loads(convs),
        scalar_loads(convv)
    );
    let empty = entry(&ptx, "empty");
    assert!(!empty.contains("ld.global") && !empty.contains("st.global"));
}

#[test]
fn gemm_simt_geometry() {
    for (name, s) in cases().into_iter().chain(huge_cases()) {
        let mut m = ModuleText::new();
        let g = gemm_f32(&mut m, name, &s).unwrap();
        assert!(g.grid.iter().all(|&x| x >= 1), "{name} {g:?}");
        if s.batch == 0 || s.m == 0 || s.n == 0 {
            assert_eq!(g.grid, [1, 1, 1], "{name}");
            continue;
        }
        let t = pick_tile(&s);
        let tiles = s.m.div_ceil(t.bm as u64) * s.n.div_ceil(t.bn as u64);
        assert_eq!(
            g.grid,
            [tiles as u32, 1, s.batch.min(65535) as u32],
            "{name}"
        );
        assert_eq!(g.block, [t.threads(), 1, 1], "{name}");
        assert_eq!(g.smem, t.smem_bytes(), "{name}");
        assert!(g.smem <= 48 * 1024);
    }
    // Dynamic shared memory: two buffers of 8 k-rows of (128+4) + (128+4)
    // floats.
    assert_eq!(SimtTile::CANDIDATES[0].smem_bytes(), 2 * 8 * 264 * 4);
    for t in SimtTile::CANDIDATES {
        t.check().unwrap();
        assert_eq!(t.threads(), 256);
    }
}

/// Shapes from ResNet-50 and BERT-base with the tile that ran fastest on
/// an H200 among [`SimtTile::CANDIDATES`] (fp32; this file's kernels, timed
/// on the GPU): `(bm, bn, ks)`.
fn measured() -> Vec<(&'static str, GemmSpec, (u32, u32, u32))> {
    let biased = |s: GemmSpec| GemmSpec { bias: Some(0), ..s };
    vec![
        ("4096^3", dense(4096, 4096, 4096), (128, 128, 1)),
        ("2048^3", dense(2048, 2048, 2048), (128, 128, 1)),
        ("1024^3", dense(1024, 1024, 1024), (128, 64, 1)),
        (
            "conv3x3 56 b1",
            conv(geom(1, 56, 64, 64, 3, 1, 1, 1), true, true),
            (32, 64, 2),
        ),
        (
            "conv3x3 56 b32",
            conv(geom(32, 56, 64, 64, 3, 1, 1, 1), true, true),
            (128, 64, 1),
        ),
        (
            "conv1x1 56 b1",
            conv(geom(1, 56, 64, 256, 1, 1, 0, 1), true, true),
            (128, 64, 1),
        ),
        (
            "conv3x3 14 b1",
            conv(geom(1, 14, 256, 256, 3, 1, 1, 1), true, true),
            (32, 32, 4),
        ),
        (
            "conv3x3 14 b32",
            conv(geom(32, 14, 256, 256, 3, 1, 1, 1), true, true),
            (128, 128, 1),
        ),
        (
            "conv3x3 7 b1",
            conv(geom(1, 7, 512, 512, 3, 1, 1, 1), true, true),
            (32, 32, 4),
        ),
        ("bert qkv b1", biased(dense(128, 2304, 768)), (32, 32, 4)),
        ("bert out b1", biased(dense(128, 768, 768)), (32, 32, 4)),
        ("bert ff1 b1", biased(dense(128, 3072, 768)), (32, 32, 4)),
        ("bert ff2 b1", biased(dense(128, 768, 3072)), (32, 32, 4)),
        (
            "bert ff1 b32",
            biased(dense(4096, 3072, 768)),
            (128, 128, 1),
        ),
        ("bert out b32", biased(dense(4096, 768, 768)), (128, 64, 1)),
        ("classifier b1", biased(dense(1, 1000, 2048)), (32, 32, 4)),
    ]
}

#[test]
fn gemm_simt_tile_choice() {
    for (what, s, want) in measured() {
        let t = pick_tile(&s);
        assert_eq!((t.bm, t.bn, t.ks), want, "{what}");
    }
    // Batches count as blocks: 12 heads of 128×64 take the small tile.
    let heads = GemmSpec {
        batch: 12,
        ..dense(128, 64, 128)
    };
    assert_eq!(pick_tile(&heads).ks, 4);
}

#[test]
fn gemm_simt_rejects_bad_specs() {
    let mut m = ModuleText::new();
    let e = gemm_f32(&mut m, "bad-name", &dense(4, 4, 4)).unwrap_err();
    assert!(e.contains("C identifier"), "{e}");
    let mut s = conv(geom(1, 8, 8, 8, 3, 1, 1, 1), false, false);
    s.m += 1;
    let e = gemm_f32(&mut m, "c", &s).unwrap_err();
    assert!(e.contains("m = n·oh·ow = 64"), "{e}");
    let s = GemmSpec {
        batch: 2,
        ..conv(geom(1, 8, 8, 8, 3, 1, 1, 1), false, false)
    };
    let e = gemm_f32(&mut m, "c", &s).unwrap_err();
    assert!(e.contains("group"), "{e}");
    let bad = SimtTile {
        bm: 48,
        bn: 64,
        bk: 8,
        tm: 4,
        tn: 4,
        ks: 1,
    };
    assert!(gemm_f32_tile(&mut m, "t", &dense(4, 4, 4), bad).is_err());
}

/// A GEMM epilogue computing `exprs` over the f32 result (operand 0) and
/// the `extra` operands (type, `[batch, row, col]` strides).
fn epilogue(extra: &[(Scalar, [u64; 3])], exprs: &[Expr]) -> GemmEpilogue {
    let operands = std::iter::once(Scalar::F32)
        .chain(extra.iter().map(|e| e.0))
        .map(|dtype| Operand {
            dtype,
            strides: vec![0],
        })
        .collect();
    GemmEpilogue {
        kernel: PointwiseKernel {
            name: String::new(),
            dims: vec![1],
            operands,
            exprs: exprs.to_vec(),
            result: exprs.len() - 1,
            out_dtype: Scalar::F32,
            compute: aoc_backend_ptx::expr::Compute::F32,
        },
        strides: extra.iter().map(|e| e.1).collect(),
    }
}

/// `relu(v + r)`: a residual add read with strides `r`.
fn residual_relu(r: [u64; 3]) -> GemmEpilogue {
    epilogue(
        &[(Scalar::F32, r)],
        &[
            Expr::Load(0),
            Expr::Load(1),
            Expr::Binary(Binary::Add, 0, 1),
            Expr::Unary(Unary::Relu, 2),
        ],
    )
}

/// `v · s[j] + q` with `s` an f32 per-column scale and `q` an i8 tensor
/// with strides `q`.
fn scale_cols_add_i8(q: [u64; 3]) -> GemmEpilogue {
    epilogue(
        &[(Scalar::F32, [0, 0, 1]), (Scalar::I8, q)],
        &[
            Expr::Load(0),
            Expr::Load(1),
            Expr::Load(2),
            Expr::Binary(Binary::Mul, 0, 1),
            Expr::Binary(Binary::Add, 3, 2),
        ],
    )
}

/// `v · h` with `h` f16 at strides `h`.
fn times_f16(h: [u64; 3]) -> GemmEpilogue {
    epilogue(
        &[(Scalar::F16, h)],
        &[Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Mul, 0, 1)],
    )
}

/// Specs with epilogues: a dense, a convolution and an unaligned batched
/// product, each with its three epilogues (operands laid out as C).
fn epilogue_cases() -> Vec<(&'static str, GemmSpec, [GemmEpilogue; 3])> {
    let epis = |s: &GemmSpec| {
        let c = s.c_strides;
        [residual_relu(c), scale_cols_add_i8(c), times_f16(c)]
    };
    let dense_s = GemmSpec {
        bias: Some(0),
        relu: true,
        ..dense(1000, 600, 300)
    };
    let conv_s = conv(geom(2, 15, 16, 32, 3, 2, 1, 2), true, false);
    let unaligned = cases()
        .into_iter()
        .find(|c| c.0 == "unaligned_strided")
        .unwrap()
        .1;
    vec![
        ("epi_dense", dense_s, epis(&dense_s)),
        ("epi_conv", conv_s, epis(&conv_s)),
        ("epi_unaligned", unaligned, epis(&unaligned)),
    ]
}

fn tile_tag(t: &SimtTile) -> String {
    format!("{}x{}x{}_{}x{}_k{}", t.bm, t.bn, t.bk, t.tm, t.tn, t.ks)
}

/// Kernels with epilogues lower for every target and assemble: one extra
/// parameter per extra operand, the helper inlined with its loads and
/// conversions, one call per element of a thread's tile in the IR (the
/// one store path, after the k groups' reduction). Registers stay within
/// the plain kernels' budgets; the 8×8 tile, which keeps its
/// `.minnctapersm`, spills a few values (as some plain kernels do), which
/// is bounded here.
#[test]
fn gemm_simt_epilogues_assemble() {
    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let (mut m, mut plain) = (ModuleText::new(), ModuleText::new());
    // (name, parameters without the epilogue, extra operands, epilogue)
    let mut kernels = Vec::new();
    for (what, s, epis) in epilogue_cases() {
        let tiles = std::iter::once(pick_tile(&s)).chain(SimtTile::CANDIDATES);
        for (ti, t) in tiles.enumerate() {
            let (e, epi) = (ti % 3, &epis[ti % 3]);
            let name = format!("{what}_{}_e{e}", tile_tag(&t));
            let g = gemm_f32_with(&mut m, &name, &s, t, Some(epi))
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            let g0 = gemm_f32_tile(&mut plain, &name, &s, t).unwrap();
            assert_eq!(g, g0, "{name}: the epilogue changes no geometry");
            let base = 3 + usize::from(s.bias.is_some());
            kernels.push((name, base, epi.strides.len(), e, t));
        }
    }
    let ir = m.finish();
    for (name, _, extra, _, t) in &kernels {
        assert_eq!(
            ir.matches(&format!("define internal float @{name}_epi("))
                .count(),
            1
        );
        let def = &ir[ir.find(&format!(" @{name}(")).unwrap()..];
        let def = &def[..def.find("\n}").unwrap()];
        let head = &def[..def.find('{').unwrap()];
        assert_eq!(head.matches("%pe").count(), *extra, "{name}");
        let calls = def.matches(&format!("call float @{name}_epi(")).count();
        assert_eq!(calls as u32, t.tm * t.tn, "{name}");
        if t.ks > 1 {
            let first = def.find(&format!("@{name}_epi(")).unwrap();
            assert!(def.find("red.sum:").unwrap() < first, "{name}");
        }
    }
    let plain_ptx = ir_to_ptx(&plain.finish(), Sm::Sm86).unwrap();
    let gl = |b: &str| b.matches("ld.global").count();
    for sm in [Sm::Sm75, Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a] {
        let ptx = ir_to_ptx(&ir, sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        for (name, base, extra, e, _) in &kernels {
            let body = entry(&ptx, name);
            assert_eq!(body.matches(".param ").count(), base + extra, "{sm} {name}");
            assert!(!body.contains("call"), "{sm} {name}: the helper is inlined");
            if sm == Sm::Sm86 {
                let body0 = entry(&plain_ptx, name);
                assert_eq!(body0.matches(".param ").count(), *base, "{name}");
                assert!(gl(body) > gl(body0), "{name}: no epilogue loads");
            }
            let (what, ok) = match e {
                0 => ("relu", body.contains("setp.lt.f32")),
                1 => ("the i8 load", body.contains(".s8")),
                _ => ("the f16 conversion", body.contains("cvt.f32.f16")),
            };
            assert!(ok, "{sm} {name}: no {what}");
        }
        let Ok(p) = &ptxas else { continue };
        let report = assemble(p, &ptx, sm, "gemm_simt_epilogue");
        let usage = ptxas_usage(&report);
        assert_eq!(usage.len(), kernels.len(), "{report}");
        for (name, regs, spill) in &usage {
            if *spill > 0 || sm == Sm::Sm86 {
                println!("{sm} {name}: {regs} registers, {spill} bytes spilled");
            }
            let t = kernels.iter().find(|k| &k.0 == name).unwrap().4;
            // At least the blocks per multiprocessor the plain kernel's
            // register budget gives: 2, or 3 for 4×4 register tiles (but
            // on sm_75, where one of these takes 110 registers).
            let budget = if t.tm * t.tn >= 32 || sm == Sm::Sm75 {
                128
            } else {
                80
            };
            assert!(*regs <= budget, "{sm} {name}: {regs} registers");
            assert!(*spill <= 128, "{sm} {name}: {spill} bytes spilled");
        }
    }
}

#[test]
fn gemm_simt_epilogue_edges() {
    let mut m = ModuleText::new();
    let s = GemmSpec {
        bias: Some(0),
        relu: true,
        ..dense(200, 136, 64)
    };
    // (8×8 register tiles keep the occupancy hint of the plain kernel.)
    let t = SimtTile::CANDIDATES[0];
    // An identity epilogue (no extra operand) is the plain kernel once
    // inlined: the epilogue path adds nothing of its own (edges included).
    let id = epilogue(&[], &[Expr::Load(0)]);
    gemm_f32_with(&mut m, "ident", &s, t, Some(&id)).unwrap();
    gemm_f32_tile(&mut m, "plain", &s, t).unwrap();
    // An empty product keeps the parameter list.
    let e = residual_relu([0, 4, 1]);
    let g = gemm_f32_with(&mut m, "empty", &dense(0, 4, 4), t, Some(&e)).unwrap();
    assert_eq!(g.grid, [1, 1, 1]);
    let ir = m.finish();
    let ptx = ir_to_ptx(&ir, Sm::Sm86).unwrap();
    // The body with the kernel's name and its number in block labels
    // (`$L__BB<function>_<block>`) taken out.
    let code = |name: &str| {
        let body = entry(&ptx, name);
        let body = body[..body.find("\n}").unwrap()].replace(name, "K");
        let mut parts = body.split("$L__BB");
        let mut out = parts.next().unwrap().to_string();
        for p in parts {
            out.push_str(p.trim_start_matches(|c: char| c.is_ascii_digit()));
        }
        out
    };
    assert!(
        code("ident") == code("plain"),
        "an identity epilogue changes the code"
    );
    let empty = entry(&ptx, "empty");
    assert_eq!(empty.matches(".param ").count(), 4);
    assert!(!empty.contains("ld.global"));
    // Invalid epilogues.
    let mut m = ModuleText::new();
    let mut bad = residual_relu([0, 4, 1]);
    bad.strides.push([0, 0, 1]);
    let err = gemm_f32_with(&mut m, "k", &s, t, Some(&bad)).unwrap_err();
    assert!(err.contains("stride triples"), "{err}");
    let mut f16_out = residual_relu([0, 4, 1]);
    f16_out.kernel.out_dtype = Scalar::F16;
    assert!(gemm_f32_with(&mut m, "k", &s, t, Some(&f16_out)).is_err());
    let huge = residual_relu([0, 1 << 62, 1]);
    let err = gemm_f32_with(&mut m, "k", &s, t, Some(&huge)).unwrap_err();
    assert!(err.contains("too large"), "{err}");
    // The operands' offsets are i64 even where C's fit in i32.
    let mut m = ModuleText::new();
    let s = GemmSpec {
        batch: 2,
        ..dense(64, 64, 64)
    };
    let far = residual_relu([1 << 33, 64, 1]);
    gemm_f32_with(&mut m, "far", &s, t, Some(&far)).unwrap();
    let ir = m.finish();
    assert!(
        ir.contains("mul i32") && ir.contains(", 8589934592"),
        "i64 offsets"
    );
    ir_to_ptx(&ir, Sm::Sm86).unwrap();
}
