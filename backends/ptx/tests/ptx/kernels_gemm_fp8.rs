//! The fp8 (e4m3) kernels: `qconv_wgmma` with `QuantElem::E4M3` (the
//! `wgmma` m64nNk32 `.f32.e4m3.e4m3` convolution/GEMM of sm_90a) on the
//! int8 kernel's specs, and the e4m3 loads and stores of pointwise kernels
//! (sm_89 and newer). The convolution promotes each k-tile's partial
//! sums into f32 (`wait_group 0` and f32 adds, no `wait_group 1`). They
//! must assemble with ptxas without spills or serialized `wgmma`;
//! `AOC_PTX_DUMP_DIR=dir` writes `gemm_fp8_sm_90a.{ptx,txt}` (the module
//! and its manifest) for `gpu_checks/gemm_fp8.py`, which runs them on a
//! GPU against NumPy.

use super::kernels_gemm_s8::{manifest_line, wgmma_specs};
use aoc_backend_ptx::kernels::gemm_s8::QConvSpec;
use aoc_backend_ptx::kernels::gemm_wgmma::{FP8_MAX_BN, KLoop, choose_kloop, WgTile, choose_q_tile, qconv_wgmma_tile, qconv_wgmma_with, supports};
use aoc_backend_ptx::kernels::Geometry;
use aoc_backend_ptx::expr::{Binary, Expr};
use aoc_backend_ptx::{ModuleText, Sm, compile_ptx, ir_to_ptx};
use aoc_ir::types::Scalar;
use aoc_plan::plan::QuantElem;

/// `s` on e4m3 bytes: no signs or zero points, the full e4m3 range (or
/// `[0, 448]`: a fused relu); with `f32_out` the float-result form (no
/// bounds, or `[0, ∞)`).
fn e4m3(mut s: QConvSpec, relu: bool, f32_out: bool) -> QConvSpec {
    s.q.elem = if f32_out { QuantElem::E4M3ToF32 } else { QuantElem::E4M3 };
    (s.q.x_signed, s.q.x_zero, s.q.y_signed, s.q.y_zero) = (false, 0, false, 0);
    (s.q.y_min, s.q.y_max) = match (f32_out, relu) {
        (false, false) => (-448, 448),
        (false, true) => (0, 448),
        (true, false) => (i32::MIN, i32::MAX),
        (true, true) => (0, i32::MAX),
    };
    s
}

/// The int8 wgmma specs as e4m3 (every other one with a relu clamp), and
/// each again with an f32 result; the explicit tiles wider than fp8 takes
/// are left out, the chosen ones are chosen again for e4m3. Then the
/// products `gemm_fp8.py --time` times against `torch._scaled_mm`
/// (`f8t_`: 4096³ and 8192³ GEMMs as 1×1 convolutions, e4m3 out).
fn fp8_specs() -> Vec<(String, QConvSpec, WgTile)> {
    let mut v = Vec::new();
    for (i, (n, s, t)) in wgmma_specs().into_iter().enumerate() {
        let explicit = n.ends_with("_64") || n.ends_with("_128") || n.ends_with("_256") || n.ends_with("_paired");
        if explicit && t.bn > FP8_MAX_BN {
            continue;
        }
        for (prefix, f32_out, relu) in [("f8_", false, i % 2 == 1), ("f8f_", true, i % 2 == 0)] {
            let s = e4m3(s, relu, f32_out);
            let t = if explicit { t } else { choose_q_tile(&s) };
            v.push((n.replacen("wg_", prefix, 1), s, t));
        }
    }
    for n in [4096, 8192] {
        let s = e4m3(qconv_gemm(n), false, false);
        v.push((format!("f8t_gemm{n}"), s, choose_q_tile(&s)));
        for bn in [128, 192] {
            v.push((format!("f8t_gemm{n}_{bn}"), s, WgTile { bn, stages: 4 }));
        }
    }
    v
}

/// An `n × n × n` GEMM as a 1×1 convolution of `n` pixels.
fn qconv_gemm(n: u64) -> QConvSpec {
    let mut s = wgmma_specs()[0].1;
    let g = &mut s.geom;
    (g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.kh, g.kw) = (n, 1, 1, n, 1, 1, n, 1, 1);
    (g.stride, g.dilation, g.pads, g.group) = ([1, 1], [1, 1], [0; 4], 1);
    s
}

