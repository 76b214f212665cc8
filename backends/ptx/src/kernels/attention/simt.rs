//! The fp32 attention kernel on the CUDA cores (every architecture).
//!
//! A block of 128 threads owns 32 query rows of one `(b, h)` and walks the
//! keys in tiles of 32. Shared memory (floats, in this order): `Qᵀ` (`d ×
//! 32`, staged once), one buffer for the K tile (`32 × ks`, `ks` = `d`
//! made odd so that 32 lanes reading 32 key rows hit 32 banks) and then the
//! V tile (`32 × dv`), the score/probability tile `Sᵀ` (`32 keys × 36`, rows
//! 16-byte aligned), the partial maxima and sums (`4 × 32` each), the rows'
//! rescale factors and final sums (32 each).
//!
//! Per key tile, five phases separated by barriers:
//! 1. K tile → shared.
//! 2. Scores: thread `t` computes key `t % 32` against rows `8·(t/32) ..
//!    +8` (a warp shares its rows, so Qᵀ reads are 16-byte broadcasts),
//!    scales, adds the mask, writes `-inf` for keys past `sk`.
//! 3. Row maxima: thread `t` scans keys `8·(t/32) .. +8` of row `t % 32`
//!    (conflict-free: a warp reads 32 consecutive rows); the V tile is
//!    staged meanwhile (K is no longer read).
//! 4. Each of a row's 4 threads combines the 4 partial maxima (all four
//!    compute the same running maximum), exponentiates its 8 scores in
//!    place and writes its partial sum; `t < 32` writes the row's rescale
//!    factor.
//! 5. Every thread updates its row's running sum; output: thread `t` holds
//!    rows `8·(t/32) .. +8` × features `t % 32 + 32·w`, rescales them and
//!    adds `Σ_j p·V` (probabilities as broadcasts, V conflict-free).
//!
//! A last barrier frees the buffers for the next tile. At the end `Y = o /
//! l` (IEEE division), stored where row and feature exist.

use super::{AttentionSpec, Emit, Tile, block, declare_common, mask_value, offset, stage, vec4};
use crate::irtext::{ModuleText, f32_lit};
use crate::pointwise::math::{self, MathFn};

/// Query rows per block.
pub(super) const ROWS: u64 = 32;
/// Keys per tile.
const KEYS: u64 = 32;
/// Row stride (floats) of the score tile.
const SP: u64 = 36;
/// Rows per thread in the score and output phases.
const RU: usize = 8;

fn sload(e: &mut Emit, idx: &str) -> String {
    let b = e.v(format!("shl i32 {idx}, 2"));
    let p = e.smem(&b);
    e.v(format!("load float, ptr addrspace(3) {p}, align 4"))
}

fn sstore(e: &mut Emit, x: &str, idx: &str) {
    let b = e.v(format!("shl i32 {idx}, 2"));
    let p = e.smem(&b);
    e.ins(format!("store float {x}, ptr addrspace(3) {p}, align 4"));
}

/// Floats `idx .. idx + 8` (16-byte aligned) as 8 values.
fn sload8(e: &mut Emit, idx: &str) -> Vec<String> {
    let mut out = Vec::new();
    for h in 0..2 {
        let b = e.v(format!("shl i32 {idx}, 2"));
        let b = e.v(format!("add i32 {b}, {}", h * 16));
        let p = e.smem(&b);
        let x = e.v(format!("load <4 x float>, ptr addrspace(3) {p}, align 16"));
        for i in 0..4 {
            out.push(e.v(format!("extractelement <4 x float> {x}, i32 {i}")));
        }
    }
    out
}

fn sstore8(e: &mut Emit, xs: &[String], idx: &str) {
    for h in 0..2 {
        let mut v = "poison".to_string();
        for i in 0..4 {
            v = e.v(format!(
                "insertelement <4 x float> {v}, float {}, i32 {i}",
                xs[h * 4 + i]
            ));
        }
        let b = e.v(format!("shl i32 {idx}, 2"));
        let b = e.v(format!("add i32 {b}, {}", h * 16));
        let p = e.smem(&b);
        e.ins(format!(
            "store <4 x float> {v}, ptr addrspace(3) {p}, align 16"
        ));
    }
}

