//! Normalization kernels: softmax / log-softmax over the last axis
//! (`Step::Softmax`), layer normalization (`Step::LayerNorm`) and the f32
//! exponential they use.
//!
//! [`exp_f32`] is branch-free (range reduction `x = n·ln2 + r`, a degree-6
//! polynomial for `e^r` on `|r| ≤ ln2/2`, scaling by `2^n` in two exact
//! halves so subnormal results round once), so a loop over a slice
//! auto-vectorizes. Each row kernel is written once as an `#[inline(always)]`
//! function and instantiated three times: plain, inside an `avx2,fma`
//! function and inside an `avx512f` function, chosen by [`Isa::best`]; the
//! compiler vectorizes each copy for its level, and the two FMA levels
//! fuse the exponential's multiply-adds. Rows are split over rayon.
//!
//! Invariants: the public functions never panic on bad arguments (they
//! return [`KernelError`]); the AVX2 and AVX-512 levels compute the same
//! operations in the same order, so their results are bit-identical, and
//! the plain level differs only by the rounding of unfused multiply-adds
//! (both within the stated accuracy); NaN and ±inf
//! inputs follow the max-subtracted formula (`exp(x - max) / Σ`), as the
//! ONNX reference does (a row of only `-inf` gives NaN).

use rayon::prelude::*;

use super::{Isa, KernelError};

/// Rows of work below this many elements stay on the calling thread.
const PAR_MIN_ELEMS: usize = 16 * 1024;

/// Independent accumulators per reduction: enough for one 512-bit vector
/// and short dependency chains, and a pairwise-like error growth.
const LANES: usize = 16;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `n·LN2_HI` is exact for `|n| ≤ 255` (9 bits).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding `1.5·2^23` rounds to an integer (ties to even) and leaves it in
/// the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// `e^r ≈ 1 + r + r²·(C0 + C1·r + … + C4·r⁴)` on `|r| ≤ ln2/2`: a
/// relative-error fit (max 3.1e-9, far below f32 rounding).
const C: [f32; 5] = [
    0.499_999_94,
    0.166_665_21,
    0.041_668_39,
    0.008_368_71,
    0.001_381_461_3,
];

/// `e^x` in f32, within 2 ulp for normal results; 0 below about -103.97
/// (and for -inf), +inf above about 88.72, NaN for NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// `a·b + c`: one rounding where the level has FMA (`FMA`), else a
/// multiply and an add.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// [`exp_f32`], its multiply-adds fused when `FMA` (the AVX2 and AVX-512
/// levels: 8 fewer instructions per vector, same accuracy bound).
#[inline(always)]
pub(super) fn exp_with<const FMA: bool>(x: f32) -> f32 {
    // NaN passes through `clamp` unchanged.
    let x = x.clamp(-104.0, 89.0);
    let t = madd::<FMA>(x, LOG2E, ROUND);
    let n = t - ROUND;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = madd::<FMA>(-n, LN2_LO, madd::<FMA>(-n, LN2_HI, x));
    let p = madd::<FMA>(
        madd::<FMA>(madd::<FMA>(madd::<FMA>(C[4], r, C[3]), r, C[2]), r, C[1]),
        r,
        C[0],
    );
    let e = 1.0 + madd::<FMA>(r * r, p, r);
    // n ∈ [-150, 129]: two halves in [-75, 65] are normal powers of two.
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
    e * s1 * s2
}

