//! `Step::GridSample`: ONNX `GridSample` of NCHW (or NCDHW) f32, one
//! thread per output element, with the CPU kernel's f32 arithmetic
//! (`aoc_runtime::kernels::grid_sample`): the coordinate from the grid by
//! `align_corners`, rounded half to even for `nearest`, clamped or
//! reflected where it leaves the border, then 1, 2 or 4 taps per axis
//! (nearest, linear, Keys cubic with `a = -0.75`), each pixel index read
//! as zero (`zeros`), clamped (`border`) or reflected (`reflection`).
//!
//! Invariants:
//! - Nothing is read out of bounds: a tap outside the image under `zeros`
//!   reads pixel 0 of its plane and its product is replaced by zero (so
//!   an infinite coordinate gives 0, as on the CPU, not NaN); clamped and
//!   reflected indices are clamped to the axis before the load.
//! - `minnum`/`maxnum` clamp a NaN to the low bound, as the CPU's
//!   `f32::clamp` followed by `as usize` does.
//! - An empty image with a non-empty output is refused; an empty output
//!   gives a kernel that returns at once.

use aoc_plan::plan::{GridMode, GridPadding};

use super::builder::{BLOCK, K, index_type, launch, product};
use crate::irtext::{ModuleText, check_entry_name, f32_lit};
use crate::kernels::Geometry;

/// One axis's taps: the index (`ix`), whether it reads the image (`i1`)
/// and the weight (`float`).
struct Tap {
    idx: String,
    valid: String,
    w: String,
}

fn fl(x: f32) -> String {
    f32_lit(x)
}

/// `x` reflected into `[lo, hi]` (the CPU's `reflect`), where `x` is
/// outside; other values pass through unchanged.
fn reflect(k: &mut K, x: &str, lo: f32, hi: f32) -> String {
    let range = hi - lo;
    if range <= 0.0 {
        let fin = finite(k, x);
        return k.v(format!("select i1 {fin}, float {}, float {x}", fl(lo)));
    }
    let below = k.v(format!("fcmp olt float {x}, {}", fl(lo)));
    let above = k.v(format!("fcmp ogt float {x}, {}", fl(hi)));
    let d_lo = k.v(format!("fsub float {}, {x}", fl(lo)));
    let d_hi = k.v(format!("fsub float {x}, {}", fl(hi)));
    let dx = k.v(format!("select i1 {below}, float {d_lo}, float {d_hi}"));
    let q = k.v(format!("fdiv float {dx}, {}", fl(range)));
    let n = k.call("trunc", "float", &[&q]);
    let nr = k.v(format!("fmul float {n}, {}", fl(range)));
    let r = k.v(format!("fsub float {dx}, {nr}"));
    let half = k.v(format!("fmul float {n}, 0x3FE0000000000000"));
    let th = k.call("trunc", "float", &[&half]);
    let even = k.v(format!("fcmp oeq float {th}, {half}"));
    let lo_r = k.v(format!("fadd float {}, {r}", fl(lo)));
    let hi_r = k.v(format!("fsub float {}, {r}", fl(hi)));
    let from_below = k.v(format!("select i1 {even}, float {lo_r}, float {hi_r}"));
    let from_above = k.v(format!("select i1 {even}, float {hi_r}, float {lo_r}"));
    let out = k.v(format!("select i1 {below}, float {from_below}, float {from_above}"));
    let outside = k.v(format!("or i1 {below}, {above}"));
    let fin = finite(k, x);
    let use_it = k.v(format!("and i1 {outside}, {fin}"));
    k.v(format!("select i1 {use_it}, float {out}, float {x}"))
}

fn finite(k: &mut K, x: &str) -> String {
    let a = k.call("fabs", "float", &[x]);
    k.v(format!("fcmp olt float {a}, 0x7FF0000000000000"))
}

fn clamp(k: &mut K, x: &str, hi: f32) -> String {
    let a = k.call("maxnum", "float", &[x, "0.0"]);
    k.call("minnum", "float", &[&a, &fl(hi)])
}