#[test]
fn qconv_wgmma_fp8_assembles_for_sm_90a() {
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let mut kernels: Vec<(String, QConvSpec, WgTile, Geometry)> = Vec::new();
    for (i, (name, s, tile)) in fp8_specs().into_iter().enumerate() {
        assert!(supports(&s, sm), "{name}");
        let g = qconv_wgmma_tile(&mut m, &name, &s, sm, tile, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        kernels.push((name.clone(), s, tile, g));
        // Promotion every second k-tile (`KLoop::Pairs`, which the chosen
        // tiles of an even number of k-tiles take in five stages) in four
        // and five stages: the timed GEMMs and every third other spec
        // with an even number of k-tiles, for gemm_fp8.py to check and
        // time beside the loop that promotes every tile.
        let even = (s.geom.kh * s.geom.kw * s.geom.c).div_ceil(128) % 2 == 0;
        if name.starts_with("f8t_") || (i % 3 == 0 && even) {
            for stages in [4, 5] {
                let p2 = format!("{name}_p2s{stages}");
                let t = WgTile { stages, ..tile };
                let g = qconv_wgmma_with(&mut m, &p2, &s, sm, t, None, KLoop::Pairs).unwrap_or_else(|e| panic!("{p2}: {e}"));
                kernels.push((p2, s, t, g));
            }
        }
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    for (name, s, tile, g) in &kernels {
        let body = super::entry(&ptx, name);
        let gm = &s.geom;
        if gm.n == 0 || gm.oc == 0 {
            assert_eq!((g.grid, g.smem), ([1, 1, 1], 0), "{name}");
            continue;
        }
        let mma = format!("wgmma.mma_async.sync.aligned.m64n{}k32.f32.e4m3.e4m3", tile.bn);
        let steps = body.matches(&mma).count();
        assert!(steps > 0 && steps % 4 == 0, "{name}: {steps} of {mma}");
        assert!(!body.contains(".s32.s8") && !body.contains(".s32.u8"), "{name}: an integer wgmma");
        // f32 promotion: each k-tile's products are retired (wait_group 0,
        // never 1) and added into the f32 sums (LLVM drops the adds of
        // columns that do not exist).
        assert!(body.contains("wgmma.wait_group.sync.aligned 0;"), "{name}");
        // Pairs: two CTA barriers per promotion (one per k-tile), each
        // promotion after eight `wgmma`; the loop body is one promotion.
        let per = if choose_kloop(s, *tile) == KLoop::Pairs || name.contains("_p2s") { 8 } else { 4 };
        assert_eq!(steps % per, 0, "{name}: {steps} of {mma}");
        assert!(!body.contains("wgmma.wait_group.sync.aligned 1;"), "{name}: an unpromoted pipeline");
        assert!(body.contains("add.rn.f32"), "{name}: no f32 promotion");
        let f32_out = s.q.elem == QuantElem::E4M3ToF32;
        assert!(body.contains("fma.rn.f32"), "{name}: no fma");
        // e4m3 results are rounded to e4m3, f32 ones stored as they are.
        assert_eq!(body.contains("cvt.rn.satfinite.e4m3x2.f32"), !f32_out, "{name}");
        // f32 results go from registers to memory, e4m3 ones through the
        // shared staging tile.
        let staged = body.contains("st.shared.b16") || body.contains("st.shared.u16");
        assert_eq!(staged, !f32_out, "{name}");
        // No integer requantization (roundings to integers, s64 converts).
        assert!(!body.contains("cvt.rzi.s64.f32"), "{name}");
        // Padding is byte 0 (+0.0), zero-filled by cp.async.
        assert!(!body.contains("st.shared.v4"), "{name}");
    }
    if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gemm_fp8_sm_90a.ptx"), &ptx).unwrap();
        let lines: Vec<String> = kernels
            .iter()
            .map(|(n, s, t, g)| {
                let out = if s.q.elem == QuantElem::E4M3ToF32 { "f32" } else { "e4m3" };
                format!("{} pack=wg:{} out={out}", manifest_line(n, s, g), t.bn)
            })
            .collect();
        std::fs::write(dir.join("gemm_fp8_sm_90a.txt"), lines.join("\n") + "\n").unwrap();
    }
    match super::find_ptxas() {
        Ok(x) => {
            let report = super::assemble(&x, &ptx, sm, "qconv_wgmma_fp8");
            for line in report.lines() {
                assert!(!line.contains("spill stores") || line.contains(" 0 bytes spill stores"), "{line}");
                assert!(!line.contains("serialized"), "{line}");
            }
        }
        Err(why) => println!("skipping the ptxas part: {why}"),
    }
}

#[test]
fn qconv_wgmma_fp8_needs_sm_90a() {
    let (_, s, tile) = fp8_specs().into_iter().next().unwrap();
    for sm in [Sm::Sm89, Sm::Sm90] {
        let mut m = ModuleText::new();
        let e = qconv_wgmma_tile(&mut m, "f8", &s, sm, tile, None).unwrap_err();
        assert!(e.contains("sm_90a"), "{e}");
    }
}

#[test]
fn promoting_pairs_of_k_tiles_needs_an_even_count_and_fp8() {
    let odd = e4m3(qconv_gemm(384), false, false); // 3 k-tiles of 128
    let even = e4m3(qconv_gemm(512), false, false);
    let tile = WgTile { bn: 128, stages: 5 };
    let mut m = ModuleText::new();
    let e = qconv_wgmma_with(&mut m, "f8_odd", &odd, Sm::Sm90a, tile, None, KLoop::Pairs).unwrap_err();
    assert!(e.contains("even number") && e.contains("found 3"), "{e}");
    let e = qconv_wgmma_with(&mut m, "f8_s3", &even, Sm::Sm90a, WgTile { stages: 3, ..tile }, None, KLoop::Pairs).unwrap_err();
    assert!(e.contains("four stages"), "{e}");
    let int8 = qconv_gemm(512);
    let e = qconv_wgmma_with(&mut m, "s8", &int8, Sm::Sm90a, tile, None, KLoop::Pairs).unwrap_err();
    assert!(e.contains("fp8"), "{e}");
    qconv_wgmma_with(&mut m, "f8_even", &even, Sm::Sm90a, tile, None, KLoop::Pairs).unwrap();
}

/// `y = dequantize(x) · s` and `q = x / s` stored as e4m3: the loads and
/// stores of the e4m3 quantize/dequantize kernels.
fn e4m3_kernels() -> Vec<aoc_backend_ptx::expr::PointwiseKernel> {
    let dq = super::kernel(
        "pw_dequantize_e4m3",
        &[8, 64],
        &[(Scalar::F8E4M3FN, &[64, 1]), (Scalar::F32, &[0, 1])],
        &[Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Mul, 0, 1)],
        Scalar::F32,
    );
    let q = super::kernel(
        "pw_quantize_e4m3",
        &[8, 64],
        &[(Scalar::F32, &[64, 1]), (Scalar::F32, &[0, 1])],
        &[Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Div, 0, 1)],
        Scalar::F8E4M3FN,
    );
    vec![dq, q]
}

