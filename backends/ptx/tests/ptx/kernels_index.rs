//! Tests of the index-mapping kernels (`kernels::index`).
//!
//! Besides the text checks (the IR lowers for every target, `ptxas`
//! accepts it, the PTX has the vector and shared-memory accesses intended),
//! every kernel is *run*: there is no GPU here, so the generated LLVM IR is
//! compiled for the host by LLVM's JIT, with the special registers and the
//! barrier replaced by host functions, and every thread of the returned
//! geometry is executed (the threads of a block as OS threads when the
//! kernel has barriers, so shared memory and barriers behave as on the GPU).
//! This is the host model of each kernel's thread → element mapping, taken
//! from the kernel itself rather than written a second time. Results are
//! compared with a naive implementation of the step's semantics (copy,
//! fill, gather) or with the CPU kernels of `aoc_runtime` (resize and the
//! convolutions), on buffers surrounded by guard bytes (an out-of-bounds
//! write changes them; an out-of-bounds read brings their NaN-like pattern
//! into the output), both 16-byte aligned and misaligned, so both the
//! vector and the element paths run.

use aoc_backend_ptx::kernels::index::{self, CopyForm, copy_plan};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_plan::plan::{ConvGeom, GridMode, GridPadding, ResizeMode};

use super::host_sim::{Mem, f32_bytes, with_jit};
use super::{assemble, entry, find_ptxas};

/// Pseudo-random bytes (an LCG), seeded.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect()
}

