//! `kernels::rows`: softmax, layer norm, reductions and pooling. Each
//! module must lower to PTX and assemble for sm_75 … sm_90a; the tests also
//! check the launch geometry covers every row/output and that the PTX uses
//! the instructions each strategy is built on (warp shuffles, shared memory
//! and barriers, NaN-propagating max).

use aoc_backend_ptx::kernels::{ConvGeom, Geometry, rows};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_plan::plan::{PoolKind, ReduceKind};

use super::{assemble, entry, find_ptxas};

const SMS: [Sm; 5] = [Sm::Sm75, Sm::Sm80, Sm::Sm86, Sm::Sm90, Sm::Sm90a];

/// Lowers `ir` for every architecture, assembles it where a `ptxas` is
/// found, and returns the sm_86 PTX.
fn lower_all(ir: &str, what: &str) -> String {
    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let mut ptx86 = String::new();
    for sm in SMS {
        let ptx = ir_to_ptx(ir, sm).unwrap_or_else(|e| panic!("{what} for {sm}: {e}\n{ir}"));
        assert!(ptx.contains(&format!(".target {}", sm.name())));
        if let Some(dir) = std::env::var_os("AOC_PTX_DUMP_DIR") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{what}-{}.ptx", sm.name())), &ptx).unwrap();
        }
        if let Ok(p) = &ptxas {
            assemble(p, &ptx, sm, what);
        }
        if sm == Sm::Sm86 {
            ptx86 = ptx;
        }
    }
    ptx86
}

fn check_block(g: &Geometry, what: &str) {
    let [bx, by, bz] = g.block;
    assert!(
        (1..=1024).contains(&bx) && by == 1 && bz == 1,
        "{what}: {g:?}"
    );
    assert!(
        g.grid[0] >= 1 && g.grid[1] == 1 && g.grid[2] == 1,
        "{what}: {g:?}"
    );
    assert_eq!(g.smem, 0, "{what}");
}

/// Rows of at most 1024 columns get `min(32, next_pow2(cols))` lanes each,
/// longer rows a block each: the grid must cover every row, and no more
/// than one block's worth beyond.
fn check_rows_geometry(g: &Geometry, rows: u64, cols: u64, what: &str) {
    check_block(g, what);
    let (grid, block) = (g.grid[0] as u64, g.block[0] as u64);
    if rows == 0 || cols == 0 {
        assert_eq!((grid, block), (1, 1), "{what}");
        return;
    }
    assert_eq!(block % 32, 0, "{what}: shuffles need whole warps");
    if cols <= 1024 {
        let lanes = cols.next_power_of_two().min(32);
        let per_block = block / lanes;
        assert!(block <= 256, "{what}");
        assert!(grid * per_block >= rows, "{what}: {g:?}");
        assert!((grid - 1) * per_block < rows, "{what}: {g:?}");
    } else {
        assert_eq!(grid, rows, "{what}");
        assert!(block >= 128, "{what}");
    }
}

const SHAPES: [(u64, u64); 9] = [
    (1, 1),
    (3, 31),
    (12 * 128, 128),
    (5, 768),
    (1, 1024),
    (2, 5000),
    (3, 20000),
    (0, 128),
    (4, 0),
];

#[test]
fn softmax_lowers_and_covers_rows() {
    let mut m = ModuleText::new();
    let mut gens = Vec::new();
    for (rows, cols) in SHAPES {
        for log in [false, true] {
            let name = format!("softmax_{rows}x{cols}_{}", if log { "log" } else { "lin" });
            let geom = rows::softmax(&mut m, &name, rows, cols, log).unwrap();
            check_rows_geometry(&geom, rows, cols, &name);
            gens.push((name, rows, cols));
        }
    }
    let ir = m.finish();
    let ptx = lower_all(&ir, "rows_softmax");
    for (name, rows, cols) in &gens {
        let body = entry(&ptx, name);
        assert_eq!(body.matches(".param .u64").count(), 2, "{name}");
        if *rows == 0 || *cols == 0 {
            assert!(!body.contains("ld.global"), "{name}: {body}");
            continue;
        }
        assert!(body.contains("ex2.approx"), "{name}");
        // One lane per row has nothing to shuffle.
        let shuffles = *cols > 1;
        assert_eq!(body.contains("shfl.sync.bfly"), shuffles, "{name}");
        let block_row = *cols > 1024;
        assert_eq!(body.contains("bar.sync"), block_row, "{name}");
        assert_eq!(body.contains("st.shared"), block_row, "{name}");
    }
    // Register rows read x once: 128 columns are 4 loads per lane, unrolled.
    let b = entry(&ptx, "softmax_1536x128_lin");
    assert_eq!(b.matches("ld.global").count(), 4, "{b}");
    // 20000 columns do not fit in registers: three passes, each a loop.
    let b = entry(&ptx, "softmax_3x20000_lin");
    assert!(b.matches("ld.global").count() >= 3, "{b}");
}