#[test]
fn e4m3_pointwise_assembles_for_sm_89_and_90a() {
    let ptxas = super::find_ptxas();
    for sm in [Sm::Sm89, Sm::Sm90, Sm::Sm90a] {
        let ptx = compile_ptx(&e4m3_kernels(), sm).unwrap();
        assert!(ptx.contains("cvt.rn.f16x2.e4m3x2"), "{ptx}");
        assert!(ptx.contains("cvt.rn.satfinite.e4m3x2.f32"), "{ptx}");
        if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from) {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("pointwise_e4m3_{}.ptx", sm.name())), &ptx).unwrap();
        }
        match &ptxas {
            Ok(x) => {
                super::assemble(x, &ptx, sm, "pointwise_e4m3");
            }
            Err(why) => println!("skipping the ptxas part: {why}"),
        }
    }
}

/// fp8's residual epilogue on a float-result convolution (the block's
/// last convolution with the residual add, relu and the next layer's
/// quantization): `max(y + r·0.03, 0) / 0.05`, `r` the block input's e4m3
/// bytes laid out as the output, stored as `out`.
fn fp8_residual_epilogue(s: &QConvSpec, out: Scalar) -> aoc_backend_ptx::kernels::GemmEpilogue {
    let (m, n) = (s.geom.n * s.geom.oh * s.geom.ow, s.geom.oc);
    let dense: &[u64] = &[n, 1];
    let exprs = [
        Expr::Load(0),
        Expr::Load(1),
        Expr::Const(0.03),
        Expr::Binary(Binary::Mul, 1, 2),
        Expr::Binary(Binary::Add, 0, 3),
        Expr::Const(0.0),
        Expr::Binary(Binary::Max, 4, 5),
        Expr::Const(0.05),
        Expr::Binary(Binary::Div, 6, 7),
    ];
    aoc_backend_ptx::kernels::GemmEpilogue {
        kernel: super::kernel("", &[m, n], &[(Scalar::F32, dense), (Scalar::F8E4M3FN, dense)], &exprs, out),
        strides: vec![[0, n, 1]],
    }
}