/// The taps of one axis of `len` pixels for grid value `g`.
fn axis_taps(k: &mut K, mode: GridMode, padding: GridPadding, align: bool, g: &str, len: u64) -> Vec<Tap> {
    let lenf = len as f32;
    let (lo, hi) = if align { (0.0, lenf - 1.0) } else { (-0.5, lenf - 0.5) };
    let last = lenf - 1.0;
    let g1 = k.v(format!("fadd float {g}, 1.0"));
    let mut x = if align {
        let h = k.v(format!("fdiv float {g1}, 2.0"));
        k.v(format!("fmul float {h}, {}", fl(lenf - 1.0)))
    } else {
        let s = k.v(format!("fmul float {g1}, {}", fl(lenf)));
        let s = k.v(format!("fsub float {s}, 1.0"));
        k.v(format!("fdiv float {s}, 2.0"))
    };
    if mode == GridMode::Nearest {
        x = k.call("roundeven", "float", &[&x]);
    }
    // Cubic pads its taps only (as `core.grid_sample` says).
    match padding {
        _ if mode == GridMode::Cubic => {}
        GridPadding::Zeros => {}
        GridPadding::Border => {
            let below = k.v(format!("fcmp olt float {x}, {}", fl(lo)));
            let above = k.v(format!("fcmp ogt float {x}, {}", fl(hi)));
            let outside = k.v(format!("or i1 {below}, {above}"));
            let c = clamp(k, &x, last);
            x = k.v(format!("select i1 {outside}, float {c}, float {x}"));
        }
        GridPadding::Reflection => x = reflect(k, &x, lo, hi),
    }
    let ix = k.ix;
    let pixel = |k: &mut K, i: &str, w: String| -> Tap {
        match padding {
            GridPadding::Zeros => {
                let ge = k.v(format!("fcmp oge float {i}, 0.0"));
                let le = k.v(format!("fcmp ole float {i}, {}", fl(last)));
                let valid = k.v(format!("and i1 {ge}, {le}"));
                let safe = k.v(format!("select i1 {valid}, float {i}, float 0.0"));
                let idx = k.v(format!("fptoui float {safe} to {ix}"));
                Tap { idx, valid, w }
            }
            GridPadding::Border | GridPadding::Reflection => {
                let r = if padding == GridPadding::Reflection {
                    let r = reflect(k, i, lo, hi);
                    k.call("trunc", "float", &[&r])
                } else {
                    i.to_string()
                };
                let c = clamp(k, &r, last);
                let idx = k.v(format!("fptoui float {c} to {ix}"));
                Tap { idx, valid: "true".into(), w }
            }
        }
    };
    match mode {
        GridMode::Nearest => {
            let t = k.call("trunc", "float", &[&x]);
            vec![pixel(k, &t, "1.0".into())]
        }
        GridMode::Linear => {
            let x0 = k.call("floor", "float", &[&x]);
            let f = k.v(format!("fsub float {x}, {x0}"));
            let x1 = k.v(format!("fadd float {x0}, 1.0"));
            let w0 = k.v(format!("fsub float 1.0, {f}"));
            vec![pixel(k, &x0, w0), pixel(k, &x1, f)]
        }
        GridMode::Cubic => {
            let x0 = k.call("floor", "float", &[&x]);
            let t = k.v(format!("fsub float {x}, {x0}"));
            let a = -0.75f32;
            // Keys' kernel at |d| for the taps at -1, 0, 1, 2.
            let near = |k: &mut K, d: &str| {
                // ((a + 2)·d − (a + 3))·d·d + 1
                let p = k.v(format!("fmul float {}, {d}", fl(a + 2.0)));
                let p = k.v(format!("fsub float {p}, {}", fl(a + 3.0)));
                let p = k.v(format!("fmul float {p}, {d}"));
                let p = k.v(format!("fmul float {p}, {d}"));
                k.v(format!("fadd float {p}, 1.0"))
            };
            let far = |k: &mut K, d: &str| {
                // ((a·d − 5a)·d + 8a)·d − 4a
                let p = k.v(format!("fmul float {}, {d}", fl(a)));
                let p = k.v(format!("fsub float {p}, {}", fl(5.0 * a)));
                let p = k.v(format!("fmul float {p}, {d}"));
                let p = k.v(format!("fadd float {p}, {}", fl(8.0 * a)));
                let p = k.v(format!("fmul float {p}, {d}"));
                k.v(format!("fsub float {p}, {}", fl(4.0 * a)))
            };
            let d0 = k.v(format!("fadd float {t}, 1.0"));
            let d2 = k.v(format!("fsub float 1.0, {t}"));
            let d3 = k.v(format!("fsub float 2.0, {t}"));
            let ws = [far(k, &d0), near(k, &t), near(k, &d2), far(k, &d3)];
            let mut taps = vec![];
            for (j, w) in ws.into_iter().enumerate() {
                let p = k.v(format!("fadd float {x0}, {}", fl(j as f32 - 1.0)));
                taps.push(pixel(k, &p, w));
            }
            taps
        }
    }
}