/// Pseudo-random f32 values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    noise(4 * n, seed)
        .chunks_exact(4)
        .map(|b| {
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// Whether a PTX kernel body has a 16-byte global load.
fn loads16(body: &str) -> bool {
    body.contains("ld.global.v4")
        || body.contains("ld.global.nc.v4")
        || body.contains("ld.global.nc.v2.b64")
}

/// Whether a PTX kernel body has a 16-byte global store.
fn stores16(body: &str) -> bool {
    body.contains("st.global.v4") || body.contains("st.global.v2.b64")
}

/// The PTX for every target, assembled by `ptxas` when there is one (for
/// every target but sm_70, which CUDA 13's `ptxas` no longer knows);
/// returns the sm_86 PTX.
fn lower_everywhere(ir: &str, what: &str) -> String {
    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let mut ptx86 = String::new();
    for sm in Sm::ALL {
        let ptx = ir_to_ptx(ir, sm).unwrap_or_else(|e| panic!("{what} for {sm}: {e}\n{ir}"));
        if let (Ok(p), true) = (&ptxas, sm != Sm::Sm70) {
            assemble(p, &ptx, sm, what);
        }
        if sm == Sm::Sm86 {
            ptx86 = ptx;
        }
    }
    ptx86
}

// ---------------------------------------------------------------- copy

struct CopyCase {
    name: &'static str,
    es: u64,
    shape: Vec<u64>,
    start: u64,
    src: Vec<i64>,
    dst: Vec<u64>,
}

fn cc(
    name: &'static str,
    es: u64,
    shape: &[u64],
    start: u64,
    src: &[i64],
    dst: &[u64],
) -> CopyCase {
    CopyCase {
        name,
        es,
        shape: shape.to_vec(),
        start,
        src: src.to_vec(),
        dst: dst.to_vec(),
    }
}

/// Row-major strides of `shape`, permuted: `perm[d]` is the source
/// dimension that destination dimension `d` reads.
fn dense(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// A transpose case: the source is dense `src_shape`; the destination is
/// dense in `perm` order.
fn permute(name: &'static str, es: u64, src_shape: &[u64], perm: &[usize]) -> CopyCase {
    let ss = dense(src_shape);
    let shape: Vec<u64> = perm.iter().map(|&p| src_shape[p]).collect();
    let src: Vec<i64> = perm.iter().map(|&p| ss[p] as i64).collect();
    cc(name, es, &shape, 0, &src, &dense(&shape))
}

fn copy_cases() -> Vec<CopyCase> {
    vec![
        cc("cp_rank0", 4, &[], 3, &[], &[]),
        cc("cp_ones", 2, &[1, 1, 1], 5, &[7, 3, 1], &[1, 1, 1]),
        cc("cp_flat", 4, &[1000], 0, &[1], &[1]),
        cc("cp_odd", 4, &[7], 2, &[1], &[1]),
        cc("cp_slice_f16", 2, &[3, 10], 4, &[16, 1], &[10, 1]),
        permute("cp_heads", 4, &[1, 128, 12, 64], &[0, 2, 1, 3]),
        permute("cp_heads_f16", 2, &[1, 24, 6, 32], &[0, 2, 1, 3]),
        permute("cp_t2d", 4, &[40, 50], &[1, 0]),
        permute("cp_t2d_i8", 1, &[33, 70], &[1, 0]),
        permute("cp_t2d_f16", 2, &[17, 45], &[1, 0]),
        permute("cp_t2d_f64", 8, &[36, 20], &[1, 0]),
        permute("cp_t3d", 4, &[3, 40, 50], &[0, 2, 1]),
        permute("cp_nchw_nhwc", 4, &[2, 3, 20, 20], &[0, 2, 3, 1]),
        permute("cp_rank6", 4, &[2, 3, 1, 4, 5, 2], &[5, 3, 0, 2, 4, 1]),
        cc("cp_reverse", 4, &[100], 99, &[-1], &[1]),
        cc("cp_reverse_rows", 4, &[5, 64], 4 * 64, &[-64, 1], &[64, 1]),
        // Tiled transpose with the source running backwards along q.
        cc("cp_t2d_rev", 4, &[20, 30], 19, &[-1, 20], &[30, 1]),
        cc("cp_splat", 4, &[6, 32], 0, &[1, 0], &[32, 1]),
        cc("cp_splat_i8", 1, &[3, 48], 1, &[1, 0], &[48, 1]),
        cc("cp_splat_f16", 2, &[5, 24], 0, &[1, 0], &[24, 1]),
        cc("cp_splat_f64", 8, &[4, 6], 0, &[1, 0], &[6, 1]),
        cc("cp_expand", 4, &[8, 64], 0, &[0, 1], &[64, 1]),
        cc("cp_dst_stride0", 4, &[3, 4], 0, &[4, 1], &[0, 1]),
        cc("cp_overlap", 4, &[2, 3], 0, &[3, 1], &[1, 1]),
        cc("cp_gaps", 4, &[10, 3], 0, &[3, 1], &[8, 2]),
        cc("cp_empty", 4, &[3, 0, 2], 0, &[0, 0, 0], &[0, 0, 0]),
        cc("cp_elem3", 3, &[4, 5], 0, &[1, 4], &[5, 1]),
        cc("cp_elem16", 16, &[6, 3], 0, &[3, 1], &[3, 1]),
        cc("cp_elem12_t", 12, &[20, 18], 0, &[1, 20], &[18, 1]),
    ]
}

/// Source elements a case reads (one past the largest offset).
fn copy_extent(c: &CopyCase) -> (usize, usize) {
    if c.shape.contains(&0) {
        return (0, 0);
    }
    let (mut hi, mut dhi) = (c.start as i64, 0u64);
    for d in 0..c.shape.len() {
        let n = c.shape[d] - 1;
        hi += (n as i64 * c.src[d]).max(0);
        dhi += n * c.dst[d];
    }
    (hi as usize + 1, dhi as usize + 1)
}

/// The step's semantics, in row-major index order.
fn naive_copy(c: &CopyCase, src: &[u8], dst: &mut [u8]) {
    let es = c.es as usize;
    let total: u64 = c.shape.iter().product();
    for flat in 0..total {
        let (mut rem, mut s, mut d) = (flat, c.start as i64, 0u64);
        for k in (0..c.shape.len()).rev() {
            let i = rem % c.shape[k];
            rem /= c.shape[k];
            s += i as i64 * c.src[k];
            d += i * c.dst[k];
        }
        let (s, d) = (s as usize * es, d as usize * es);
        dst[d..d + es].copy_from_slice(&src[s..s + es]);
    }
}

#[test]
fn copy_plans_pick_the_intended_forms() {
    let form = |c: &CopyCase| {
        copy_plan(c.es, &c.shape, c.start, &c.src, &c.dst)
            .unwrap()
            .form
    };
    let cases = copy_cases();
    let by = |n: &str| cases.iter().find(|c| c.name == n).unwrap();
    assert_eq!(form(by("cp_heads")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_heads_f16")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_flat")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_slice_f16")), CopyForm::Runs { chunk: 4 });
    assert_eq!(form(by("cp_odd")), CopyForm::Elements);
    assert_eq!(form(by("cp_t2d")), CopyForm::Transpose { q: 0 });
    assert_eq!(form(by("cp_t2d_rev")), CopyForm::Transpose { q: 0 });
    assert_eq!(form(by("cp_t3d")), CopyForm::Transpose { q: 1 });
    assert_eq!(form(by("cp_nchw_nhwc")), CopyForm::Elements);
    assert_eq!(form(by("cp_splat")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_splat_f64")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_expand")), CopyForm::Runs { chunk: 16 });
    assert_eq!(form(by("cp_overlap")), CopyForm::Sequential);
    assert_eq!(form(by("cp_empty")), CopyForm::Empty);
    assert_eq!(form(by("cp_rank0")), CopyForm::Elements);
    // 16-byte elements move as two 8-byte units, merged into one run.
    let p = copy_plan(16, &[6, 3], 0, &[3, 1], &[3, 1]).unwrap();
    assert_eq!(
        (p.unit, p.form, p.dims.len()),
        (8, CopyForm::Runs { chunk: 16 }, 1)
    );
    // The transformer transpose: 12 × 128 runs of 64 floats, 4 per thread.
    let p = copy_plan(
        4,
        &[1, 12, 128, 64],
        0,
        &[98304, 64, 768, 1],
        &[98304, 8192, 64, 1],
    )
    .unwrap();
    assert_eq!(p.dims.len(), 3);
    assert_eq!(p.geometry().grid[0], (12 * 128 * 64 / 4 / 256) as u32);
    assert_eq!(p.index, "i32");
    // A dimension written at stride 0 keeps its last index.
    let p = copy_plan(4, &[3, 4], 0, &[4, 1], &[0, 1]).unwrap();
    assert_eq!((p.start, p.dims.len()), (8, 1));
    // Huge: 64-bit offsets, the grid capped (a grid-stride loop does the rest).
    let p = copy_plan(4, &[70000, 40000], 0, &[1, 70000], &[40000, 1]).unwrap();
    assert_eq!(p.index, "i64");
    assert_eq!(p.form, CopyForm::Transpose { q: 0 });
    let p = copy_plan(1, &[1 << 24, 1 << 24], 0, &[1, 0], &[1 << 24, 1]).unwrap();
    assert_eq!(p.geometry().grid[0], (1u32 << 31) - 1);
    // Errors.
    let e = copy_plan(4, &[3], 1, &[-1], &[1]).unwrap_err();
    assert!(e.contains("before the start of the source"), "{e}");
    let e = copy_plan(0, &[3], 0, &[1], &[1]).unwrap_err();
    assert!(e.contains("element size must be at least 1"), "{e}");
    let e = copy_plan(4, &[3, 2], 0, &[1], &[1, 1]).unwrap_err();
    assert!(e.contains("needs 2 source and destination strides"), "{e}");
    assert!(copy_plan(4, &[1 << 40, 1 << 40], 0, &[1, 1], &[1 << 40, 1]).is_err());
}

#[test]
fn copy_kernels_run_like_the_step() {
    let cases = copy_cases();
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for c in &cases {
        geoms.push(index::copy(&mut m, c.name, c.es, &c.shape, c.start, &c.src, &c.dst).unwrap());
    }
    let ir = m.finish();
    with_jit(&ir, |run| {
        for (c, &g) in cases.iter().zip(&geoms) {
            let (ns, nd) = copy_extent(c);
            let es = c.es as usize;
            let src = noise(ns * es, 7);
            let init = noise(nd * es, 9);
            let mut want = init.clone();
            naive_copy(c, &src, &mut want);
            for (ms, md) in [(0, 0), (es % 16, 0), (0, es % 16), (8, 8)] {
                let mut s = Mem::new(&src, ms);
                let mut d = Mem::new(&init, md);
                run(c.name, g, &mut [&mut s, &mut d]);
                assert!(d.bytes() == &want[..], "{} (misaligned {ms}, {md})", c.name);
            }
        }
    });
}

#[test]
fn copy_ptx_assembles_and_vectorizes() {
    let mut m = ModuleText::new();
    for c in copy_cases() {
        index::copy(&mut m, c.name, c.es, &c.shape, c.start, &c.src, &c.dst).unwrap();
    }
    let big = [70000, 40000];
    index::copy(&mut m, "cp_huge", 4, &big, 0, &[1, 70000], &[40000, 1]).unwrap();
    let e = index::copy(&mut m, "cp-bad", 4, &[1], 0, &[1], &[1]).unwrap_err();
    assert!(e.contains("C identifier"), "{e}");
    let ptx = lower_everywhere(&m.finish(), "index_copy");
    for name in [
        "cp_heads",
        "cp_heads_f16",
        "cp_flat",
        "cp_splat",
        "cp_splat_i8",
        "cp_expand",
    ] {
        let body = entry(&ptx, name);
        assert!(stores16(body), "{name}: {body}");
    }
    for name in ["cp_heads", "cp_heads_f16", "cp_flat", "cp_expand"] {
        assert!(loads16(entry(&ptx, name)), "{name}");
    }
    for name in ["cp_t2d", "cp_t3d", "cp_huge"] {
        let body = entry(&ptx, name);
        assert!(
            body.contains("ld.shared") && body.contains("st.shared"),
            "{name}"
        );
        assert!(
            body.contains("bar.sync") || body.contains("barrier.sync"),
            "{name}"
        );
    }
    assert!(!entry(&ptx, "cp_nchw_nhwc").contains(".v4"));
    assert!(entry(&ptx, "cp_heads").contains(".maxntid 256"));
}

// ---------------------------------------------------------------- fill

#[test]
fn fill_kernels_run_like_the_step() {
    let cases: Vec<(u64, u64, u64)> = vec![
        (4, 0, 7),
        (4, 1, 0x3f80_0000),
        (4, 37, 0xdead_beef),
        (1, 5, 0xab),
        (1, 1000, 0x5a),
        (2, 77, 0x1234_3c00),
        (8, 9, 0x0102_0304_0506_0708),
        (3, 11, 0xffab_cdef),
        (7, 4, 0x0011_2233_4455_6677),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, &(es, count, bits)) in cases.iter().enumerate() {
        geoms.push(index::fill(&mut m, &format!("fill{i}"), es, count, bits).unwrap());
    }
    assert!(
        index::fill(&mut m, "fill_bad", 9, 1, 0)
            .unwrap_err()
            .contains("between 1 and 8")
    );
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_fill");
    assert!(stores16(entry(&ptx, "fill4")));
    with_jit(&ir, |run| {
        for (i, (&(es, count, bits), &g)) in cases.iter().zip(&geoms).enumerate() {
            let elem = &bits.to_le_bytes()[..es as usize];
            let want: Vec<u8> = elem
                .iter()
                .copied()
                .cycle()
                .take((es * count) as usize)
                .collect();
            // Misaligned pointers, but elements naturally aligned.
            for mis in [0, es as usize % 16, 1 << es.trailing_zeros().min(3)] {
                let mut d = Mem::new(&noise(want.len(), 3), mis);
                run(&format!("fill{i}"), g, &mut [&mut d]);
                assert!(
                    d.bytes() == &want[..],
                    "fill{i} es {es} count {count} misaligned {mis}"
                );
            }
        }
    });
}

// ---------------------------------------------------------------- gather

#[test]
fn gather_kernels_run_like_the_step() {
    // (elem size, outer, axis, inner, indices)
    let cases: Vec<(u64, u64, u64, u64, Vec<i64>)> = vec![
        (4, 1, 300, 768, vec![0, 299, -1, 17, -300, 5]),
        (4, 3, 7, 1, vec![6, -7, 0, 3]),
        (2, 2, 5, 3, vec![4, -2]),
        (8, 2, 4, 2, vec![1, 3, -4]),
        (1, 1, 9, 20, vec![8, 0]),
        (4, 2, 6, 4, vec![0, 6, -7, 2, i64::MIN, i64::MAX]),
        (4, 0, 5, 4, vec![1, 9]),
        (4, 2, 0, 4, vec![0]),
        (4, 2, 5, 4, vec![]),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, (es, outer, axis, inner, idx)) in cases.iter().enumerate() {
        let g = index::gather(
            &mut m,
            &format!("ga{i}"),
            *es,
            *outer,
            *axis,
            *inner,
            idx.len() as u64,
        );
        geoms.push(g.unwrap());
    }
    let bert = index::gather(&mut m, "ga_bert", 4, 1, 30522, 768, 128).unwrap();
    assert_eq!(bert.grid[0], 128 * 768 / 4 / 256);
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_gather");
    for name in ["ga0", "ga_bert"] {
        let body = entry(&ptx, name);
        assert!(loads16(body) && stores16(body), "{name}: {body}");
    }
    with_jit(&ir, |run| {
        for (i, ((es, outer, axis, inner, idx), &g)) in cases.iter().zip(&geoms).enumerate() {
            let (es, outer, axis, inner) = (
                *es as usize,
                *outer as usize,
                *axis as usize,
                *inner as usize,
            );
            let row = inner * es;
            let data = noise(outer * axis * row, i as u64);
            let ib: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut want = vec![0u8; outer * idx.len() * row];
            let mut bad = false;
            for o in 0..outer {
                for (j, &x) in idx.iter().enumerate() {
                    let n = if x < 0 {
                        x as i128 + axis as i128
                    } else {
                        x as i128
                    };
                    let dst = &mut want[(o * idx.len() + j) * row..][..row];
                    if n < 0 || n >= axis as i128 {
                        bad = true;
                        continue;
                    }
                    dst.copy_from_slice(&data[(o * axis + n as usize) * row..][..row]);
                }
            }
            if outer * row == 0 {
                bad = idx.iter().any(|&x| x < -(axis as i64) || x >= axis as i64);
            }
            for mis in [0, es % 16] {
                let mut d = Mem::new(&data, mis);
                let mut ix = Mem::new(&ib, 0);
                let mut out = Mem::new(&noise(want.len(), 5), mis);
                let mut status = Mem::new(&[0; 4], 0);
                run(
                    &format!("ga{i}"),
                    g,
                    &mut [&mut d, &mut ix, &mut out, &mut status],
                );
                assert!(out.bytes() == &want[..], "ga{i} misaligned {mis}");
                assert_eq!(status.bytes(), &[bad as u8, 0, 0, 0], "ga{i} status");
            }
        }
    });
}

// ---------------------------------------------------------------- resize

const MODES: [ResizeMode; 4] = [
    ResizeMode::Nearest,
    ResizeMode::BilinearHalfPixel,
    ResizeMode::BilinearAlignCorners,
    ResizeMode::BilinearAsymmetric,
];

#[test]
fn resize_kernels_match_the_cpu() {
    // ([n, h, w, c], oh, ow)
    let shapes: [([u64; 4], u64, u64); 5] = [
        ([2, 5, 7, 3], 9, 4),
        ([1, 3, 4, 16], 7, 11),
        ([1, 4, 3, 2], 1, 6),
        ([1, 2, 3, 4], 1, 5000),
        ([1, 0, 3, 4], 0, 5),
    ];
    let mut m = ModuleText::new();
    let mut runs = Vec::new();
    for (s, &(shape, oh, ow)) in shapes.iter().enumerate() {
        for (mi, &mode) in MODES.iter().enumerate() {
            let name = format!("rs{s}_{mi}");
            let [n, h, w, c] = shape;
            let g = index::resize(&mut m, &name, mode, n, h, w, c, oh, ow).unwrap();
            runs.push((name, mode, shape, oh, ow, g));
        }
    }
    let e = index::resize(&mut m, "rs_bad", ResizeMode::Nearest, 1, 0, 2, 1, 2, 4).unwrap_err();
    assert!(e.contains("cannot be resized"), "{e}");
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_resize");
    assert!(loads16(entry(&ptx, "rs1_1")) && stores16(entry(&ptx, "rs1_1")));
    assert!(!entry(&ptx, "rs0_1").contains(".v4"));
    // Axes longer than the table limit compute their taps in f64.
    assert!(entry(&ptx, "rs3_1").contains("div.rn.f64"));
    with_jit(&ir, |run| {
        for (name, mode, [n, h, w, c], oh, ow, g) in &runs {
            let us = |v: &u64| *v as usize;
            let x = values(us(n) * us(h) * us(w) * us(c), 11);
            let mut want = vec![0.0f32; us(n) * us(oh) * us(ow) * us(c)];
            aoc_runtime::kernels::resize::resize(
                *mode,
                us(n),
                us(h),
                us(w),
                us(c),
                us(oh),
                us(ow),
                &x,
                &mut want,
            )
            .unwrap();
            for mis in [0, 4] {
                let mut xm = Mem::new(&f32_bytes(&x), mis);
                let mut ym = Mem::new(&noise(4 * want.len(), 1), mis);
                run(name, *g, &mut [&mut xm, &mut ym]);
                let got = ym.to_f32s();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name} {mode:?} misaligned {mis}: {got:?} vs {want:?}"
                );
            }
        }
    });
}

// ---------------------------------------------------------------- grid sample

#[test]
fn grid_sample_kernels_match_the_cpu() {
    // (volumetric, [n, c, d, h, w, od, oh, ow]); the grid reaches past
    // [-1, 1], and one case holds infinities and NaN (no read may leave
    // the image).
    let shapes: [(bool, [u64; 8]); 6] = [
        (false, [2, 3, 1, 5, 7, 1, 4, 6]),
        (false, [1, 1, 1, 1, 1, 1, 3, 3]),
        (false, [1, 2, 1, 4, 3, 1, 2, 5]),
        (false, [1, 1, 1, 2, 2, 1, 0, 3]),
        (true, [1, 2, 3, 4, 5, 2, 3, 2]),
        (true, [2, 1, 1, 2, 3, 3, 1, 2]),
    ];
    let modes = [GridMode::Nearest, GridMode::Linear, GridMode::Cubic];
    let pads = [GridPadding::Zeros, GridPadding::Border, GridPadding::Reflection];
    let mut m = ModuleText::new();
    let mut runs = Vec::new();
    for (s, &(vol, dims)) in shapes.iter().enumerate() {
        for (mi, &mode) in modes.iter().enumerate() {
            for (pi, &pad) in pads.iter().enumerate() {
                for align in [false, true] {
                    let name = format!("gs{s}_{mi}{pi}{}", align as u8);
                    let g = index::grid_sample(&mut m, &name, mode, pad, align, vol, dims).unwrap();
                    runs.push((name, mode, pad, align, vol, dims, g));
                }
            }
        }
    }
    let bad = [1, 1, 1, 0, 2, 1, 2, 2];
    let e = index::grid_sample(&mut m, "gs_bad", GridMode::Linear, GridPadding::Zeros, false, false, bad).unwrap_err();
    assert!(e.contains("empty image"), "{e}");
    let ir = m.finish();
    lower_everywhere(&ir, "index_grid_sample");
    with_jit(&ir, |run| {
        for (name, mode, pad, align, vol, dims, g) in &runs {
            let [n, c, d, h, w, od, oh, ow] = dims.map(|v| v as usize);
            let k = if *vol { 3 } else { 2 };
            let x = values(n * c * d * h * w, 5);
            let mut grid: Vec<f32> = values(n * od * oh * ow * k, 9).iter().map(|v| v * 1.7).collect();
            if name.starts_with("gs2") || name.starts_with("gs5") {
                grid[0] = f32::INFINITY;
                grid[k + 1] = f32::NEG_INFINITY;
                grid[2 * k] = f32::NAN;
            }
            let mut want = vec![0.0f32; n * c * od * oh * ow];
            let us = dims.map(|v| v as usize);
            aoc_runtime::kernels::grid_sample::grid_sample(*mode, *pad, *align, *vol, us, &x, &grid, &mut want).unwrap();
            let mut xm = Mem::new(&f32_bytes(&x), 0);
            let mut gm = Mem::new(&f32_bytes(&grid), 4);
            let mut ym = Mem::new(&noise(4 * want.len(), 1), 0);
            run(name, *g, &mut [&mut xm, &mut gm, &mut ym]);
            let got = ym.to_f32s();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let close = (a - b).abs() <= 1e-5 * b.abs().max(1.0) || (a.is_nan() && b.is_nan());
                assert!(close, "{name} {mode:?} {pad:?} align {align}: element {i}: {a} vs {b}");
            }
        }
    });
}