#[test]
fn layer_norm_lowers_and_covers_rows() {
    let mut m = ModuleText::new();
    let mut gens = Vec::new();
    for (i, (rows, cols)) in SHAPES.into_iter().enumerate() {
        for (gamma, beta) in [(true, true), (true, false), (false, true), (false, false)] {
            let name = format!("ln{i}_{}{}", u8::from(gamma), u8::from(beta));
            let geom = rows::layer_norm(&mut m, &name, rows, cols, 1e-5, gamma, beta).unwrap();
            check_rows_geometry(&geom, rows, cols, &name);
            gens.push((
                name,
                2 + usize::from(gamma) + usize::from(beta),
                rows * cols,
            ));
        }
    }
    let ptx = lower_all(&m.finish(), "rows_layer_norm");
    for (name, params, n) in &gens {
        let body = entry(&ptx, name);
        assert_eq!(body.matches(".param .u64").count(), *params, "{name}");
        if *n > 0 {
            assert!(body.contains("sqrt.rn.f32"), "{name}");
        }
    }
    let b = entry(&ptx, "ln3_11");
    // 768 columns: 24 values per lane, read once; gamma and beta per column.
    assert_eq!(b.matches("ld.global").count(), 3 * 24, "{b}");
    assert!(b.contains("shfl.sync.bfly"), "{b}");
    assert!(!b.contains("bar.sync"), "{b}");
}

#[test]
fn reduce_lowers_and_covers_outputs() {
    const KINDS: [ReduceKind; 4] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
    ];
    // (outer, len, inner): runs over the last axis (lanes, a block per
    // output, loops), global average pools at batch 1 (len split over
    // threads) and 32 (a thread per output), empty and single reductions.
    let shapes: [(u64, u64, u64); 14] = [
        (4, 0, 1),
        (4, 1, 1),
        (6, 31, 1),
        (100, 1000, 1),
        (3, 4000, 1),
        (3, 5000, 1),
        (4096, 5000, 1),
        (1, 49, 2048),
        (32, 49, 2048),
        (2, 0, 2048),
        (2, 1, 2048),
        (3, 100, 2),
        (1, 7, 3),
        (0, 5, 5),
    ];
    let mut m = ModuleText::new();
    let mut gens = Vec::new();
    for (outer, len, inner) in shapes {
        for kind in KINDS {
            let name = format!("reduce_{kind:?}_{outer}x{len}x{inner}").to_lowercase();
            let geom = rows::reduce(&mut m, &name, kind, outer, len, inner).unwrap();
            check_block(&geom, &name);
            let (grid, block) = (geom.grid[0] as u64, geom.block[0] as u64);
            let outputs = outer * inner;
            let split = split_ways(outputs, len, inner);
            if outputs == 0 {
                assert_eq!((grid, block), (1, 1), "{name}");
            } else if len == 0 || (inner > 1 && split == 1) {
                // A thread per output.
                assert_eq!((grid, block), (outputs.div_ceil(256), 256), "{name}");
            } else if inner == 1 {
                if len > 1024 && outer < 2048 {
                    assert_eq!((grid, block), (outer, 512), "{name}");
                } else {
                    check_rows_geometry(&geom, outer, len.min(1024), &name);
                }
            } else {
                // Blocks of bx × by threads cover `bx` outputs of one `o`,
                // each summing every `by`-th of the `len` values.
                let bx = inner.next_power_of_two().min(256 / split);
                assert_eq!(
                    (grid, block),
                    (outer * inner.div_ceil(bx), bx * split),
                    "{name}"
                );
            }
            gens.push((name, kind, outer, len, inner, split, geom));
        }
    }
    let ptx = lower_all(&m.finish(), "rows_reduce");
    for (name, kind, outer, len, inner, split, geom) in &gens {
        let body = entry(&ptx, name);
        assert_eq!(body.matches(".param .u64").count(), 2, "{name}");
        if outer * inner == 0 {
            assert!(!body.contains("st.global"), "{name}");
            continue;
        }
        if *len == 0 {
            assert!(!body.contains("ld.global"), "{name}");
            continue;
        }
        let lanes = *inner == 1 && *len > 1;
        assert_eq!(body.contains("shfl.sync.bfly"), lanes, "{name}");
        let block_row = *inner == 1 && geom.block[0] == 512;
        let split = *inner > 1 && *split > 1;
        assert_eq!(body.contains("bar.sync"), split || block_row, "{name}");
        // (One value needs no combining: `maximum(-inf, x)` folds to x.)
        if *kind == ReduceKind::Max && *len > 1 {
            assert!(body.contains("max.NaN.f32"), "{name}: NaN must propagate");
        }
        if *kind == ReduceKind::Mean && *len > 1 {
            assert!(body.contains("div.rn.f32"), "{name}");
        }
    }
    // The global average pool at batch 1: 2048 outputs, `len` split 8 ways
    // over blocks of 32 × 8 threads.
    let g = gens
        .iter()
        .find(|g| g.0 == "reduce_mean_1x49x2048")
        .unwrap()
        .6;
    assert_eq!((g.grid[0], g.block[0]), (64, 256));
    assert!(entry(&ptx, "reduce_mean_1x49x2048").contains("ld.shared"));
}

