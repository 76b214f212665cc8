//! `Step::Resize` of NHWC f32 tensors: nearest and the three bilinear
//! coordinate modes of `ResizeMode`.
//!
//! Invariants:
//! - The taps `(i0, i1, f)` of every output index equal the CPU's
//!   (`aoc_runtime::kernels::resize`, its `axis_taps`) bit for bit: an axis
//!   of at most `TABLE_MAX` outputs reads constant tables computed here with
//!   the CPU's f64 formulas; a longer axis computes them in the kernel with
//!   the same f64 operations in the same order (IEEE division and floor).
//! - The blend follows the CPU: rows, then columns, `a + f·(b − a)`, and
//!   `a` unchanged where `f == 0`.
//! - An item is 4 channels when `c % 4 == 0` and a run-time test finds `x`
//!   and `y` 16-byte aligned, else one channel.
//! - Resizing an empty input to a non-empty output is refused; an empty
//!   output gives a kernel that returns at once.

use aoc_plan::plan::ResizeMode;

use super::builder::{BLOCK, K, fty, index_type, launch, product};
use crate::irtext::{ModuleText, check_entry_name, f32_lit};
use crate::kernels::Geometry;

/// Axes with more outputs compute their resize taps on the GPU.
const TABLE_MAX: u64 = 4096;

/// Where an output index of one resize axis reads (the CPU's `axis_taps`).
struct Tap {
    i0: u64,
    i1: u64,
    f: f32,
}

/// The f64 coordinate of output `o` before clamping (`None` for nearest).
fn coord(mode: ResizeMode, input: u64, out: u64, o: f64) -> Option<f64> {
    let (in_f, scale) = (input as f64, out as f64 / input as f64);
    match mode {
        ResizeMode::Nearest => None,
        ResizeMode::BilinearHalfPixel => Some((o + 0.5) / scale - 0.5),
        ResizeMode::BilinearAlignCorners => {
            let out_f = scale * in_f;
            Some(if out_f == 1.0 {
                0.0
            } else {
                o * (in_f - 1.0) / (out_f - 1.0)
            })
        }
        ResizeMode::BilinearAsymmetric => Some(o / scale),
    }
}

fn tap(mode: ResizeMode, input: u64, out: u64, o: u64) -> Tap {
    let (last, scale) = (input - 1, out as f64 / input as f64);
    match coord(mode, input, out, o as f64) {
        None => {
            let i = (((o as f64) / scale).floor().max(0.0) as u64).min(last);
            Tap {
                i0: i,
                i1: i,
                f: 0.0,
            }
        }
        Some(x) => {
            let x = x.clamp(0.0, last as f64);
            let i0 = (x.floor() as u64).min(last);
            Tap {
                i0,
                i1: (i0 + 1).min(last),
                f: (x - i0 as f64) as f32,
            }
        }
    }
}

fn f64_lit(x: f64) -> String {
    format!("0x{:016X}", x.to_bits())
}

/// The taps of output `o` of an axis (`tag` names its tables): `(i0, i1,
/// f)` as `ix`, `ix`, float.
fn resize_tap(
    k: &mut K,
    name: &str,
    tag: &str,
    mode: ResizeMode,
    input: u64,
    out: u64,
    o: &str,
) -> [String; 3] {
    let ix = k.ix;
    let last = input - 1;
    let nearest = mode == ResizeMode::Nearest;
    if out <= TABLE_MAX {
        let taps: Vec<Tap> = (0..out).map(|o| tap(mode, input, out, o)).collect();
        let get = |k: &mut K, field: &str, ty: &str, vals: Vec<String>| {
            let g = format!("@{name}.{tag}{field}");
            let items: Vec<String> = vals.iter().map(|v| format!("{ty} {v}")).collect();
            k.m.declare(&format!(
                "{g} = internal addrspace(1) constant [{out} x {ty}] [{}]",
                items.join(", ")
            ));
            let p = k.v(format!(
                "getelementptr inbounds {ty}, ptr addrspace(1) {g}, {ix} {o}"
            ));
            let x = k.load(ty, &p, 4);
            if ty == "i32" && ix == "i64" {
                k.v(format!("zext i32 {x} to i64"))
            } else {
                x
            }
        };
        let i0 = get(
            k,
            "i0",
            "i32",
            taps.iter().map(|t| t.i0.to_string()).collect(),
        );
        if nearest {
            return [i0.clone(), i0, "0.0".into()];
        }
        let i1 = get(
            k,
            "i1",
            "i32",
            taps.iter().map(|t| t.i1.to_string()).collect(),
        );
        let f = get(k, "f", "float", taps.iter().map(|t| f32_lit(t.f)).collect());
        return [i0, i1, f];
    }
    // The CPU's f64 operations, one by one (IEEE division and floor).
    let scale = out as f64 / input as f64;
    let of = k.v(format!("uitofp {ix} {o} to double"));
    let x = match mode {
        ResizeMode::Nearest => k.v(format!("fdiv double {of}, {}", f64_lit(scale))),
        ResizeMode::BilinearHalfPixel => {
            let a = k.v(format!("fadd double {of}, 0.5"));
            let d = k.v(format!("fdiv double {a}, {}", f64_lit(scale)));
            k.v(format!("fsub double {d}, 0.5"))
        }
        ResizeMode::BilinearAlignCorners => {
            let out_f = scale * input as f64;
            if out_f == 1.0 {
                "0.0".to_string()
            } else {
                let a = k.v(format!("fmul double {of}, {}", f64_lit(input as f64 - 1.0)));
                k.v(format!("fdiv double {a}, {}", f64_lit(out_f - 1.0)))
            }
        }
        ResizeMode::BilinearAsymmetric => k.v(format!("fdiv double {of}, {}", f64_lit(scale))),
    };
    let x = if nearest {
        k.call("floor", "double", &[&x])
    } else {
        let x = k.call("maxnum", "double", &[&x, "0.0"]);
        k.call("minnum", "double", &[&x, &f64_lit(last as f64)])
    };
    let fl = k.call("floor", "double", &[&x]);
    let fl = k.call("maxnum", "double", &[&fl, "0.0"]);
    let i = k.v(format!("fptoui double {fl} to i64"));
    let i0 = k.call("umin", "i64", &[&i, &last.to_string()]);
    let i0x = k.narrow(&i0);
    if nearest {
        return [i0x.clone(), i0x, "0.0".into()];
    }
    let i1 = k.v(format!("add i64 {i0}, 1"));
    let i1 = k.call("umin", "i64", &[&i1, &last.to_string()]);
    let i1 = k.narrow(&i1);
    let i0f = k.v(format!("uitofp i64 {i0} to double"));
    let d = k.v(format!("fsub double {x}, {i0f}"));
    let f = k.v(format!("fptrunc double {d} to float"));
    [i0x, i1, f]
}