// ---------------------------------------------------------------- convolutions

#[allow(clippy::too_many_arguments)]
fn geom(
    n: u64,
    h: u64,
    w: u64,
    c: u64,
    oc: u64,
    k: [u64; 2],
    s: u64,
    d: u64,
    pads: [u64; 4],
    group: u64,
) -> ConvGeom {
    let out = |i: u64, k: u64, pb: u64, pe: u64| (i + pb + pe - (d * (k - 1) + 1)) / s + 1;
    ConvGeom {
        n,
        h,
        w,
        c,
        oh: out(h, k[0], pads[0], pads[2]),
        ow: out(w, k[1], pads[1], pads[3]),
        oc,
        kh: k[0],
        kw: k[1],
        stride: [s, s],
        dilation: [d, d],
        pads,
        group,
    }
}

#[test]
fn depthwise_kernels_match_the_cpu() {
    // (geometry, bias, relu)
    let cases = [
        (geom(2, 7, 6, 8, 8, [3, 3], 1, 1, [1; 4], 8), true, true),
        (
            geom(1, 9, 8, 6, 6, [3, 3], 2, 1, [1, 1, 0, 0], 6),
            false,
            false,
        ),
        (geom(1, 5, 5, 4, 8, [3, 3], 1, 1, [1; 4], 4), true, false),
        (geom(1, 6, 5, 2, 8, [3, 3], 2, 1, [1; 4], 2), false, true),
        (
            geom(1, 5, 6, 3, 9, [3, 2], 1, 2, [2, 1, 2, 1], 3),
            true,
            true,
        ),
        (
            geom(1, 10, 9, 12, 12, [5, 5], 2, 1, [2; 4], 12),
            true,
            false,
        ),
        (geom(0, 4, 4, 4, 4, [3, 3], 1, 1, [1; 4], 4), true, false),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, (g, bias, relu)) in cases.iter().enumerate() {
        geoms.push(index::depthwise_conv2d(&mut m, &format!("dw{i}"), g, *bias, *relu).unwrap());
    }
    let mut bad = cases[0].0;
    bad.oh += 1;
    assert!(index::depthwise_conv2d(&mut m, "dw_bad", &bad, false, false).is_err());
    bad = cases[0].0;
    bad.group = 1;
    assert!(index::depthwise_conv2d(&mut m, "dw_bad", &bad, false, false).is_err());
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_depthwise");
    assert!(loads16(entry(&ptx, "dw0")) && stores16(entry(&ptx, "dw0")));
    assert!(stores16(entry(&ptx, "dw2")));
    assert!(!entry(&ptx, "dw1").contains(".v4"));
    assert!(
        !entry(&ptx, "dw0").contains("fma.rn"),
        "depthwise adds products as the CPU does"
    );
    with_jit(&ir, |run| {
        for (i, ((g, bias, relu), &geo)) in cases.iter().zip(&geoms).enumerate() {
            let us = |v: u64| v as usize;
            let x = values(us(g.n * g.h * g.w * g.c), 1);
            let w = values(us(g.kh * g.kw * g.oc), 2);
            let b = values(us(g.oc), 3);
            let mut want = vec![0.0f32; us(g.n * g.oh * g.ow * g.oc)];
            let bs = bias.then_some(&b[..]);
            aoc_runtime::kernels::conv::depthwise_conv2d(g, &x, &w, bs, *relu, &mut want).unwrap();
            for mis in [0, 4] {
                let mut xm = Mem::new(&f32_bytes(&x), mis);
                let mut wm = Mem::new(&f32_bytes(&w), mis);
                let mut bm = Mem::new(&f32_bytes(&b), mis);
                let mut ym = Mem::new(&noise(4 * want.len(), 4), mis);
                if *bias {
                    run(
                        &format!("dw{i}"),
                        geo,
                        &mut [&mut xm, &mut wm, &mut bm, &mut ym],
                    );
                } else {
                    run(&format!("dw{i}"), geo, &mut [&mut xm, &mut wm, &mut ym]);
                }
                let got = ym.to_f32s();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "dw{i} misaligned {mis}: {got:?} vs {want:?}");
            }
        }
    });
}

