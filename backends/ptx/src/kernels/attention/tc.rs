//! The tensor-core attention kernel (f16 or bf16 products, f32
//! accumulation and softmax; sm_80 and newer).
//!
//! A block of 4 warps owns 64 query rows of one `(b, h)`, 16 per warp (an
//! m16 fragment), and walks the keys in tiles of 64. Shared memory (half
//! elements, rows padded by 8 so that the 8 row addresses of an `ldmatrix`
//! hit distinct banks): Q (`64 × (dp + 8)`, `dp` = `d` rounded up to 16),
//! the K tile (same shape) and the V tile (`64 × (dvp + 8)`, `dvp` = `dv`
//! rounded up to 16); features past `d`/`dv` and keys past `sk` are
//! staged as zeros.
//!
//! Q's A fragments are loaded once (`ldmatrix.x4`, `dp/16` of them) and
//! stay in registers. Per key tile: K and V → shared (rounded to the half
//! type), barrier; `S = Q·Kᵀ` as 8 n8 tiles per warp (K is stored key-major,
//! which is the B operand's column-major layout: plain `ldmatrix.x4` gives
//! the fragments of two n8 tiles); scale, mask, `-inf` past `sk`; the row
//! maxima over the thread's 16 values of each of its two rows (`g`, `g +
//! 8`), then over the quad (`shfl.sync.bfly` 1, 2); `p = 2^((s − m)·log2 e)`
//! (`ex2.approx`); the running sums stay per thread (reduced over the quad
//! at the end); the output fragments are rescaled and `P·V` added: the C
//! fragments of n8 tiles `2k, 2k + 1` rounded and packed are the A
//! fragment of keys `16k .. +16`, V's B fragments come from
//! `ldmatrix.x4.trans`. A barrier frees the tiles for the next one.
//! At the end `Y = o / l` for the rows and features that exist.
//!
//! Registers per thread: 32 score values, `dvp/2` output values and
//! `dp/4` Q fragment words (d = dv = 128: 32 + 64 + 32).

use super::{AttentionSpec, Emit, Tile, block, declare_common, mask_value, offset, stage, vec4};
use crate::irtext::{ModuleText, f32_lit};

/// Query rows per block.
pub(super) const ROWS: u64 = 64;
/// Keys per tile.
const KEYS: u64 = 64;
const NT: usize = (KEYS / 8) as usize;

/// Declarations of the tensor-core kernel.
fn declare(m: &mut ModuleText, bf16: bool) {
    for d in [
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))",
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16(ptr addrspace(3))",
        "declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)",
        "declare float @llvm.nvvm.ex2.approx.f32(float)",
    ] {
        m.declare(d);
    }
    m.declare(if bf16 {
        "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32, i32, i32, i32, i32, i32, float, float, float, float)"
    } else {
        "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, float, float, float, float)"
    });
}

/// The four registers of an `ldmatrix.x4` (`.trans` when `trans`) at byte
/// `addr` (i32) of shared memory.
fn ldmatrix(e: &mut Emit, addr: &str, trans: bool) -> [String; 4] {
    let p = e.smem(addr);
    let t = if trans { ".trans" } else { "" };
    let f = e.v(format!(
        "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4{t}.b16(ptr addrspace(3) {p})"
    ));
    [0, 1, 2, 3].map(|i| e.v(format!("extractvalue {{ i32, i32, i32, i32 }} {f}, {i}")))
}