/// Writes the kernel body; returns the dynamic shared memory in bytes.
pub(super) fn emit(m: &mut ModuleText, e: &mut Emit, s: &AttentionSpec, tiles: u64) -> u32 {
    declare_common(m);
    math::define(m, MathFn::Exp);
    // Four blocks per multiprocessor (at most 128 registers a thread):
    // without a bound ptxas picks 72 registers for sm_90 and spills.
    e.attrs = " \"nvvm.minctasm\"=\"4\"".to_string();
    let blk = block(e, s, tiles, ROWS);
    let (tid, row0) = (blk.tid.clone(), blk.row0.clone());
    let (qb, kb, vb) = (&blk.bases[0], &blk.bases[1], &blk.bases[2]);
    let mb = s.mask.map(|_| &blk.bases[3]);
    let yb = blk.bases.last().unwrap();
    let (d, dv) = (s.d, s.dv);
    let ks = if d.is_multiple_of(2) { d + 1 } else { d };
    let kvw = ks.max(dv);
    // Float offsets of the shared regions (each a multiple of 4).
    let kv = 32 * d;
    let sts = kv + KEYS * kvw;
    let red = sts + KEYS * SP;
    let red2 = red + 128;
    let alpha_s = red2 + 128;
    let lfin = alpha_s + 32;
    let total = lfin + 32;
    let lane = e.v(format!("and i32 {tid}, 31"));
    let warp = e.v(format!("lshr i32 {tid}, 5"));
    let i0 = e.v(format!("shl i32 {warp}, 3"));
    let nw = dv.div_ceil(32) as usize;
    let ext = |rows: u64, f: u64| [s.batch, s.heads, rows, f];

    // Qᵀ: element (row r, feature f) at float f·32 + r.
    if d > 0 {
        let t = Tile {
            param: 0,
            base: qb,
            st: s.q,
            vec: s.aligned16 && vec4(s.q, ext(s.sq, d)),
            rows: ROWS,
            cols: d,
            row0: &row0,
            nrows: s.sq,
            nfeat: d,
        };
        stage(e, &tid, &t, |e, r, f0, vals| {
            for (i, x) in vals.iter().enumerate() {
                let f = e.v(format!("add i32 {f0}, {i}"));
                let idx = e.v(format!("shl i32 {f}, 5"));
                let idx = e.v(format!("add i32 {idx}, {r}"));
                sstore(e, x, &idx);
            }
        });
    }

    let no = RU * nw;
    let o = e.alloca(&format!("[{no} x float]"));
    let mp = e.alloca("float");
    let lp = e.alloca("float");
    for i in 0..no {
        let p = e.slot(&o, no, "float", i);
        e.st("float", "0.0", &p);
    }
    e.st("float", &f32_lit(f32::NEG_INFINITY), &mp);
    e.st("float", "0.0", &lp);
    let ninf = f32_lit(f32::NEG_INFINITY);

    if s.sk > 0 {
        let kt_n = s.sk.div_ceil(KEYS);
        e.repeat(&kt_n.to_string(), |e, kt| {
            let key0 = e.v(format!("mul i32 {kt}, {KEYS}"));
            // 1. K tile: key r, feature f at float kv + r·ks + f.
            if d > 0 {
                let t = Tile {
                    param: 1,
                    base: kb,
                    st: s.k,
                    vec: s.aligned16 && vec4(s.k, ext(s.sk, d)),
                    rows: KEYS,
                    cols: d,
                    row0: &key0,
                    nrows: s.sk,
                    nfeat: d,
                };
                stage(e, &tid, &t, |e, r, f0, vals| {
                    let idx = e.v(format!("mul i32 {r}, {ks}"));
                    let idx = e.v(format!("add i32 {idx}, {f0}"));
                    for (i, x) in vals.iter().enumerate() {
                        let at = e.v(format!("add i32 {idx}, {}", kv + i as u64));
                        sstore(e, x, &at);
                    }
                });
            }
            e.barrier();
            // 2. Scores of key `lane`, rows i0 .. i0 + 8.
            let acc = e.alloca(&format!("[{RU} x float]"));
            for u in 0..RU {
                let p = e.slot(&acc, RU, "float", u);
                e.st("float", "0.0", &p);
            }
            if d > 0 {
                let krow = e.v(format!("mul i32 {lane}, {ks}"));
                let krow = e.v(format!("add i32 {krow}, {kv}"));
                e.repeat(&d.to_string(), |e, f| {
                    let ki = e.v(format!("add i32 {krow}, {f}"));
                    let kx = sload(e, &ki);
                    let qi = e.v(format!("shl i32 {f}, 5"));
                    let qi = e.v(format!("add i32 {qi}, {i0}"));
                    let qs = sload8(e, &qi);
                    for (u, q) in qs.iter().enumerate() {
                        let p = e.slot(&acc, RU, "float", u);
                        let a = e.ld("float", &p);
                        let a = e.v(format!(
                            "call float @llvm.fma.f32(float {q}, float {kx}, float {a})"
                        ));
                        e.st("float", &a, &p);
                    }
                });
            }
            let key = e.v(format!("add i32 {key0}, {lane}"));
            let kok =
                (!s.sk.is_multiple_of(KEYS)).then(|| e.v(format!("icmp ult i32 {key}, {}", s.sk)));
            let mut sv = Vec::new();
            for u in 0..RU {
                let p = e.slot(&acc, RU, "float", u);
                let a = e.ld("float", &p);
                let mut x = e.v(format!("fmul float {a}, {}", f32_lit(s.scale)));
                let row = e.v(format!("add i32 {row0}, {i0}"));
                let row = e.v(format!("add i32 {row}, {u}"));
                if let Some(mv) = mask_value(e, s, mb, &row, &key) {
                    x = e.v(format!("fadd float {x}, {mv}"));
                }
                if let Some(ok) = &kok {
                    x = e.v(format!("select i1 {ok}, float {x}, float {ninf}"));
                }
                sv.push(x);
            }
            let si = e.v(format!("mul i32 {lane}, {SP}"));
            let si = e.v(format!("add i32 {si}, {}", sts));
            let si = e.v(format!("add i32 {si}, {i0}"));
            sstore8(e, &sv, &si);
            e.barrier();
            // 3. Partial maxima of row `lane` over keys 8·warp .. +8.
            let mut xs = Vec::new();
            let mut idxs = Vec::new();
            let mut mx = ninf.clone();
            for v in 0..8u64 {
                let j = e.v(format!("shl i32 {warp}, 3"));
                let j = e.v(format!("add i32 {j}, {v}"));
                let idx = e.v(format!("mul i32 {j}, {SP}"));
                let idx = e.v(format!("add i32 {idx}, {lane}"));
                let idx = e.v(format!("add i32 {idx}, {sts}"));
                let x = sload(e, &idx);
                mx = e.call2("maxnum", &mx, &x);
                xs.push(x);
                idxs.push(idx);
            }
            let ri = e.v(format!("shl i32 {warp}, 5"));
            let ri = e.v(format!("add i32 {ri}, {lane}"));
            let r1 = e.v(format!("add i32 {ri}, {red}"));
            sstore(e, &mx, &r1);
            // The V tile: key r, feature f at float kv + r·dv + f.
            let t = Tile {
                param: 2,
                base: vb,
                st: s.v,
                vec: s.aligned16 && vec4(s.v, ext(s.sk, dv)),
                rows: KEYS,
                cols: dv,
                row0: &key0,
                nrows: s.sk,
                nfeat: dv,
            };
            stage(e, &tid, &t, |e, r, f0, vals| {
                let idx = e.v(format!("mul i32 {r}, {dv}"));
                let idx = e.v(format!("add i32 {idx}, {f0}"));
                let idx = e.v(format!("add i32 {idx}, {kv}"));
                if vals.len() == 4 {
                    let mut v = "poison".to_string();
                    for (i, x) in vals.iter().enumerate() {
                        v = e.v(format!("insertelement <4 x float> {v}, float {x}, i32 {i}"));
                    }
                    let b = e.v(format!("shl i32 {idx}, 2"));
                    let p = e.smem(&b);
                    e.ins(format!(
                        "store <4 x float> {v}, ptr addrspace(3) {p}, align 16"
                    ));
                } else {
                    sstore(e, &vals[0], &idx);
                }
            });
            e.barrier();
            // 4. The running maximum, probabilities, partial sums.
            let mut tm = ninf.clone();
            for q in 0..4 {
                let idx = e.v(format!("add i32 {lane}, {}", red + q * 32));
                let x = sload(e, &idx);
                tm = e.call2("maxnum", &tm, &x);
            }
            let m_old = e.ld("float", &mp);
            let m_new = e.call2("maxnum", &m_old, &tm);
            e.st("float", &m_new, &mp);
            let none = e.v(format!("fcmp oeq float {m_new}, {ninf}"));
            let m_use = e.v(format!("select i1 {none}, float 0.0, float {m_new}"));
            let da = e.v(format!("fsub float {m_old}, {m_use}"));
            let alpha = e.v(format!("call float @aoc.exp(float {da})"));
            let mut sum = "0.0".to_string();
            for (x, idx) in xs.iter().zip(&idxs) {
                let dx = e.v(format!("fsub float {x}, {m_use}"));
                let p = e.v(format!("call float @aoc.exp(float {dx})"));
                sstore(e, &p, idx);
                sum = e.v(format!("fadd float {sum}, {p}"));
            }
            let r2 = e.v(format!("add i32 {ri}, {red2}"));
            sstore(e, &sum, &r2);
            let first = e.v(format!("icmp eq i32 {warp}, 0"));
            e.when(&first, |e| {
                let ai = e.v(format!("add i32 {lane}, {alpha_s}"));
                sstore(e, &alpha, &ai);
            });
            e.barrier();
            // 5. Running sum of row `lane`; the output rows.
            let mut ts = "0.0".to_string();
            for q in 0..4 {
                let idx = e.v(format!("add i32 {lane}, {}", red2 + q * 32));
                let x = sload(e, &idx);
                ts = e.v(format!("fadd float {ts}, {x}"));
            }
            let l_old = e.ld("float", &lp);
            let l = e.v(format!(
                "call float @llvm.fma.f32(float {l_old}, float {alpha}, float {ts})"
            ));
            e.st("float", &l, &lp);
            let ai = e.v(format!("add i32 {i0}, {alpha_s}"));
            let al = sload8(e, &ai);
            for u in 0..RU {
                for w in 0..nw {
                    let p = e.slot(&o, no, "float", u * nw + w);
                    let x = e.ld("float", &p);
                    let x = e.v(format!("fmul float {x}, {}", al[u]));
                    e.st("float", &x, &p);
                }
            }
            let fcs: Vec<String> = (0..nw)
                .map(|w| {
                    let f = e.v(format!("add i32 {lane}, {}", 32 * w));
                    let f = e.v(format!("call i32 @llvm.umin.i32(i32 {f}, i32 {})", dv - 1));
                    e.v(format!("add i32 {f}, {kv}"))
                })
                .collect();
            e.repeat(&KEYS.to_string(), |e, j| {
                let pi = e.v(format!("mul i32 {j}, {SP}"));
                let pi = e.v(format!("add i32 {pi}, {i0}"));
                let pi = e.v(format!("add i32 {pi}, {sts}"));
                let ps = sload8(e, &pi);
                let vrow = e.v(format!("mul i32 {j}, {dv}"));
                let vs: Vec<String> = fcs
                    .iter()
                    .map(|fc| {
                        let idx = e.v(format!("add i32 {vrow}, {fc}"));
                        sload(e, &idx)
                    })
                    .collect();
                for u in 0..RU {
                    for w in 0..nw {
                        let p = e.slot(&o, no, "float", u * nw + w);
                        let x = e.ld("float", &p);
                        let x = e.v(format!(
                            "call float @llvm.fma.f32(float {}, float {}, float {x})",
                            ps[u], vs[w]
                        ));
                        e.st("float", &x, &p);
                    }
                }
            });
            e.barrier();
        });
        let first = e.v(format!("icmp eq i32 {warp}, 0"));
        e.when(&first, |e| {
            let l = e.ld("float", &lp);
            let li = e.v(format!("add i32 {lane}, {lfin}"));
            sstore(e, &l, &li);
        });
        e.barrier();
    }
    // Y = o / l where the row and feature exist (0 without keys).
    let ls = (s.sk > 0).then(|| {
        let li = e.v(format!("add i32 {i0}, {lfin}"));
        sload8(e, &li)
    });
    for u in 0..RU {
        let row = e.v(format!("add i32 {row0}, {i0}"));
        let row = e.v(format!("add i32 {row}, {u}"));
        let rok = e.v(format!("icmp ult i32 {row}, {}", s.sq));
        for w in 0..nw {
            let f = e.v(format!("add i32 {lane}, {}", 32 * w));
            let fok = e.v(format!("icmp ult i32 {f}, {dv}"));
            let ok = e.v(format!("and i1 {rok}, {fok}"));
            let p = e.slot(&o, no, "float", u * nw + w);
            let x = e.ld("float", &p);
            let y = match &ls {
                Some(ls) => e.v(format!("fdiv float {x}, {}", ls[u])),
                None => x,
            };
            e.when(&ok, |e| {
                let off = offset(e, yb, s.y, &row, &f, "true");
                e.store_y(&y, blk.bases.len() - 1, &off);
            });
        }
    }
    (total * 4) as u32
}