/// Transposed-convolution geometry: input `h × w`, output sized for the
/// pads (crops) plus `extra` (ONNX's output padding).
#[allow(clippy::too_many_arguments)]
fn tgeom(
    n: u64,
    h: u64,
    w: u64,
    c: u64,
    oc: u64,
    k: u64,
    s: u64,
    d: u64,
    pads: [u64; 4],
    extra: u64,
    group: u64,
) -> ConvGeom {
    let out = |i: u64, pb: u64, pe: u64| (i - 1) * s + d * (k - 1) + 1 - pb - pe + extra;
    ConvGeom {
        n,
        h,
        w,
        c,
        oh: out(h, pads[0], pads[2]),
        ow: out(w, pads[1], pads[3]),
        oc,
        kh: k,
        kw: k,
        stride: [s, s],
        dilation: [d, d],
        pads,
        group,
    }
}

#[test]
fn conv_transpose_kernels_match_the_cpu() {
    let cases = [
        (tgeom(1, 4, 5, 4, 8, 3, 2, 1, [1, 1, 1, 1], 1, 2), true),
        (tgeom(2, 3, 3, 6, 6, 4, 2, 1, [1, 1, 1, 1], 0, 2), false),
        (tgeom(1, 3, 4, 4, 16, 2, 2, 1, [0; 4], 0, 1), true),
        (tgeom(1, 4, 4, 3, 3, 3, 1, 2, [2, 1, 0, 1], 0, 3), true),
        (tgeom(1, 2, 3, 8, 12, 3, 3, 1, [0, 2, 1, 0], 2, 1), false),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, (g, bias)) in cases.iter().enumerate() {
        geoms.push(index::conv_transpose2d(&mut m, &format!("ct{i}"), g, *bias).unwrap());
    }
    let mut bad = cases[0].0;
    bad.oh += 5;
    let e = index::conv_transpose2d(&mut m, "ct_bad", &bad, false).unwrap_err();
    assert!(e.contains("output height must be between"), "{e}");
    bad = cases[0].0;
    bad.group = 3;
    assert!(index::conv_transpose2d(&mut m, "ct_bad", &bad, false).is_err());
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_conv_transpose");
    assert!(loads16(entry(&ptx, "ct0")) && stores16(entry(&ptx, "ct0")));
    assert!(entry(&ptx, "ct0").contains("fma.rn.f32"));
    assert!(!entry(&ptx, "ct1").contains(".v4"));
    with_jit(&ir, |run| {
        for (i, ((g, bias), &geo)) in cases.iter().zip(&geoms).enumerate() {
            let us = |v: u64| v as usize;
            let x = values(us(g.n * g.h * g.w * g.c), 1);
            let w = values(us(g.kh * g.kw * g.c * g.oc / g.group), 2);
            let b = values(us(g.oc), 3);
            let mut want = vec![0.0f32; us(g.n * g.oh * g.ow * g.oc)];
            let bs = bias.then_some(&b[..]);
            aoc_runtime::kernels::conv::conv_transpose2d(g, &x, &w, bs, &mut want).unwrap();
            for mis in [0, 4] {
                let mut xm = Mem::new(&f32_bytes(&x), mis);
                let mut wm = Mem::new(&f32_bytes(&w), mis);
                let mut bm = Mem::new(&f32_bytes(&b), mis);
                let mut ym = Mem::new(&noise(4 * want.len(), 4), mis);
                if *bias {
                    run(
                        &format!("ct{i}"),
                        geo,
                        &mut [&mut xm, &mut wm, &mut bm, &mut ym],
                    );
                } else {
                    run(&format!("ct{i}"), geo, &mut [&mut xm, &mut wm, &mut ym]);
                }
                for (j, (a, b)) in ym.to_f32s().iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "ct{i} misaligned {mis} [{j}]: {a} vs {b}"
                    );
                }
            }
        }
    });
}