/// How many ways a reduction with `inner > 1` splits `len` (the module
/// doc's rule): doubling while there are fewer than 2^16 partial results
/// and each thread keeps at least 4 values, up to 64.
fn split_ways(outputs: u64, len: u64, inner: u64) -> u64 {
    let mut by = 1;
    while inner > 1 && by < 64 && outputs * by < 1 << 16 && by * 8 <= len {
        by *= 2;
    }
    by
}

#[test]
fn rows_reject_shapes_past_memory_and_bad_names() {
    let mut m = ModuleText::new();
    let e = rows::reduce(&mut m, "r", ReduceKind::Sum, u64::MAX, 2, 1).unwrap_err();
    assert!(e.contains("too large"), "{e}");
    let e = rows::softmax(&mut m, "s", u64::MAX / 4, 2, false).unwrap_err();
    assert!(e.contains("more than 2^31-1 blocks"), "{e}");
    let e = rows::softmax(&mut m, "s-1", 1, 1, false).unwrap_err();
    assert!(e.contains("C identifier"), "{e}");
}

fn geom(
    nhwc: [u64; 4],
    ohw: [u64; 2],
    k: [u64; 2],
    stride: [u64; 2],
    dilation: [u64; 2],
    pads: [u64; 4],
) -> ConvGeom {
    ConvGeom {
        n: nhwc[0],
        h: nhwc[1],
        w: nhwc[2],
        c: nhwc[3],
        oh: ohw[0],
        ow: ohw[1],
        oc: nhwc[3],
        kh: k[0],
        kw: k[1],
        stride,
        dilation,
        pads,
        group: 1,
    }
}

