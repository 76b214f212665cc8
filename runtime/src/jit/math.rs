//! The transcendental functions behind the [`MathTable`](super::MathTable):
//! `exp`, `log`, `tanh`, `erf` and `sigmoid` in f32, branch-free, written
//! once over a lane type ([`Lanes`]: one `f32` for the scalar table entries,
//! four SSE lanes for the vector entries) and a multiply-add policy
//! ([`MulAdd`]: separate multiply and add on any x86-64, fused where the CPU
//! has FMA).
//!
//! Invariants:
//! - For one policy, the scalar and vector instances execute the same IEEE
//!   operations in the same order, so a scalar entry returns bit for bit
//!   (NaN payloads aside) what its vector entry returns in each lane: a
//!   kernel's scalar tail agrees with its vector body. The two policies
//!   round differently (by up to an ulp or so); both meet the accuracy
//!   below.
//! - No branches on the data: both sides of a range split are computed and
//!   the result picked with a mask, so a vector of mixed inputs costs the
//!   same as any other.
//! - Accuracy (tests sweep every binade and the interesting ranges against
//!   f64, for both policies): `exp` and `log` within 4 ulp (1 in practice);
//!   `tanh`, `erf` and `sigmoid` within 2e-7 absolute, and within 2 ulp
//!   for `|x| < 0.5`. `tanh` and `erf` saturate to exactly ±1, `sigmoid` to
//!   exactly 0 and 1; NaN gives NaN everywhere.
//! - The polynomial coefficients are minimax-style fits (Lawson's iterated
//!   weighted least squares in f64, rounded to f32) made for this file.

use super::lanes::{Lanes, MulAdd};

const SIGN: u32 = 0x8000_0000;

/// `c[0] + x·c[1] + x²·c[2] + …`, by Horner's rule.
#[inline(always)]
fn poly<V: Lanes, M: MulAdd, const N: usize>(m: M, x: V, c: &[f32; N]) -> V {
    let mut p = V::splat(c[N - 1]);
    for &ck in c[..N - 1].iter().rev() {
        p = m.mul_add(p, x, V::splat(ck));
    }
    p
}

/// [`poly`] for up to 8 coefficients by Estrin's scheme: pairs
/// `c[2i] + c[2i+1]·x`, combined in pairs with `x²`, then with `x⁴`. The
/// dependency chain is 3 multiply-adds deep instead of `N - 1`, for two
/// more multiplies. A generated loop overlaps only a few calls, so where
/// the polynomial is the function's one long chain (`exp`, `log`) the
/// shorter latency wins (10-15% measured); where two branches already run
/// side by side (`erf`, `tanh`) the extra instructions cost more.
#[inline(always)]
fn poly_estrin<V: Lanes, M: MulAdd, const N: usize>(m: M, x: V, c: &[f32; N]) -> V {
    const { assert!(N >= 1 && N <= 8, "poly_estrin takes 1 to 8 coefficients") };
    let k = |i: usize| V::splat(c[i]);
    let pair = |i: usize| {
        if i + 1 < N {
            m.mul_add(k(i + 1), x, k(i))
        } else {
            k(i)
        }
    };
    if N <= 2 {
        return pair(0);
    }
    let x2 = x.mul(x);
    let low = m.mul_add(pair(2), x2, pair(0));
    if N <= 4 {
        return low;
    }
    let high = if N <= 6 {
        pair(4)
    } else {
        m.mul_add(pair(6), x2, pair(4))
    };
    m.mul_add(high, x2.mul(x2), low)
}

#[inline(always)]
fn abs<V: Lanes>(x: V) -> V {
    V::splat_bits(SIGN).andnot(x)
}

/// `-|x|`.
#[inline(always)]
fn neg_abs<V: Lanes>(x: V) -> V {
    x.or(V::splat_bits(SIGN))
}