#[test]
fn huge_shapes_get_64_bit_offsets_and_capped_grids() {
    let mut m = ModuleText::new();
    let cap = (1u32 << 31) - 1;
    let g = index::fill(&mut m, "big_fill", 4, 1 << 42, 0).unwrap();
    assert_eq!(g.grid[0], cap);
    let g = index::gather(&mut m, "big_gather", 4, 1, 10, 1 << 30, 1 << 12).unwrap();
    assert_eq!(g.grid[0], cap);
    let g = index::resize(
        &mut m,
        "big_resize",
        ResizeMode::BilinearHalfPixel,
        1,
        2,
        2,
        4,
        1 << 17,
        1 << 17,
    )
    .unwrap();
    assert_eq!(g.grid[0], 1 << 26);
    let dw = geom(64, 1024, 1024, 256, 256, [3, 3], 1, 1, [1; 4], 256);
    let g = index::depthwise_conv2d(&mut m, "big_dw", &dw, true, true).unwrap();
    assert_eq!(g.grid[0], 1 << 24);
    let ct = tgeom(8, 512, 512, 64, 64, 4, 2, 1, [1; 4], 0, 1);
    index::conv_transpose2d(&mut m, "big_ct", &ct, false).unwrap();
    let ir = m.finish();
    for name in ["big_fill", "big_gather", "big_resize", "big_dw", "big_ct"] {
        let start = ir.find(&format!("@{name}(")).unwrap();
        let body = &ir[start..][..ir[start..].find("\n}").unwrap()];
        assert!(
            body.contains(" i64 ") && !body.contains("urem i32"),
            "{name} uses 32-bit offsets"
        );
    }
    let ptx = ir_to_ptx(&ir, Sm::Sm86).unwrap();
    // Taps in f64 (the scale is a power of two: the division is a product).
    assert!(entry(&ptx, "big_resize").contains("cvt.rmi.f64.f64"));
    // Empty shapes: a kernel that returns at once, grid 1.
    let mut m = ModuleText::new();
    assert_eq!(index::fill(&mut m, "e0", 4, 0, 0).unwrap().grid, [1, 1, 1]);
    assert_eq!(
        index::gather(&mut m, "e1", 4, 0, 3, 0, 0).unwrap().grid,
        [1, 1, 1]
    );
    assert_eq!(
        index::copy(&mut m, "e2", 4, &[0], 0, &[1], &[1])
            .unwrap()
            .grid,
        [1, 1, 1]
    );
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm86).unwrap();
    assert!(!entry(&ptx, "e0").contains("st.global"));
}