/// An fp8 convolution with a float result takes an epilogue that reads
/// that f32 value: the values are staged as f32 (8-byte shared stores,
/// no byte staging, read back 16 bytes at a time), and with `oc` a
/// multiple of 4 each thread's run of 4 reads the residual's 4 bytes as
/// one load and stores its 4 e4m3 bytes (or 16 bytes of f32) as one;
/// otherwise element by element. An epilogue reading the result as e4m3
/// is refused. All assemble without spills.
#[test]
fn qconv_wgmma_fp8_float_result_takes_an_epilogue() {
    use super::kernels_gemm_s8::sq;
    let sm = Sm::Sm90a;
    let mut m = ModuleText::new();
    let even = e4m3(sq(2, 9, 32, 48, 3, 1, 1, 1), false, true);
    let odd = e4m3(sq(1, 7, 16, 18, 1, 1, 0, 1), true, true);
    let mut cases = Vec::new();
    for (what, s) in [("x4", even), ("odd", odd)] {
        for out in [Scalar::F8E4M3FN, Scalar::F32] {
            let name = format!("f8e_{what}_{}", out.name());
            let e = fp8_residual_epilogue(&s, out);
            qconv_wgmma_tile(&mut m, &name, &s, sm, choose_q_tile(&s), Some(&e)).unwrap_or_else(|e| panic!("{name}: {e}"));
            cases.push((name, s, out));
        }
    }
    let mut bad = fp8_residual_epilogue(&even, Scalar::F8E4M3FN);
    bad.kernel.operands[0].dtype = Scalar::F8E4M3FN;
    let e = qconv_wgmma_tile(&mut m, "f8e_bad", &even, sm, choose_q_tile(&even), Some(&bad)).unwrap_err();
    assert!(e.contains("reads its f32 output"), "{e}");
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
    for (name, s, out) in &cases {
        let body = super::entry(&ptx, name);
        let whole = s.geom.oc % 4 == 0;
        assert!(body.contains("st.shared.v2.f32") || body.contains("st.shared.v2.b32"), "{name}: no f32 staging");
        assert!(body.contains("ld.shared.v4"), "{name}: runs not read back as 16 bytes");
        assert!(!body.contains("st.shared.u16") && !body.contains("st.shared.b16"), "{name}: byte staging");
        // The residual's e4m3 bytes are converted as they are read.
        assert!(body.contains("cvt.rn.f16x2.e4m3x2"), "{name}: no e4m3 conversion of the residual");
        assert_eq!(body.contains("cvt.rn.satfinite.e4m3x2.f32"), *out == Scalar::F8E4M3FN, "{name}");
        let byte_loads = ["ld.global.nc.u8", "ld.global.nc.b8", "ld.global.u8", "ld.global.b8"].iter().any(|l| body.contains(l));
        assert_eq!(byte_loads, !whole, "{name}: byte loads of the residual");
        let want: &[&str] = match (out, whole) {
            (Scalar::F32, true) => &["st.global.v4.f32", "st.global.v4.b32"],
            (Scalar::F32, false) => &["st.global.f32", "st.global.b32"],
            (_, true) => &["st.global.u32", "st.global.b32"],
            _ => &["st.global.u8", "st.global.b8"],
        };
        assert!(want.iter().any(|w| body.contains(w)), "{name}: none of {want:?}");
    }
    match super::find_ptxas() {
        Ok(x) => {
            let report = super::assemble(&x, &ptx, sm, "qconv_wgmma_fp8_epilogue");
            for line in report.lines() {
                assert!(!line.contains("spill stores") || line.contains(" 0 bytes spill stores"), "{line}");
                assert!(!line.contains("serialized"), "{line}");
            }
        }
        Err(why) => println!("skipping the ptxas part: {why}"),
    }
}