/// `c += A·B` for one m16n8k16 fragment.
fn mma(e: &mut Emit, bf16: bool, a: &[String; 4], b: [&String; 2], c: &[String]) -> Vec<String> {
    let ops: Vec<&String> = a.iter().chain(b).collect();
    let (name, args) = if bf16 {
        let args: Vec<String> = ops.iter().map(|r| format!("i32 {r}")).collect();
        ("m16n8k16.row.col.bf16", args)
    } else {
        let args: Vec<String> = ops
            .iter()
            .map(|r| {
                let h = e.v(format!("bitcast i32 {r} to <2 x half>"));
                format!("<2 x half> {h}")
            })
            .collect();
        ("m16n8k16.row.col.f32.f32", args)
    };
    let d = e.v(format!(
        "call {{ float, float, float, float }} @llvm.nvvm.mma.{name}({}, float {}, float {}, float {}, float {})",
        args.join(", "),
        c[0],
        c[1],
        c[2],
        c[3]
    ));
    (0..4)
        .map(|i| {
            e.v(format!(
                "extractvalue {{ float, float, float, float }} {d}, {i}"
            ))
        })
        .collect()
}

/// Two floats rounded to the half type and packed (`lo` in the low half).
fn pack(e: &mut Emit, ty: &str, lo: &str, hi: &str) -> String {
    let v = e.v(format!(
        "insertelement <2 x float> poison, float {lo}, i32 0"
    ));
    let v = e.v(format!("insertelement <2 x float> {v}, float {hi}, i32 1"));
    let h = e.v(format!("fptrunc <2 x float> {v} to <2 x {ty}>"));
    e.v(format!("bitcast <2 x {ty}> {h} to i32"))
}

fn bfly(e: &mut Emit, x: &str, k: u32) -> String {
    e.v(format!(
        "call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float {x}, i32 {k}, i32 31)"
    ))
}