/// `Step::GridSample`: NCHW f32 `x` (`n × c × h × w`) sampled at `grid`
/// (`n × oh × ow × 2`) into `y` (`n × c × oh × ow`), or with `volumetric`
/// NCDHW `x`, a grid of `(x, y, z)` and `n × c × od × oh × ow` `y`; `dims`
/// is `[n, c, d, h, w, od, oh, ow]`. Parameters `(x, grid, y)`.
#[allow(clippy::too_many_arguments)]
pub fn grid_sample(
    m: &mut ModuleText,
    name: &str,
    mode: GridMode,
    padding: GridPadding,
    align: bool,
    volumetric: bool,
    dims: [u64; 8],
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let [n, c, d, h, w, od, oh, ow] = dims;
    let kc = if volumetric { 3 } else { 2 };
    if !volumetric && (d != 1 || od != 1) {
        return Err(format!("grid_sample: a 2-D image with depth {d} -> {od}"));
    }
    let ylen = product("grid_sample output", &[n, c, od, oh, ow])? as u64;
    let xlen = product("grid_sample input", &[n, c, d, h, w])? as u64;
    let glen = product("grid_sample grid", &[n, od, oh, ow, kc])? as u64;
    if ylen > 0 && (d == 0 || h == 0 || w == 0) {
        return Err(format!("grid_sample: an empty image ({d}x{h}x{w})"));
    }
    let g = launch(ylen, BLOCK);
    let ix = index_type(xlen.max(ylen).max(glen) as u128 * 4);
    let mut k = K::new(m, ix, g);
    if ylen > 0 {
        k.items(ylen, |k, i| {
            let ix = k.ix;
            let opix = od * oh * ow;
            let p = k.split(i, &[n, c, opix]);
            let plane = k.lin(0, &[(&p[0], c as i128), (&p[1], 1)]);
            let go = k.lin(0, &[(&p[0], (opix * kc * 4) as i128), (&p[2], (kc * 4) as i128)]);
            let coord = |k: &mut K, j: u64| {
                let o = k.v(format!("add {ix} {go}, {}", 4 * j));
                let gp = k.at("%grid", ix, &o);
                k.load("float", &gp, 4)
            };
            let gx = coord(k, 0);
            let gy = coord(k, 1);
            let tx = axis_taps(k, mode, padding, align, &gx, w);
            let ty = axis_taps(k, mode, padding, align, &gy, h);
            let tz = if volumetric {
                let gz = coord(k, 2);
                axis_taps(k, mode, padding, align, &gz, d)
            } else {
                vec![Tap { idx: "0".into(), valid: "true".into(), w: "1.0".into() }]
            };
            let base = k.lin(0, &[(&plane, (d * h * w * 4) as i128)]);
            let masked = |k: &mut K, t: &Tap, prod: String| {
                if t.valid == "true" { prod } else { k.v(format!("select i1 {}, float {prod}, float 0.0", t.valid)) }
            };
            let mut acc = "0.0".to_string();
            for zt in &tz {
                let slice = k.lin(0, &[(&base, 1), (&zt.idx, (h * w * 4) as i128)]);
                let mut pl = "0.0".to_string();
                for yt in &ty {
                    let row = k.lin(0, &[(&slice, 1), (&yt.idx, (w * 4) as i128)]);
                    let mut s = "0.0".to_string();
                    for xt in &tx {
                        let off = k.lin(0, &[(&row, 1), (&xt.idx, 4)]);
                        let ptr = k.at("%x", ix, &off);
                        let v = k.load("float", &ptr, 4);
                        let prod = k.v(format!("fmul float {}, {v}", xt.w));
                        let prod = masked(k, xt, prod);
                        s = k.v(format!("fadd float {s}, {prod}"));
                    }
                    let prod = k.v(format!("fmul float {}, {s}", yt.w));
                    let prod = masked(k, yt, prod);
                    pl = k.v(format!("fadd float {pl}, {prod}"));
                }
                let prod = k.v(format!("fmul float {}, {pl}", zt.w));
                let prod = masked(k, zt, prod);
                acc = k.v(format!("fadd float {acc}, {prod}"));
            }
            let yp = k.item_ptr(i, 1);
            k.store("float", &acc, &yp, 4);
        });
    }
    let text = k.finish(name, &["%x", "%grid", "%y"], 1);
    m.func(text);
    Ok(g)
}