/// `x` with the sign bit of `s` added (`x` must be non-negative or NaN).
#[inline(always)]
fn with_sign_of<V: Lanes>(x: V, s: V) -> V {
    x.or(s.and(V::splat_bits(SIGN)))
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `n·LN2_HI` is exact for `|n| ≤ 255` (9 bits).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding `1.5·2^23` rounds to an integer (ties to even) and leaves it in
/// the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// `e^r ≈ 1 + r + r²·(C0 + C1·r + … + C4·r⁴)` on `|r| ≤ ln2/2` (relative
/// error 3.1e-9; the fit of `kernels::norm::exp_f32`).
const EXP_C: [f32; 5] = [
    0.499_999_94,
    0.166_665_21,
    0.041_668_39,
    0.008_368_71,
    0.001_381_461_3,
];

/// The reduction shared by the exponentials: `x = n·ln2 + r` with
/// `|r| ≤ ln2/2`; returns `e^r` and `n` as an `i32` in each lane's bits.
/// `x` must be within `[-150·ln2, 150·ln2]` (or NaN, which gives NaN).
#[inline(always)]
fn exp_reduced<V: Lanes, M: MulAdd>(m: M, x: V) -> (V, V) {
    let round = V::splat(ROUND);
    let t = m.mul_add(x, V::splat(LOG2E), round);
    let n = t.sub(round);
    let ni = t.isub(round);
    // Exact: n·LN2_HI is exact and close to x.
    let r = m.mul_add(n, V::splat(-LN2_HI), x);
    let r = m.mul_add(n, V::splat(-LN2_LO), r);
    let p = poly_estrin(m, r, &EXP_C);
    let e = V::splat(1.0).add(m.mul_add(r.mul(r), p, r));
    (e, ni)
}

/// `2^n` for `n ∈ [-126, 127]` given as `i32` lanes.
#[inline(always)]
fn pow2<V: Lanes>(ni: V) -> V {
    ni.iadd(V::splat_bits(127)).shl23()
}

/// `e^x` for `x ∈ [-87, 88]`, where `e^x` and `2^n` are normal: one
/// scaling, no clamping.
#[inline(always)]
fn exp_normal<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    let (e, ni) = exp_reduced(m, x);
    e.mul(pow2(ni))
}

/// `e^x` everywhere: the input is clamped to `[-104, 89]` (below, the
/// result is 0; above, +inf), and `2^n` is applied in two halves that are
/// normal powers of two, so a subnormal result rounds once.
#[inline(always)]
pub(crate) fn exp<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    // The constant goes first: `maxps`/`minps` return the second operand
    // when one is NaN, so NaN passes through.
    let x = V::splat(89.0).min(V::splat(-104.0).max(x));
    let (e, ni) = exp_reduced(m, x);
    // n ∈ [-150, 129]: the halves are in [-75, 65].
    let n1 = ni.sar1();
    let n2 = ni.isub(n1);
    e.mul(pow2(n1)).mul(pow2(n2))
}

/// `ln(1 + f) ≈ f - f²/2 + f³·P(f)` on `f ∈ [√½ - 1, √2 - 1]` (relative
/// error 5.8e-9).
const LOG1P_P: [f32; 8] = [
    0.333_333_3,
    -0.250_008_2,
    0.200_012_27,
    -0.166_233_57,
    0.142_017_57,
    -0.131_601_83,
    0.127_615_78,
    -0.076_344_99,
];

/// `ln x`: `x = 2^e·m` with `m ∈ [√½, √2)` (subnormals scaled by 2^23
/// first), then `e·ln2 + ln(1 + (m - 1))`, with `ln2` in two parts so the
/// sum rounds once at the end. `ln ±0 = -inf`, `ln(+inf) = +inf`, negative
/// and NaN inputs give NaN.
#[inline(always)]
pub(crate) fn log<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    let one = V::splat(1.0);
    let tiny = x.lt(V::splat(f32::MIN_POSITIVE));
    let xs = V::select(tiny, x.mul(V::splat(8_388_608.0)), x);
    let bias = V::select(tiny, V::splat(150.0), V::splat(127.0));
    let e = xs.shr23().int_to_float().sub(bias);
    let mant = xs
        .and(V::splat_bits(0x007f_ffff))
        .or(V::splat_bits(0x3f80_0000));
    let big = V::splat(std::f32::consts::SQRT_2).lt(mant);
    let mant = V::select(big, mant.mul(V::splat(0.5)), mant);
    let e = e.add(big.and(one));
    // Exact: the mantissa is within a factor of two of 1.
    let f = mant.sub(one);
    let z = f.mul(f);
    let y = f.mul(z).mul(poly_estrin(m, f, &LOG1P_P));
    let y = m.mul_add(e, V::splat(LN2_LO), y);
    let y = m.mul_add(z, V::splat(-0.5), y);
    let y = f.add(y);
    let y = m.mul_add(e, V::splat(LN2_HI), y);
    let zero = V::splat(0.0);
    let inf = V::splat(f32::INFINITY);
    let y = V::select(x.eq(inf), inf, y);
    let y = V::select(x.eq(zero), V::splat(f32::NEG_INFINITY), y);
    let invalid = x.lt(zero).or(x.unord(x));
    V::select(invalid, V::splat(f32::NAN), y)
}