// ---------------------------------------------------------------- pad_half

/// `pad_half` writes each pixel's channels rounded to f16 / bf16 then
/// zeros up to the padded count, in place of the scratch's old bytes, and
/// nothing past it; it refuses paddings it cannot make.
#[test]
fn pad_half_kernels_run_like_the_step() {
    let cases: [(u64, u64, u64, bool); 5] = [
        (0, 3, 8, false),
        (37, 3, 8, false),
        (300, 3, 8, true),
        (21, 13, 16, false),
        (5, 40, 40, true),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, &(rows, c, cp, bf16)) in cases.iter().enumerate() {
        geoms.push(index::pad_half(&mut m, &format!("pad{i}"), rows, c, cp, bf16).unwrap());
    }
    for (c, cp) in [(3, 4), (9, 8), (0, 8), (65, 72)] {
        assert!(
            index::pad_half(&mut m, "pad_bad", 4, c, cp, false).is_err(),
            "{c} -> {cp}"
        );
    }
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_pad_half");
    assert!(stores16(entry(&ptx, "pad1")));
    with_jit(&ir, |run| {
        for (i, (&(rows, c, cp, bf16), &g)) in cases.iter().zip(&geoms).enumerate() {
            let x = values((rows * c) as usize, i as u64 + 1);
            let round = |v: f32| {
                if bf16 {
                    half::bf16::from_f32(v).to_bits()
                } else {
                    half::f16::from_f32(v).to_bits()
                }
            };
            let mut want = Vec::new();
            for row in x.chunks(c.max(1) as usize) {
                let mut r: Vec<u16> = row.iter().map(|&v| round(v)).collect();
                r.resize(cp as usize, 0);
                want.extend(r.iter().flat_map(|h| h.to_le_bytes()));
            }
            let mut xs = Mem::new(&f32_bytes(&x), 0);
            let mut d = Mem::new(&noise(want.len(), 5), 0);
            run(&format!("pad{i}"), g, &mut [&mut xs, &mut d]);
            assert!(d.bytes() == &want[..], "pad{i}: {rows} rows of {c} -> {cp}");
        }
    });
}