/// `Step::Resize` of NHWC f32 `n × h × w × c` to `n × oh × ow × c`.
/// Parameters `(x, y)`.
#[allow(clippy::too_many_arguments)]
pub fn resize(
    m: &mut ModuleText,
    name: &str,
    mode: ResizeMode,
    n: u64,
    h: u64,
    w: u64,
    c: u64,
    oh: u64,
    ow: u64,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let ylen = product("resize output", &[n, oh, ow, c])? as u64;
    let xlen = product("resize input", &[n, h, w, c])? as u64;
    if ylen > 0 && (h == 0 || w == 0) {
        return Err(format!(
            "resize: an empty input ({h}x{w}) cannot be resized to {oh}x{ow}"
        ));
    }
    let lanes = if c.is_multiple_of(4) { 4 } else { 1 };
    let g = launch(ylen / lanes, BLOCK);
    let ix = index_type(xlen.max(ylen) as u128 * 4);
    let mut k = K::new(m, ix, g);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[n, oh, ow, c / v]);
            let [y0, y1, fy] = resize_tap(k, name, "y", mode, h, oh, &p[1]);
            let [x0, x1, fx] = resize_tap(k, name, "x", mode, w, ow, &p[2]);
            let ch = k.lin(0, &[(&p[3], v as i128)]);
            let img = k.lin(0, &[(&p[0], h as i128)]);
            let px = |k: &mut K, yy: &str, xx: &str| {
                let r = k.v(format!("add {ix} {img}, {yy}"));
                let e = k.lin(
                    0,
                    &[(&r, (w * c * 4) as i128), (xx, (c * 4) as i128), (&ch, 4)],
                );
                let ptr = k.at("%x", ix, &e);
                k.load(ft, &ptr, 4 * v)
            };
            let a00 = px(k, &y0, &x0);
            let out = if mode == ResizeMode::Nearest {
                a00
            } else {
                let a01 = px(k, &y0, &x1);
                let a10 = px(k, &y1, &x0);
                let a11 = px(k, &y1, &x1);
                let blend = |k: &mut K, a: &str, b: &str, f: &str| {
                    let fz = k.v(format!("fcmp oeq float {f}, 0.0"));
                    let fs = k.splat(f, v);
                    let d = k.v(format!("fsub {ft} {b}, {a}"));
                    let t = k.v(format!("fmul {ft} {fs}, {d}"));
                    let s = k.v(format!("fadd {ft} {a}, {t}"));
                    k.v(format!("select i1 {fz}, {ft} {a}, {ft} {s}"))
                };
                let r0 = blend(k, &a00, &a10, &fy);
                let r1 = blend(k, &a01, &a11, &fy);
                blend(k, &r0, &r1, &fx)
            };
            let yp = k.item_ptr(i, v);
            k.store(ft, &out, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        k.lanes_or_one(&["%x", "%y"], lanes, body);
    }
    let text = k.finish(name, &["%x", "%y"], 1);
    m.func(text);
    Ok(g)
}