#[test]
fn pool_lowers_and_covers_outputs() {
    // (geometry, ceil_mode): ResNet's stem max pool, a ceil-mode window
    // that runs past the padding, dilation with uneven pads, a global
    // 7×7 average, an empty batch.
    let cases = [
        (
            geom([2, 112, 112, 64], [56, 56], [3, 3], [2, 2], [1, 1], [1; 4]),
            false,
        ),
        (
            geom([1, 1, 5, 1], [1, 3], [1, 3], [1, 2], [1, 1], [0, 0, 0, 1]),
            true,
        ),
        (
            geom([2, 5, 7, 3], [3, 4], [2, 3], [2, 2], [2, 1], [0, 1, 1, 2]),
            true,
        ),
        (
            geom([2, 5, 7, 3], [2, 4], [2, 3], [2, 2], [2, 1], [0, 1, 1, 2]),
            false,
        ),
        (
            geom([1, 7, 7, 2048], [1, 1], [7, 7], [1, 1], [1, 1], [0; 4]),
            false,
        ),
        (
            geom([0, 8, 8, 4], [4, 4], [2, 2], [2, 2], [1, 1], [0; 4]),
            false,
        ),
    ];
    let kinds = [
        PoolKind::Max,
        PoolKind::AvgExcludePad,
        PoolKind::AvgIncludePad,
    ];
    let mut m = ModuleText::new();
    let mut gens = Vec::new();
    for (i, (g, ceil)) in cases.iter().enumerate() {
        for kind in kinds {
            let name = format!("pool{i}_{kind:?}").to_lowercase();
            let geo = rows::pool(&mut m, &name, kind, g, *ceil).unwrap();
            check_block(&geo, &name);
            let total = g.n * g.oh * g.ow * g.c;
            if total == 0 {
                assert_eq!((geo.grid[0], geo.block[0]), (1, 1), "{name}");
            } else {
                assert_eq!(geo.block[0], 256, "{name}");
                assert_eq!(geo.grid[0] as u64, total.div_ceil(256), "{name}");
            }
            gens.push((name, kind, total));
        }
    }
    let ptx = lower_all(&m.finish(), "rows_pool");
    for (name, kind, total) in &gens {
        let body = entry(&ptx, name);
        assert_eq!(body.matches(".param .u64").count(), 2, "{name}");
        if *total == 0 {
            assert!(!body.contains("st.global"), "{name}");
            continue;
        }
        assert_eq!(
            body.contains("max.NaN.f32"),
            *kind == PoolKind::Max,
            "{name}"
        );
        assert_eq!(
            body.contains("div.rn.f32"),
            *kind != PoolKind::Max,
            "{name}"
        );
        assert!(
            !body.contains("shfl") && !body.contains("bar.sync"),
            "{name}"
        );
    }
}

#[test]
fn pool_checks_its_geometry() {
    let mut m = ModuleText::new();
    // 6×6, 3×3 windows, stride 2: 2×2 outputs, 3×3 with ceil_mode.
    let g = geom([1, 6, 6, 2], [2, 2], [3, 3], [2, 2], [1, 1], [0; 4]);
    assert!(rows::pool(&mut m, "p0", PoolKind::Max, &g, false).is_ok());
    let e = rows::pool(&mut m, "p1", PoolKind::Max, &g, true).unwrap_err();
    assert_eq!(
        e,
        "pool output size must be 3x3 for this geometry, found 2x2"
    );
    let e = rows::pool(&mut m, "p2", PoolKind::Max, &ConvGeom { oc: 3, ..g }, false).unwrap_err();
    assert_eq!(e, "pool output channels must equal the input's 2, found 3");
    let e = rows::pool(&mut m, "p3", PoolKind::Max, &ConvGeom { kh: 9, ..g }, false).unwrap_err();
    assert!(e.contains("larger than the padded input"), "{e}");
    let e = rows::pool(
        &mut m,
        "p4",
        PoolKind::Max,
        &ConvGeom {
            stride: [0, 1],
            ..g
        },
        false,
    )
    .unwrap_err();
    assert!(e.contains("must be non-zero"), "{e}");
    // Only the valid kernel was written.
    let ir = m.finish();
    assert!(ir.contains("@p0(") && !ir.contains("@p1("), "{ir}");
}

/// Layer norm with a half copy of y: one more pointer and a 16-bit store
/// beside each f32 store, for register rows and streamed ones.
#[test]
fn layer_norm_half_copy() {
    use aoc_backend_ptx::kernels::HalfCopy;
    let mut m = ModuleText::new();
    rows::layer_norm(&mut m, "ln_plain", 64, 768, 1e-5, true, true).unwrap();
    rows::layer_norm_with(&mut m, "ln_half", 64, 768, 1e-5, true, true, Some(HalfCopy::F16)).unwrap();
    rows::layer_norm_with(&mut m, "ln_half_long", 3, 20000, 1e-5, true, false, Some(HalfCopy::BF16)).unwrap();
    let ptx = lower_all(&m.finish(), "rows_layer_norm_half");
    assert_eq!(entry(&ptx, "ln_half").matches(".param .u64").count(), 5);
    assert_eq!(entry(&ptx, "ln_half_long").matches(".param .u64").count(), 4);
    for name in ["ln_half", "ln_half_long"] {
        let b = entry(&ptx, name);
        let f32_stores = b.matches("st.global.f32").count() + b.matches("st.global.b32").count();
        let b16 = b.matches("st.global.b16").count() + b.matches("st.global.u16").count();
        assert!(f32_stores > 0 && b16 == f32_stores, "{name}: {f32_stores} f32 stores, {b16} 16-bit");
    }
    assert_eq!(entry(&ptx, "ln_plain").matches("st.global.b16").count(), 0);
}