/// `tanh x = x + x·s·P(s)`, `s = x²`, on `|x| < 0.625` (relative error
/// 4.4e-9).
const TANH_P: [f32; 5] = [
    -0.333_332_8,
    0.133_314_42,
    -0.053_739_715,
    0.020_639_088,
    -0.005_704_987_3,
];

/// `tanh x`: the odd polynomial near 0 (full relative accuracy for small
/// `x`), `1 - 2/(e^{2a} + 1)` beyond with `a = min(|x|, 10)`, which is
/// exactly 1 from about 9.01 on; the sign is copied from `x`.
#[inline(always)]
pub(crate) fn tanh<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    let one = V::splat(1.0);
    let a = abs(x);
    let s = a.mul(a);
    let small = m.mul_add(a, s.mul(poly(m, s, &TANH_P)), a);
    let a10 = V::splat(10.0).min(a);
    let e = exp_normal(m, a10.add(a10));
    let large = one.sub(V::splat(2.0).div(e.add(one)));
    let y = V::select(a.lt(V::splat(0.625)), small, large);
    with_sign_of(y, x)
}

/// `sigmoid x = 1 / (1 + e^{-x})`, computed from `E = e^{-|x|} ∈ [0, 1]`
/// as `1/(1+E)` for `x ≥ 0` and `E/(1+E)` for `x < 0`: no overflow, and
/// full relative accuracy for very negative `x` too.
#[inline(always)]
pub(crate) fn sigmoid<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    let e = exp(m, neg_abs(x));
    let d = V::splat(1.0).div(V::splat(1.0).add(e));
    V::select(x.lt(V::splat(0.0)), e.mul(d), d)
}

/// `erf a = a + a·Q(a²)` on `0 ≤ a < 1` (relative error 1.2e-9; writing
/// `2/√π` as `1 + 0.128…` keeps the leading coefficient's rounding error
/// out of the result).
const ERF_SMALL: [f32; 7] = [
    0.128_379_17,
    -0.376_126_26,
    0.112_835_854,
    -0.026_853_813,
    0.005_188_327_7,
    -8.010_195e-4,
    7.853_866e-5,
];

/// `R(1/a) ≈ -erfc(a)·e^{a²}` on `1 ≤ a ≤ 4` (absolute error in `erfc`
/// of 3.8e-9), negated so that `erf a = 1 + e^{-a²}·R(1/a)` is one
/// multiply-add.
const ERF_LARGE_NEG: [f32; 7] = [
    0.001_661_306,
    -0.577_875,
    0.033_942_044,
    0.309_970_95,
    -0.308_656_63,
    0.138_752_18,
    -0.025_378_434,
];

/// `erf x`: with `a = min(|x|, 4)`, the odd polynomial for `a < 1` and
/// `1 + e^{-a²}·R(1/a)` beyond (exactly 1 from about 3.92 on, where
/// `erfc < 2^-25`); the sign is copied from `x`.
#[inline(always)]
pub(crate) fn erf<V: Lanes, M: MulAdd>(m: M, x: V) -> V {
    let one = V::splat(1.0);
    let a = V::splat(4.0).min(abs(x));
    let s = a.mul(a);
    let small = m.mul_add(a, poly(m, s, &ERF_SMALL), a);
    let r = poly(m, one.div(a), &ERF_LARGE_NEG);
    let large = m.mul_add(exp_normal(m, neg_abs(s)), r, one);
    let y = V::select(a.lt(one), small, large);
    with_sign_of(y, x)
}