/// Writes the kernel body; returns the dynamic shared memory in bytes.
pub(super) fn emit(
    m: &mut ModuleText,
    e: &mut Emit,
    s: &AttentionSpec,
    tiles: u64,
    bf16: bool,
) -> u32 {
    declare_common(m);
    declare(m, bf16);
    let ty = if bf16 { "bfloat" } else { "half" };
    let blk = block(e, s, tiles, ROWS);
    let (tid, row0) = (blk.tid.clone(), blk.row0.clone());
    let (qb, kb, vb) = (&blk.bases[0], &blk.bases[1], &blk.bases[2]);
    let mb = s.mask.map(|_| &blk.bases[3]);
    let yb = blk.bases.last().unwrap();
    let (d, dv) = (s.d, s.dv);
    let dp = d.next_multiple_of(16).max(16);
    let dvp = dv.next_multiple_of(16);
    // Pitches in halves and region offsets in bytes.
    let (qp, vp) = (dp + 8, dvp + 8);
    let kreg = 64 * qp * 2;
    let vreg = 2 * kreg;
    let total = vreg + KEYS * vp * 2;
    let lane = e.v(format!("and i32 {tid}, 31"));
    let warp = e.v(format!("lshr i32 {tid}, 5"));
    let g = e.v(format!("lshr i32 {lane}, 2"));
    let q = e.v(format!("and i32 {lane}, 3"));
    let l15 = e.v(format!("and i32 {lane}, 15"));
    let l16 = e.v(format!("lshr i32 {lane}, 4"));
    let ext = |rows: u64, f: u64| [s.batch, s.heads, rows, f];
    // Stores `vals` (f32) rounded at tile row r, feature f0 of the region
    // at byte `reg` with pitch `pitch` halves.
    let put = |reg: u64, pitch: u64| {
        move |e: &mut Emit, r: &str, f0: &str, vals: &[String]| {
            let idx = e.v(format!("mul i32 {r}, {pitch}"));
            let idx = e.v(format!("add i32 {idx}, {f0}"));
            let b = e.v(format!("shl i32 {idx}, 1"));
            let b = e.v(format!("add i32 {b}, {reg}"));
            let p = e.smem(&b);
            let n = vals.len();
            if n == 1 {
                let h = e.v(format!("fptrunc float {} to {ty}", vals[0]));
                e.ins(format!("store {ty} {h}, ptr addrspace(3) {p}, align 2"));
            } else {
                let mut v = "poison".to_string();
                for (i, x) in vals.iter().enumerate() {
                    v = e.v(format!(
                        "insertelement <{n} x float> {v}, float {x}, i32 {i}"
                    ));
                }
                let h = e.v(format!("fptrunc <{n} x float> {v} to <{n} x {ty}>"));
                e.ins(format!(
                    "store <{n} x {ty}> {h}, ptr addrspace(3) {p}, align 8"
                ));
            }
        }
    };

    let qt = Tile {
        param: 0,
        base: qb,
        st: s.q,
        vec: s.aligned16 && vec4(s.q, ext(s.sq, d)),
        rows: ROWS,
        cols: dp,
        row0: &row0,
        nrows: s.sq,
        nfeat: d,
    };
    stage(e, &tid, &qt, put(0, qp));
    e.barrier();
    // Q's A fragments: lanes 0-15 address rows 0-15 of the warp's 16, at
    // feature 16·ks, lanes 16-31 the same rows 8 features on.
    let arow = e.v(format!("shl i32 {warp}, 4"));
    let arow = e.v(format!("add i32 {arow}, {l15}"));
    let abase = e.v(format!("mul i32 {arow}, {}", qp * 2));
    let a8 = e.v(format!("shl i32 {l16}, 4"));
    let abase = e.v(format!("add i32 {abase}, {a8}"));
    let qf: Vec<[String; 4]> = (0..dp / 16)
        .map(|ks| {
            let a = e.v(format!("add i32 {abase}, {}", ks * 32));
            ldmatrix(e, &a, false)
        })
        .collect();
    // K fragments (no .trans): matrix l/8 = (key half, feature half) =
    // (0,0) (0,8) (8,0) (8,8): b0 b1 of key tile 2np, then of 2np + 1.
    let kb8 = e.v(format!("lshr i32 {lane}, 4"));
    let kb8 = e.v(format!("shl i32 {kb8}, 3"));
    let l7 = e.v(format!("and i32 {lane}, 7"));
    let krow = e.v(format!("add i32 {kb8}, {l7}"));
    let kf = e.v(format!("lshr i32 {lane}, 3"));
    let kf = e.v(format!("and i32 {kf}, 1"));
    let kf = e.v(format!("shl i32 {kf}, 3"));
    let kbase = e.v(format!("mul i32 {krow}, {qp}"));
    let kbase = e.v(format!("add i32 {kbase}, {kf}"));
    let kbase = e.v(format!("shl i32 {kbase}, 1"));
    let kbase = e.v(format!("add i32 {kbase}, {kreg}"));
    // V fragments (.trans): lanes 0-15 address key rows 0-15 at feature
    // 16·np, lanes 16-31 at 16·np + 8: b0 b1 of n tile 2np, then 2np + 1.
    let vbase = e.v(format!("mul i32 {l15}, {vp}"));
    let v8 = e.v(format!("shl i32 {l16}, 3"));
    let vbase = e.v(format!("add i32 {vbase}, {v8}"));
    let vbase = e.v(format!("shl i32 {vbase}, 1"));
    let vbase = e.v(format!("add i32 {vbase}, {vreg}"));

    let no = (dvp / 2) as usize;
    let o = e.alloca(&format!("[{no} x float]"));
    let mp = e.alloca("[2 x float]");
    let lp = e.alloca("[2 x float]");
    let ninf = f32_lit(f32::NEG_INFINITY);
    let log2e = f32_lit(std::f32::consts::LOG2_E);
    for i in 0..no {
        let p = e.slot(&o, no, "float", i);
        e.st("float", "0.0", &p);
    }
    for h in 0..2 {
        let p = e.slot(&mp, 2, "float", h);
        e.st("float", &ninf, &p);
        let p = e.slot(&lp, 2, "float", h);
        e.st("float", "0.0", &p);
    }
    // This thread's rows: row0 + 16·warp + g (+ 8).
    let r0 = e.v(format!("shl i32 {warp}, 4"));
    let r0 = e.v(format!("add i32 {r0}, {g}"));
    let r0 = e.v(format!("add i32 {r0}, {row0}"));
    let rows: Vec<String> = (0..2)
        .map(|h| e.v(format!("add i32 {r0}, {}", 8 * h)))
        .collect();
    let q2 = e.v(format!("shl i32 {q}, 1"));

    if s.sk > 0 {
        let kt_n = s.sk.div_ceil(KEYS);
        e.repeat(&kt_n.to_string(), |e, kt| {
            let key0 = e.v(format!("mul i32 {kt}, {KEYS}"));
            let kt_tile = Tile {
                param: 1,
                base: kb,
                st: s.k,
                vec: s.aligned16 && vec4(s.k, ext(s.sk, d)),
                rows: KEYS,
                cols: dp,
                row0: &key0,
                nrows: s.sk,
                nfeat: d,
            };
            stage(e, &tid, &kt_tile, put(kreg, qp));
            let vt_tile = Tile {
                param: 2,
                base: vb,
                st: s.v,
                vec: s.aligned16 && vec4(s.v, ext(s.sk, dv)),
                rows: KEYS,
                cols: dvp,
                row0: &key0,
                nrows: s.sk,
                nfeat: dv,
            };
            stage(e, &tid, &vt_tile, put(vreg, vp));
            e.barrier();
            // S = Q·Kᵀ.
            let mut c: Vec<Vec<String>> = vec![vec!["0.0".to_string(); 4]; NT];
            for (ks, a) in qf.iter().enumerate() {
                for np in 0..NT / 2 {
                    let off = (np as u64 * 16 * qp + ks as u64 * 16) * 2;
                    let addr = e.v(format!("add i32 {kbase}, {off}"));
                    let [b0, b1, b2, b3] = ldmatrix(e, &addr, false);
                    c[2 * np] = mma(e, bf16, a, [&b0, &b1], &c[2 * np]);
                    c[2 * np + 1] = mma(e, bf16, a, [&b2, &b3], &c[2 * np + 1]);
                }
            }
            // Scores: element r of tile nt is row g + 8·(r/2), key
            // 8·nt + 2q + r%2.
            let kq = e.v(format!("add i32 {key0}, {q2}"));
            let mut sc = c.clone();
            for (nt, tile) in sc.iter_mut().enumerate() {
                for (r, x) in tile.iter_mut().enumerate() {
                    let key = e.v(format!("add i32 {kq}, {}", 8 * nt + r % 2));
                    *x = e.v(format!("fmul float {x}, {}", f32_lit(s.scale)));
                    if let Some(mv) = mask_value(e, s, mb, &rows[r / 2], &key) {
                        *x = e.v(format!("fadd float {x}, {mv}"));
                    }
                    if !s.sk.is_multiple_of(KEYS) {
                        let ok = e.v(format!("icmp ult i32 {key}, {}", s.sk));
                        *x = e.v(format!("select i1 {ok}, float {x}, float {ninf}"));
                    }
                }
            }
            let mut alphas = Vec::new();
            let mut m_uses = Vec::new();
            for h in 0..2 {
                let mut mx = ninf.clone();
                for tile in &sc {
                    for x in &tile[2 * h..2 * h + 2] {
                        mx = e.call2("maxnum", &mx, x);
                    }
                }
                for k in [1, 2] {
                    let o = bfly(e, &mx, k);
                    mx = e.call2("maxnum", &mx, &o);
                }
                let p = e.slot(&mp, 2, "float", h);
                let m_old = e.ld("float", &p);
                let m_new = e.call2("maxnum", &m_old, &mx);
                e.st("float", &m_new, &p);
                let none = e.v(format!("fcmp oeq float {m_new}, {ninf}"));
                let m_use = e.v(format!("select i1 {none}, float 0.0, float {m_new}"));
                let da = e.v(format!("fsub float {m_old}, {m_use}"));
                let da = e.v(format!("fmul float {da}, {log2e}"));
                alphas.push(e.v(format!("call float @llvm.nvvm.ex2.approx.f32(float {da})")));
                m_uses.push(m_use);
            }
            let mut sums = vec!["0.0".to_string(), "0.0".to_string()];
            for tile in sc.iter_mut() {
                for (r, x) in tile.iter_mut().enumerate() {
                    let dx = e.v(format!("fsub float {x}, {}", m_uses[r / 2]));
                    let dx = e.v(format!("fmul float {dx}, {log2e}"));
                    *x = e.v(format!("call float @llvm.nvvm.ex2.approx.f32(float {dx})"));
                    sums[r / 2] = e.v(format!("fadd float {}, {x}", sums[r / 2]));
                }
            }
            for h in 0..2 {
                let p = e.slot(&lp, 2, "float", h);
                let l = e.ld("float", &p);
                let l = e.v(format!(
                    "call float @llvm.fma.f32(float {l}, float {}, float {})",
                    alphas[h], sums[h]
                ));
                e.st("float", &l, &p);
            }
            // O = O·alpha + P·V.
            let mut acc: Vec<Vec<String>> = (0..no / 4)
                .map(|n| {
                    (0..4)
                        .map(|r| {
                            let p = e.slot(&o, no, "float", n * 4 + r);
                            let x = e.ld("float", &p);
                            e.v(format!("fmul float {x}, {}", alphas[r / 2]))
                        })
                        .collect()
                })
                .collect();
            for kk in 0..NT / 2 {
                let (t0, t1) = (&sc[2 * kk], &sc[2 * kk + 1]);
                let a = [
                    pack(e, ty, &t0[0], &t0[1]),
                    pack(e, ty, &t0[2], &t0[3]),
                    pack(e, ty, &t1[0], &t1[1]),
                    pack(e, ty, &t1[2], &t1[3]),
                ];
                for np in 0..(dvp / 16) as usize {
                    let off = (kk as u64 * 16 * vp + np as u64 * 16) * 2;
                    let addr = e.v(format!("add i32 {vbase}, {off}"));
                    let [b0, b1, b2, b3] = ldmatrix(e, &addr, true);
                    acc[2 * np] = mma(e, bf16, &a, [&b0, &b1], &acc[2 * np]);
                    acc[2 * np + 1] = mma(e, bf16, &a, [&b2, &b3], &acc[2 * np + 1]);
                }
            }
            for (n, tile) in acc.iter().enumerate() {
                for (r, x) in tile.iter().enumerate() {
                    let p = e.slot(&o, no, "float", n * 4 + r);
                    e.st("float", x, &p);
                }
            }
            e.barrier();
        });
    }
    // The quad's sums, then Y = o / l (0 without keys).
    let ls: Vec<Option<String>> = (0..2)
        .map(|h| {
            (s.sk > 0).then(|| {
                let p = e.slot(&lp, 2, "float", h);
                let mut l = e.ld("float", &p);
                for k in [1, 2] {
                    let o = bfly(e, &l, k);
                    l = e.v(format!("fadd float {l}, {o}"));
                }
                l
            })
        })
        .collect();
    let rok: Vec<String> = rows
        .iter()
        .map(|r| e.v(format!("icmp ult i32 {r}, {}", s.sq)))
        .collect();
    let ypi = blk.bases.len() - 1;
    for n in 0..no / 4 {
        for r in 0..4 {
            let col = e.v(format!("add i32 {q2}, {}", 8 * n + r % 2));
            let cok = e.v(format!("icmp ult i32 {col}, {dv}"));
            let ok = e.v(format!("and i1 {}, {cok}", rok[r / 2]));
            let p = e.slot(&o, no, "float", n * 4 + r);
            let x = e.ld("float", &p);
            let y = match &ls[r / 2] {
                Some(l) => e.v(format!("fdiv float {x}, {l}")),
                None => x,
            };
            let row = rows[r / 2].clone();
            e.when(&ok, |e| {
                let off = offset(e, yb, s.y, &row, &col, "true");
                e.store_y(&y, ypi, &off);
            });
        }
    }
    total as u32
}