/// A pool with a half copy of y: a third pointer and a 16-bit store per
/// output, beside the f32 store or (without `keep_f32`) instead of it.
#[test]
fn pool_half_copy() {
    use aoc_backend_ptx::kernels::HalfCopy;
    let g = geom([2, 9, 9, 64], [5, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]);
    let mut m = ModuleText::new();
    rows::pool_with(&mut m, "pool_keep", PoolKind::Max, &g, false, Some(HalfCopy::F16)).unwrap();
    let only = HalfCopy { bf16: true, keep_f32: false };
    rows::pool_with(&mut m, "pool_only", PoolKind::AvgExcludePad, &g, false, Some(only)).unwrap();
    let ptx = lower_all(&m.finish(), "rows_pool_half");
    for (name, f32_stores) in [("pool_keep", true), ("pool_only", false)] {
        let b = entry(&ptx, name);
        assert_eq!(b.matches(".param .u64").count(), 3, "{name}");
        let f = b.matches("st.global.f32").count() + b.matches("st.global.b32").count();
        let h = b.matches("st.global.b16").count() + b.matches("st.global.u16").count();
        assert!(h > 0 && (f > 0) == f32_stores, "{name}: {f} f32 stores, {h} 16-bit");
    }
}

/// The byte max pool, scalar (3 channels, or a buffer aligned to 2) and
/// vector (4, 8, 16 channels a thread), runs bit for bit as the CPU's
/// `qmax_pool2d`: ResNet's stem pool (3×3, stride 2, pads 1, ceil mode or
/// not), a dilated window with asymmetric pads, u8 and i8.
#[test]
fn qmax_pool_reads_and_stores_bytes() {
    use super::host_sim::{Mem, with_jit};
    let cases = [
        (geom([2, 9, 9, 16], [5, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]), false, 16, "16 bytes"),
        (geom([2, 9, 9, 16], [5, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]), true, 16, "16 bytes"),
        (geom([1, 8, 7, 24], [4, 4], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]), true, 16, "8 bytes"),
        (geom([1, 10, 9, 12], [4, 3], [3, 2], [2, 3], [2, 1], [0, 1, 1, 0]), false, 16, "4 bytes"),
        (geom([1, 9, 9, 16], [5, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]), false, 2, "st.global.u8"),
        (geom([2, 9, 9, 3], [5, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]), true, 16, "st.global.u8"),
    ];
    let mut m = ModuleText::new();
    let mut geos = Vec::new();
    for (i, &(g, signed, align, _)) in cases.iter().enumerate() {
        let geo = rows::qmax_pool(&mut m, &format!("qp{i}"), &g, false, signed, align).unwrap();
        check_block(&geo, "qp");
        geos.push(geo);
    }
    // The f32 pool's refusals hold, in both forms.
    let g = cases[0].0;
    assert!(rows::qmax_pool(&mut m, "qp_bad", &ConvGeom { oc: 3, ..g }, false, true, 16).is_err());
    assert!(rows::qmax_pool(&mut m, "qp_bad2", &ConvGeom { oh: 4, ..g }, false, true, 16).is_err());
    let ir = m.finish();
    let ptx = lower_all(&ir, "qmax_pool");
    for (i, (_, _, _, store)) in cases.iter().enumerate() {
        let body = entry(&ptx, &format!("qp{i}"));
        let bytes = body.contains("st.global.u8") || body.contains("st.global.b8");
        assert_eq!(bytes, *store == "st.global.u8", "qp{i}: byte stores where {store} was meant");
        assert!(!body.contains("st.global.f32"), "qp{i}");
    }
    let noise = |n: usize, seed: u64| -> Vec<u8> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect()
    };
    with_jit(&ir, |run| {
        for (i, (&(g, signed, _, _), &geo)) in cases.iter().zip(&geos).enumerate() {
            let x = noise((g.n * g.h * g.w * g.c) as usize, i as u64 + 3);
            let mut want = vec![0u8; (g.n * g.oh * g.ow * g.c) as usize];
            aoc_runtime::kernels::qelem::qmax_pool2d(&g, false, signed, &x, &mut want).unwrap();
            let mut xs = Mem::new(&x, 0);
            let mut y = Mem::new(&noise(want.len(), 99), 0);
            run(&format!("qp{i}"), geo, &mut [&mut xs, &mut y]);
            assert!(y.bytes() == &want[..], "qp{i}: {g:?} signed {signed}");
        }
    });
}