#[cfg(test)]
mod tests {
    use super::super::lanes::Unfused;
    use super::super::{F32x4, MATH, erf_f64};

    // `__m128` in `xmm0`; see `MathTable`.
    #[allow(improper_ctypes_definitions)]
    type Vector = extern "C" fn(F32x4) -> F32x4;

    #[cfg(target_arch = "x86_64")]
    fn to_lanes(x: F32x4) -> [f32; 4] {
        // SAFETY: `__m128` and `[f32; 4]` have the same size, and every bit
        // pattern is valid for both.
        unsafe { std::mem::transmute::<F32x4, [f32; 4]>(x) }
    }

    #[cfg(target_arch = "x86_64")]
    fn from_lanes(x: [f32; 4]) -> F32x4 {
        // SAFETY: as in `to_lanes`.
        unsafe { std::mem::transmute::<[f32; 4], F32x4>(x) }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn to_lanes(x: F32x4) -> [f32; 4] {
        x.0
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn from_lanes(x: [f32; 4]) -> F32x4 {
        F32x4(x)
    }

    fn call4(f: Vector, x: [f32; 4]) -> [f32; 4] {
        to_lanes(f(from_lanes(x)))
    }

    /// One instance of a function: its scalar and its 4-lane form.
    struct Inst {
        name: &'static str,
        one: Box<dyn Fn(f32) -> f32>,
        four: Box<dyn Fn([f32; 4]) -> [f32; 4]>,
    }

    /// The unfused instance of `math::$f` on four lanes: SSE2 code on
    /// x86-64, four scalar calls elsewhere.
    macro_rules! plain4 {
        ($f:ident, $x:expr) => {{
            #[cfg(target_arch = "x86_64")]
            let y = to_lanes(super::$f(Unfused, from_lanes($x)));
            #[cfg(not(target_arch = "x86_64"))]
            let y = $x.map(|v| super::$f(Unfused, v));
            y
        }};
    }

    /// The instances of `math::$f` to test: the table's entries, the plain
    /// (SSE2) instance, and the FMA instance where the CPU has FMA.
    macro_rules! instances {
        ($f:ident, $f4:ident => $scalar:ident, $vector:ident) => {{
            #[allow(unused_mut)]
            let mut v = vec![
                Inst {
                    name: "table",
                    one: Box::new(|x| (MATH.$f)(x)),
                    four: Box::new(|x| call4(MATH.$f4, x)),
                },
                Inst {
                    name: "plain",
                    one: Box::new(|x| super::$f(Unfused, x)),
                    four: Box::new(|x| plain4!($f, x)),
                },
            ];
            #[cfg(target_arch = "x86_64")]
            if super::super::fused_ok() {
                v.push(Inst {
                    name: "fma",
                    // SAFETY: the CPU has AVX and FMA (checked above).
                    one: Box::new(|x| unsafe { super::super::fused::$scalar(x) }),
                    // SAFETY: as above.
                    four: Box::new(|x| {
                        to_lanes(unsafe { super::super::fused::$vector(from_lanes(x)) })
                    }),
                });
            } else {
                eprintln!("no FMA on this CPU: its instance is not tested");
            }
            v
        }};
    }

    /// Distance of `got` from `want` in units of the f32 spacing at `want`
    /// (2^-149 for subnormals); infinities count as ±2^128, one step past
    /// the largest finite value, so an overflow to +inf of a true value
    /// near `f32::MAX` costs about one unit.
    fn ulps(got: f32, want: f64) -> f64 {
        if got.is_nan() || want.is_nan() {
            return if got.is_nan() && want.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let big = 2f64.powi(128);
        let g = if got.is_infinite() {
            big.copysign(got as f64)
        } else {
            got as f64
        };
        let w = want.clamp(-big, big);
        if g == w {
            return 0.0;
        }
        let e = if w == 0.0 {
            -126
        } else {
            (w.abs().log2().floor() as i32).max(-126)
        };
        (g - w).abs() / 2f64.powi(e - 23)
    }

    /// The inputs of the sweeps: every 1021st bit pattern (all binades,
    /// both signs, subnormals, infinities and NaNs), a dense grid over
    /// `[-12, 12]`, and hand-picked edge values.
    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(1021).map(f32::from_bits).collect();
        xs.extend((0..1 << 20).map(|i| -12.0 + 24.0 * i as f32 / (1 << 20) as f32));
        xs.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            1e-40,
            f32::MAX,
            f32::MIN,
            88.72,
            88.73,
            -87.0,
            -103.9,
            -104.5,
            0.625,
            -0.625,
            3.92,
            4.0,
            9.01,
        ]);
        xs
    }