/// `x[i] = e^x[i]` for every element, vectorized for the best level.
pub fn exp_slice(x: &mut [f32]) {
    fn plain(x: &mut [f32]) {
        exp_inplace::<false>(x)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn avx2(x: &mut [f32]) {
        exp_inplace::<true>(x)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    fn avx512(x: &mut [f32]) {
        exp_inplace::<true>(x)
    }
    match Isa::best() {
        // SAFETY: `Isa::best` only returns levels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512(x) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2(x) },
        _ => plain(x),
    }
}

#[inline(always)]
fn exp_inplace<const FMA: bool>(x: &mut [f32]) {
    for v in x {
        *v = exp_with::<FMA>(*v);
    }
}

/// Largest element (NaN ignored; `-inf` for an empty slice).
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for ch in &mut chunks {
        for l in 0..LANES {
            acc[l] = if ch[l] > acc[l] { ch[l] } else { acc[l] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &v in acc.iter().chain(chunks.remainder()) {
        m = if v > m { v } else { m };
    }
    m
}

/// Sum of the elements with [`LANES`] accumulators.
#[inline(always)]
fn sum_of(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for ch in &mut chunks {
        for l in 0..LANES {
            acc[l] += ch[l];
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// `(Σ (x - m), Σ (x - m)²)` with [`LANES`] accumulators each.
#[inline(always)]
fn dev_sums(x: &[f32], m: f32) -> (f32, f32) {
    let mut s1 = [0.0f32; LANES];
    let mut s2 = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for ch in &mut chunks {
        for l in 0..LANES {
            let d = ch[l] - m;
            s1[l] += d;
            s2[l] += d * d;
        }
    }
    let (mut t1, mut t2) = (0.0f32, 0.0f32);
    for &v in chunks.remainder() {
        let d = v - m;
        t1 += d;
        t2 += d * d;
    }
    (s1.iter().sum::<f32>() + t1, s2.iter().sum::<f32>() + t2)
}

/// Softmax (or log-softmax) of every `cols`-long row of `x` into `y`.
#[inline(always)]
fn softmax_rows<const FMA: bool>(x: &[f32], y: &mut [f32], cols: usize, log: bool) {
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let max = max_of(xr);
        for (o, &v) in yr.iter_mut().zip(xr) {
            *o = exp_with::<FMA>(v - max);
        }
        let sum = sum_of(yr);
        if log {
            let ls = sum.ln();
            for (o, &v) in yr.iter_mut().zip(xr) {
                *o = (v - max) - ls;
            }
        } else {
            let inv = 1.0 / sum;
            for o in yr.iter_mut() {
                *o *= inv;
            }
        }
    }
}

/// Arguments of one layer-norm call shared by every row block.
#[derive(Clone, Copy)]
struct LnArgs<'a> {
    cols: usize,
    eps: f32,
    gamma: Option<&'a [f32]>,
    beta: Option<&'a [f32]>,
}

/// Layer norm of every `cols`-long row of `x` into `y`. Two passes: a first
/// mean `m0`, then the deviations `d = x - m0` (exact when `x` is near
/// `m0`). The true mean is `m0 + δ` with `δ = Σd/n`, the variance the
/// corrected two-pass `(Σd² - (Σd)²/n) / n`, and each output is computed as
/// `(d - δ)·rstd`, so neither the rounding of `m0` nor its distance from 0
/// (a large common offset) reaches the result.
#[inline(always)]
fn layer_norm_rows(x: &[f32], y: &mut [f32], p: LnArgs<'_>) {
    let cols = p.cols;
    let n = cols as f32;
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let m0 = sum_of(xr) / n;
        let (sd, sd2) = dev_sums(xr, m0);
        let delta = sd / n;
        let var = ((sd2 - sd * sd / n) / n).max(0.0);
        let rstd = 1.0 / (var + p.eps).sqrt();
        match (p.gamma, p.beta) {
            (Some(g), Some(b)) => {
                for (((o, &v), &g), &b) in yr.iter_mut().zip(xr).zip(g).zip(b) {
                    *o = ((v - m0) - delta) * rstd * g + b;
                }
            }
            (Some(g), None) => {
                for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(g) {
                    *o = ((v - m0) - delta) * rstd * g;
                }
            }
            (None, Some(b)) => {
                for ((o, &v), &b) in yr.iter_mut().zip(xr).zip(b) {
                    *o = ((v - m0) - delta) * rstd + b;
                }
            }
            (None, None) => {
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = ((v - m0) - delta) * rstd;
                }
            }
        }
    }
}

/// The row kernels instantiated for one level.
macro_rules! level_fns {
    ($name:ident, $fma:literal $(, $feat:literal)?) => {
        mod $name {
            use super::*;
            $(#[target_feature(enable = $feat)])?
            pub(super) fn softmax(x: &[f32], y: &mut [f32], cols: usize, log: bool) {
                softmax_rows::<$fma>(x, y, cols, log)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) fn layer_norm(x: &[f32], y: &mut [f32], p: LnArgs<'_>) {
                layer_norm_rows(x, y, p)
            }
        }
    };
}

level_fns!(plain, false);
#[cfg(target_arch = "x86_64")]
level_fns!(avx2, true, "avx2,fma");
#[cfg(target_arch = "x86_64")]
level_fns!(avx512, true, "avx512f,fma");

fn softmax_block(isa: Isa, x: &[f32], y: &mut [f32], cols: usize, log: bool) {
    match isa {
        // SAFETY: `Isa::best` only returns levels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::softmax(x, y, cols, log) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::softmax(x, y, cols, log) },
        _ => plain::softmax(x, y, cols, log),
    }
}

fn layer_norm_block(isa: Isa, x: &[f32], y: &mut [f32], p: LnArgs<'_>) {
    match isa {
        // SAFETY: `Isa::best` only returns levels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::layer_norm(x, y, p) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::layer_norm(x, y, p) },
        _ => plain::layer_norm(x, y, p),
    }
}

/// Checks that `x` and `y` hold a `rows × cols` matrix; returns its length.
fn check_rows(rows: usize, cols: usize, x: usize, y: usize) -> Result<usize, KernelError> {
    let len = rows
        .checked_mul(cols)
        .ok_or_else(|| KernelError::new(format!("{rows}x{cols} rows are too large")))?;
    if x < len {
        return Err(KernelError::new(format!(
            "input of {rows}x{cols} needs {len} floats, found {x}"
        )));
    }
    if y < len {
        return Err(KernelError::new(format!(
            "output of {rows}x{cols} needs {len} floats, found {y}"
        )));
    }
    Ok(len)
}

/// Splits `rows × cols` row blocks of `x` and `y` over rayon (or runs them
/// on this thread when small) and calls `f` on each block.
fn for_row_blocks(
    cols: usize,
    len: usize,
    x: &[f32],
    y: &mut [f32],
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) {
    let (x, y) = (&x[..len], &mut y[..len]);
    if len < PAR_MIN_ELEMS || rayon::current_num_threads() == 1 {
        f(x, y);
        return;
    }
    let rows_per = (PAR_MIN_ELEMS / 4 / cols).max(1);
    x.par_chunks(rows_per * cols)
        .zip(y.par_chunks_mut(rows_per * cols))
        .for_each(|(xb, yb)| f(xb, yb));
}

/// Softmax (`log`: log-softmax) over each `cols`-long row of the row-major
/// `rows × cols` matrix `x`, into `y`: `y = exp(x - max) / Σ exp(x - max)`,
/// or `(x - max) - ln Σ exp(x - max)`.
pub fn softmax(
    rows: usize,
    cols: usize,
    log: bool,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let len = check_rows(rows, cols, x.len(), y.len())?;
    if len == 0 {
        return Ok(());
    }
    let isa = Isa::best();
    for_row_blocks(cols, len, x, y, |xb, yb| {
        softmax_block(isa, xb, yb, cols, log)
    });
    Ok(())
}

/// [`softmax`] of a row block on the calling thread (for kernels that
/// already run one task per thread, such as fused attention).
pub(super) fn softmax_rows_here(
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let len = check_rows(rows, cols, x.len(), y.len())?;
    if len > 0 {
        softmax_block(Isa::best(), &x[..len], &mut y[..len], cols, false);
    }
    Ok(())
}

/// Layer normalization of each `cols`-long row of the row-major `rows ×
/// cols` matrix `x` into `y`: `(x - mean) / sqrt(var + eps) · gamma + beta`
/// with the population variance; `gamma`/`beta` absent mean 1 and 0, present
/// ones need at least `cols` values (the first `cols` are used).
pub fn layer_norm(
    rows: usize,
    cols: usize,
    eps: f32,
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let len = check_rows(rows, cols, x.len(), y.len())?;
    for (name, v) in [("gamma", gamma), ("beta", beta)] {
        if let Some(v) = v
            && v.len() < cols
        {
            return Err(KernelError::new(format!(
                "{name} needs {cols} values, found {}",
                v.len()
            )));
        }
    }
    if len == 0 {
        return Ok(());
    }
    let p = LnArgs {
        cols,
        eps,
        gamma: gamma.map(|g| &g[..cols]),
        beta: beta.map(|b| &b[..cols]),
    };
    let isa = Isa::best();
    for_row_blocks(cols, len, x, y, |xb, yb| layer_norm_block(isa, xb, yb, p));
    Ok(())
}