/// A layer norm with its quantization as a byte output: one more pointer,
/// a byte store beside each f32 store (or instead of it without
/// `keep_f32`), for register rows and streamed ones; the quantization must
/// read the f32 value alone and store bytes. (The row kernels' warp
/// shuffles do not run in the host simulator; `make gpu-test` runs the
/// int8 encoder through this kernel against the interpreter.)
#[test]
fn layer_norm_quant_stores_bytes() {
    use aoc_backend_ptx::expr::{Binary, Expr, Unary};
    use aoc_backend_ptx::kernels::GemmEpilogue;
    use aoc_ir::types::Scalar;
    let quant = |rows: u64, cols: u64, out: Scalar| {
        let exprs = [
            Expr::Load(0),
            Expr::Const(40.0),
            Expr::Binary(Binary::Mul, 0, 1),
            Expr::Const(128.0),
            Expr::Binary(Binary::Add, 2, 3),
            Expr::Unary(Unary::RoundEven, 4),
        ];
        GemmEpilogue { kernel: super::kernel("", &[rows, cols], &[(Scalar::F32, &[cols, 1])], &exprs, out), strides: vec![] }
    };
    let cases: [(&str, u64, u64, bool, bool); 3] =
        [("lnq_keep", 16, 768, true, true), ("lnq_bytes_only", 16, 768, false, true), ("lnq_long", 3, 20000, true, false)];
    let mut m = ModuleText::new();
    for (name, r, c, keep, beta) in cases {
        let g = rows::layer_norm_quant(&mut m, name, r, c, 1e-5, true, beta, &quant(r, c, Scalar::U8), keep).unwrap();
        check_rows_geometry(&g, r, c, name);
    }
    rows::layer_norm_quant(&mut m, "lnq_i8", 16, 768, 1e-5, false, false, &quant(16, 768, Scalar::I8), false).unwrap();
    for bad in [quant(2, 8, Scalar::F32), quant(2, 8, Scalar::F16)] {
        assert!(rows::layer_norm_quant(&mut m, "lnq_bad", 2, 8, 1e-5, false, false, &bad, true).is_err());
    }
    let ptx = lower_all(&m.finish(), "rows_layer_norm_quant");
    for (name, _, _, keep, beta) in cases {
        let b = entry(&ptx, name);
        assert_eq!(b.matches(".param .u64").count(), 4 + usize::from(beta), "{name}");
        let f32_stores = b.matches("st.global.f32").count() + b.matches("st.global.b32").count();
        let bytes = b.matches("st.global.u8").count() + b.matches("st.global.b8").count();
        assert!(bytes > 0, "{name}: no byte store");
        assert_eq!(f32_stores == bytes, keep, "{name}: {f32_stores} f32 stores, {bytes} byte stores");
        assert!(keep || f32_stores == 0, "{name}");
        assert!(!b.contains("e4m3"), "{name}");
    }
    // fp8 (sm_89 and newer): the byte is the value rounded to e4m3 (nearest
    // even, saturating).
    let mut m = ModuleText::new();
    rows::layer_norm_quant(&mut m, "lnq_e4m3", 16, 768, 1e-5, false, false, &quant(16, 768, Scalar::F8E4M3FN), false).unwrap();
    let ptx = ir_to_ptx(&m.finish(), Sm::Sm90a).unwrap();
    let b = entry(&ptx, "lnq_e4m3");
    assert!(b.contains("cvt.rn.satfinite.e4m3x2.f32"), "no e4m3 rounding");
    assert!(b.matches("st.global.u8").count() + b.matches("st.global.b8").count() > 0, "no byte store");
    assert_eq!(b.matches("st.global.f32").count() + b.matches("st.global.b32").count(), 0, "f32 stores");
    if let Ok(p) = find_ptxas() {
        assemble(&p, &ptx, Sm::Sm90a, "rows_layer_norm_quant_e4m3");
    }
}