    /// Runs every instance over [`inputs`], checks each one's scalar and
    /// vector forms agree bit for bit, and calls `check(inst, x, f(x))`.
    fn sweep(insts: &[Inst], mut check: impl FnMut(&str, f32, f32)) {
        let xs = inputs();
        for inst in insts {
            for ch in xs.chunks(4) {
                let mut v = [0.5f32; 4];
                v[..ch.len()].copy_from_slice(ch);
                let y = (inst.four)(v);
                for (&x, &yv) in ch.iter().zip(&y) {
                    let ys = (inst.one)(x);
                    // Rust leaves NaN payloads unspecified: any NaN will do.
                    assert!(
                        ys.to_bits() == yv.to_bits() || (ys.is_nan() && yv.is_nan()),
                        "{}: scalar and vector differ at {x:e}: {ys:e} vs {yv:e}",
                        inst.name
                    );
                    check(inst.name, x, ys);
                }
            }
        }
    }

    #[test]
    fn jit_math_table_uses_the_fma_instance_where_available() {
        let x = [0.3f32, -1.7, 2.9, 7.5];
        #[cfg(target_arch = "x86_64")]
        if super::super::fused_ok() {
            // SAFETY: the CPU has AVX and FMA.
            let want = to_lanes(unsafe { super::super::fused::math_erf4(from_lanes(x)) });
            assert_eq!(call4(MATH.erf4, x), want);
            return;
        }
        assert_eq!(call4(MATH.erf4, x), plain4!(erf, x));
    }

    #[test]
    fn jit_math_exp_within_4_ulp() {
        let mut worst = 0.0f64;
        sweep(
            &instances!(exp, exp4 => math_exp, math_exp4),
            |name, x, y| {
                let want = (x as f64).exp();
                let u = ulps(y, want);
                assert!(
                    u <= 4.0,
                    "{name}: exp({x:e}) = {y:e}, want {want:e} ({u} ulp)"
                );
                worst = worst.max(u);
            },
        );
        // Exhaustive runs measured 1.0 ulp at most.
        assert!(worst < 1.5, "worst exp error {worst} ulp");
        assert_eq!((MATH.exp)(0.0), 1.0);
        assert_eq!((MATH.exp)(-0.0), 1.0);
        assert_eq!((MATH.exp)(f32::NEG_INFINITY), 0.0);
        assert_eq!((MATH.exp)(-104.0), 0.0);
        assert_eq!((MATH.exp)(f32::INFINITY), f32::INFINITY);
        assert_eq!((MATH.exp)(88.73), f32::INFINITY);
        assert!((MATH.exp)(88.72) < f32::INFINITY);
        // Subnormal results: e^-100 = 3.720076e-44 = 26.55·2^-149.
        assert_eq!((MATH.exp)(-100.0).to_bits(), 27);
        assert!((MATH.exp)(f32::NAN).is_nan());
    }