// ---------------------------------------------------------------- unfold_w

/// `Σ (x − zp)·w` of an NHWC byte convolution of one group with OHWI
/// weights, the padding reading `zp`: the integer sums the int8 kernels
/// compute before requantizing.
fn conv_sums(g: &ConvGeom, x: &[u8], w: &[u8], zp: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for n in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for o in 0..g.oc {
                    let mut acc = 0i32;
                    for ky in 0..g.kh {
                        for kx in 0..g.kw {
                            let iy = (oy * g.stride[0] + ky * g.dilation[0]) as i64 - g.pads[0] as i64;
                            let ix = (ox * g.stride[1] + kx * g.dilation[1]) as i64 - g.pads[1] as i64;
                            let inside = (0..g.h as i64).contains(&iy) && (0..g.w as i64).contains(&ix);
                            for ci in 0..g.c {
                                let v = if inside { x[(((n * g.h + iy as u64) * g.w + ix as u64) * g.c + ci) as usize] as i32 } else { zp };
                                let wv = w[(((o * g.kh + ky) * g.kw + kx) * g.c + ci) as usize] as i8 as i32;
                                acc += (v - zp) * wv;
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    out
}

/// `unfold_w` writes each output column's taps as one pixel (the zero
/// point where a tap is in the padding and past `kw·c`), and a convolution
/// on that input with the unfolded weights and geometry sums exactly what
/// the original convolution does: strides, dilations, asymmetric pads, a
/// single output column. Windows too wide to unfold and grouped
/// convolutions are refused.
#[test]
fn unfold_w_keeps_the_convolution() {
    let geom = |n, h, w, c, oc, (kh, kw), stride, dilation, pads| {
        super::kernels_gemm_s8::qconv(n, [h, w], c, oc, [kh, kw], stride, pads, dilation, 1).geom
    };
    let cases = [
        (geom(2, 13, 11, 3, 5, (7, 7), [2, 2], [1, 1], [3, 3, 3, 3]), 128u8),
        (geom(1, 6, 9, 3, 4, (3, 3), [1, 1], [1, 1], [1, 1, 1, 1]), 0),
        (geom(1, 9, 10, 5, 3, (3, 3), [2, 2], [2, 2], [0, 2, 1, 0]), 7),
        (geom(2, 4, 12, 4, 2, (1, 5), [1, 3], [1, 1], [0, 1, 0, 2]), 255),
        (geom(1, 5, 3, 2, 3, (3, 3), [1, 1], [1, 1], [1, 0, 1, 0]), 1),
    ];
    let mut m = ModuleText::new();
    let mut geoms = Vec::new();
    for (i, (g, zp)) in cases.iter().enumerate() {
        let cp = index::unfolded_channels(g).unwrap();
        geoms.push((cp, index::unfold_w(&mut m, &format!("unfold{i}"), g, cp, *zp).unwrap()));
    }
    let (wide, grouped) = (geom(1, 4, 4, 16, 2, (5, 5), [1, 1], [1, 1], [2, 2, 2, 2]), ConvGeom { group: 3, ..cases[1].0 });
    assert_eq!(index::unfolded_channels(&wide), None);
    assert!(index::unfold_w(&mut m, "bad0", &wide, 80, 0).is_err());
    assert!(index::unfold_w(&mut m, "bad1", &grouped, 16, 0).is_err());
    assert!(index::unfold_w(&mut m, "bad2", &cases[0].0, 16, 0).is_err(), "the wrong channel count");
    let ir = m.finish();
    let ptx = lower_everywhere(&ir, "index_unfold_w");
    assert!(stores16(entry(&ptx, "unfold0")));
    with_jit(&ir, |run| {
        for (i, ((g, zp), &(cp, lg))) in cases.iter().zip(&geoms).enumerate() {
            let x = noise((g.n * g.h * g.w * g.c) as usize, i as u64 + 11);
            let w = noise((g.oc * g.kh * g.kw * g.c) as usize, i as u64 + 29);
            let len = (g.n * g.h * g.ow * cp) as usize;
            let mut xs = Mem::new(&x, 0);
            let mut d = Mem::new(&noise(len, 3), 0);
            run(&format!("unfold{i}"), lg, &mut [&mut xs, &mut d]);
            let xu = d.bytes().to_vec();
            assert_eq!(xu.len(), len);
            // Bytes past kw·c are the fill.
            for px in xu.chunks(cp as usize) {
                assert!(px[(g.kw * g.c) as usize..].iter().all(|b| b == zp), "unfold{i}: padding channels");
            }
            let ug = index::unfold_w_geom(g, cp);
            let uw = index::unfold_w_weights(g, cp, &w);
            assert_eq!(uw.len() as u64, g.oc * g.kh * cp);
            assert_eq!((ug.oh, ug.ow), (g.oh, g.ow));
            assert_eq!(conv_sums(&ug, &xu, &uw, *zp as i32), conv_sums(g, &x, &w, *zp as i32), "unfold{i}: {g:?}");
        }
    });
}