/// A layer norm reading its input as bytes (`layer_norm_bytes`): x's
/// loads are single bytes, converted as u8 or i8 by the dequantization's
/// operand, and no f32 value is loaded (no gamma or beta here), for register rows
/// and streamed ones, with and without the quantized output; a
/// dequantization of f32 values, or with a second operand, is refused.
/// (`make gpu-test` runs an int8 attention block whose layer norm reads
/// bytes against the interpreter, `gpu_int8_attention_*`.)
#[test]
fn layer_norm_reads_bytes() {
    use aoc_backend_ptx::expr::{Binary, Expr};
    use aoc_backend_ptx::kernels::GemmEpilogue;
    use aoc_ir::types::Scalar;
    let dq = |rows: u64, cols: u64, t: Scalar| {
        let exprs = [Expr::Load(0), Expr::Const(128.0), Expr::Binary(Binary::Sub, 0, 1), Expr::Const(0.05), Expr::Binary(Binary::Mul, 2, 3)];
        GemmEpilogue { kernel: super::kernel("", &[rows, cols], &[(t, &[cols, 1])], &exprs, Scalar::F32), strides: vec![] }
    };
    let quant = |rows: u64, cols: u64| {
        let exprs = [Expr::Load(0), Expr::Const(20.0), Expr::Binary(Binary::Mul, 0, 1)];
        GemmEpilogue { kernel: super::kernel("", &[rows, cols], &[(Scalar::F32, &[cols, 1])], &exprs, Scalar::I8), strides: vec![] }
    };
    let cases: [(&str, u64, u64, Scalar, bool); 4] = [
        ("lnb_u8", 16, 768, Scalar::U8, false),
        ("lnb_i8_q", 16, 768, Scalar::I8, true),
        ("lnb_long", 3, 20000, Scalar::U8, false),
        ("lnb_long_q", 3, 20000, Scalar::I8, true),
    ];
    let mut m = ModuleText::new();
    for (name, r, c, t, q) in cases {
        let qe = quant(r, c);
        let g = rows::layer_norm_bytes(&mut m, name, r, c, 1e-5, false, false, Some(&dq(r, c, t)), q.then_some((&qe, false))).unwrap();
        check_rows_geometry(&g, r, c, name);
    }
    let mut two = dq(2, 8, Scalar::U8);
    two.kernel.operands.push(two.kernel.operands[0].clone());
    two.strides.push([0, 8, 1]);
    for bad in [dq(2, 8, Scalar::F32), two] {
        assert!(rows::layer_norm_bytes(&mut m, "lnb_bad", 2, 8, 1e-5, false, false, Some(&bad), None).is_err());
    }
    let ptx = lower_all(&m.finish(), "rows_layer_norm_bytes");
    for (name, _, _, t, q) in cases {
        let b = entry(&ptx, name);
        assert_eq!(b.matches(".param .u64").count(), 2 + usize::from(q), "{name}");
        let loads: Vec<&str> = b.lines().filter(|l| l.contains("ld.global")).collect();
        let byte = |l: &&&str| [".b8", ".u8", ".s8"].iter().any(|t| l.contains(t));
        assert!(!loads.is_empty() && loads.iter().all(|l| byte(&l)), "{name}: loads other than bytes: {loads:?}");
        let convert = if t == Scalar::I8 { "cvt.rn.f32.s16" } else { "cvt.rn.f32.u16" };
        assert!(b.contains(convert), "{name}: no {convert}");
        let f32_stores = b.matches("st.global.f32").count() + b.matches("st.global.b32").count();
        assert_eq!(f32_stores == 0, q, "{name}: {f32_stores} f32 stores");
    }
}