    #[test]
    fn jit_math_log_within_4_ulp() {
        let mut worst = 0.0f64;
        sweep(
            &instances!(log, log4 => math_log, math_log4),
            |name, x, y| {
                if x.is_nan() || x < 0.0 {
                    assert!(y.is_nan(), "{name}: log({x:e}) = {y:e}, want NaN");
                    return;
                }
                let want = (x as f64).ln();
                let u = ulps(y, want);
                assert!(
                    u <= 4.0,
                    "{name}: log({x:e}) = {y:e}, want {want:e} ({u} ulp)"
                );
                worst = worst.max(u);
            },
        );
        assert!(worst < 1.5, "worst log error {worst} ulp");
        assert_eq!((MATH.log)(1.0), 0.0);
        assert_eq!((MATH.log)(0.0), f32::NEG_INFINITY);
        assert_eq!((MATH.log)(-0.0), f32::NEG_INFINITY);
        assert_eq!((MATH.log)(f32::INFINITY), f32::INFINITY);
        assert!((MATH.log)(-1e-45).is_nan());
        assert!((MATH.log)(f32::NEG_INFINITY).is_nan());
        // The smallest subnormal: ln 2^-149 = -103.27893.
        assert!(ulps((MATH.log)(1e-45), -149.0 * std::f64::consts::LN_2) <= 1.0);
    }

    /// Checks the instances against `f` within 2e-7 absolute error, and
    /// within 2 ulp for `|x| < 0.5` (where the functions compute without
    /// cancellation).
    fn check_abs(insts: &[Inst], f: fn(f64) -> f64, fname: &str) {
        sweep(insts, |name, x, y| {
            if x.is_nan() {
                assert!(y.is_nan(), "{name}: {fname}({x:e}) = {y:e}, want NaN");
                return;
            }
            let want = f(x as f64);
            let err = (y as f64 - want).abs();
            assert!(err <= 2e-7, "{name}: {fname}({x:e}) = {y:e}, want {want:e}");
            if x.abs() < 0.5 {
                let u = ulps(y, want);
                assert!(
                    u <= 2.0,
                    "{name}: {fname}({x:e}) = {y:e}, want {want:e} ({u} ulp)"
                );
            }
        });
    }

    #[test]
    fn jit_math_tanh_within_2e7_and_saturates() {
        check_abs(
            &instances!(tanh, tanh4 => math_tanh, math_tanh4),
            f64::tanh,
            "tanh",
        );
        for (x, want) in [
            (9.1, 1.0),
            (20.0, 1.0),
            (f32::INFINITY, 1.0),
            (1e-40, 1e-40),
        ] {
            assert_eq!((MATH.tanh)(x), want, "tanh({x})");
            assert_eq!((MATH.tanh)(-x), -want, "tanh({})", -x);
        }
        assert_eq!((MATH.tanh)(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn jit_math_erf_within_2e7_and_saturates() {
        check_abs(
            &instances!(erf, erf4 => math_erf, math_erf4),
            erf_f64,
            "erf",
        );
        for (x, want) in [(3.93, 1.0), (4.0, 1.0), (1e30, 1.0), (f32::INFINITY, 1.0)] {
            assert_eq!((MATH.erf)(x), want, "erf({x})");
            assert_eq!((MATH.erf)(-x), -want, "erf({})", -x);
        }
        assert_eq!((MATH.erf)(-0.0).to_bits(), (-0.0f32).to_bits());
        // erf(x) = 2x/√π to f64 precision for tiny x.
        let x = 1e-20f32;
        let want = x as f64 * std::f64::consts::FRAC_2_SQRT_PI;
        assert!(ulps((MATH.erf)(x), want) <= 1.0);
    }

    #[test]
    fn jit_math_sigmoid_within_2e7_and_saturates() {
        // 1/(1+e^-x) in f64 is accurate everywhere (e^-x overflows to
        // +inf only where the result underflows f32 anyway).
        check_abs(
            &instances!(sigmoid, sigmoid4 => math_sigmoid, math_sigmoid4),
            |x| 1.0 / (1.0 + (-x).exp()),
            "sigmoid",
        );
        assert_eq!((MATH.sigmoid)(0.0), 0.5);
        assert_eq!((MATH.sigmoid)(-0.0), 0.5);
        assert_eq!((MATH.sigmoid)(20.0), 1.0);
        assert_eq!((MATH.sigmoid)(f32::INFINITY), 1.0);
        assert_eq!((MATH.sigmoid)(f32::NEG_INFINITY), 0.0);
        assert_eq!((MATH.sigmoid)(-200.0), 0.0);
        // Very negative inputs keep their relative accuracy: e^-50.
        let want = 1.0 / (1.0 + 50f64.exp());
        assert!(ulps((MATH.sigmoid)(-50.0), want) <= 4.0);
    }
}
