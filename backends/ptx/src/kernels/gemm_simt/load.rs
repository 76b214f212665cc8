//! The operands' path from global memory into the shared k-tiles.
//!
//! [`Gen::operands`] decides per operand how its k-tile is read (16-byte
//! or scalar loads, which dimension consecutive threads walk) and where it
//! sits in a shared buffer; [`Gen::slots`] fixes each thread's load units
//! once (their shared index and the k-independent part of their global
//! offset, for a convolution the row's top-left input corner);
//! [`Gen::load`] reads a k-tile into registers and [`Gen::store`] writes
//! them into a shared buffer, k-major (`[kk][row]`, `[kk][col]`).
//!
//! Invariants:
//! - 16-byte loads only where four consecutive elements are contiguous and
//!   stay 16-byte aligned (`aligned16`, a unit stride, the extent along it
//!   and the other strides multiples of 4; for a convolution, the channels
//!   and the channels per group multiples of 4).
//! - [`SimtTile::check`](super::SimtTile::check) makes each operand tile
//!   split evenly among the threads, so every load unit of a k-tile (one
//!   element, or four) is read and stored by exactly one thread.
//! - An out-of-range element (row/column past the matrix, k below 0 in the
//!   first k-tile, a convolution tap outside the image) has its offset
//!   replaced by 0 before the address is formed and its value by 0 after
//!   the load: no branch, no out-of-bounds address. Checks the shape makes
//!   unnecessary are not emitted.
//! - The k part of a global offset (and for a convolution the tap's input
//!   offset) is derived once per distinct k offset within a k-tile, not per
//!   load.

use std::collections::HashMap;

use super::emit::Gen;
use super::problem::{ASrc, ConvA};

/// How one operand's k-tile moves from global to shared memory.
pub(super) struct Operand {
    ptr: &'static str,
    /// The tile extent along the operand's non-k dimension (bm or bn).
    dim: u32,
    /// The matrix extent along it (m or n).
    extent: u64,
    /// 16-byte loads of four consecutive elements.
    pub(super) vec: bool,
    /// Consecutive threads walk k (else the row/column dimension); with
    /// `vec`, the four elements are consecutive in k.
    kfast: bool,
    /// Float offset of the operand's region in a shared buffer.
    pub(super) smem_off: u32,
    pitch: u32,
    /// `[batch, non-k, k]` strides, for a strided operand.
    strides: [u64; 3],
    conv: Option<ConvA>,
}

/// One load unit of a thread: fixed position in the tile.
pub(super) struct Slot {
    /// i32 float index in shared buffer 0.
    sidx: String,
    /// Offset (index type) within the k-tile.
    kl: String,
    /// Element offset without the k part (index type).
    base: String,
    /// The row/column is inside the matrix (absent: statically true).
    valid: Option<String>,
    /// Convolution: the row's top-left input coordinates.
    iy0: String,
    ix0: String,
}

impl Gen<'_> {
    pub(super) fn operands(&self) -> [Operand; 2] {
        let (p, t) = (self.p, &self.t);
        let (a_vec, a_kfast, a_strides, conv) = match p.a {
            ASrc::Strided([s0, s1, s2]) => {
                let v = p.aligned16 && s0 % 4 == 0;
                if v && s2 == 1 && p.k % 4 == 0 && s1 % 4 == 0 {
                    (true, true, [s0, s1, s2], None)
                } else if v && s1 == 1 && p.m % 4 == 0 && s2 % 4 == 0 {
                    (true, false, [s0, s1, s2], None)
                } else {
                    (false, s2 <= s1, [s0, s1, s2], None)
                }
            }
            ASrc::Conv(g) => {
                let v = p.aligned16 && g.cg % 4 == 0 && g.g.c % 4 == 0;
                (v, true, [0; 3], Some(g))
            }
        };
        let [s0, s1, s2] = p.b;
        let v = p.aligned16 && s0 % 4 == 0;
        let (b_vec, b_kfast) = if v && s2 == 1 && p.n % 4 == 0 && s1 % 4 == 0 {
            (true, false)
        } else if v && s1 == 1 && p.k % 4 == 0 && s2 % 4 == 0 {
            (true, true)
        } else {
            (false, s1 < s2)
        };
        [
            Operand {
                ptr: "%pa",
                dim: t.bm,
                extent: p.m,
                vec: a_vec,
                kfast: a_kfast,
                smem_off: 0,
                pitch: t.pitch_a(),
                strides: a_strides,
                conv,
            },
            Operand {
                ptr: "%pb",
                dim: t.bn,
                extent: p.n,
                vec: b_vec,
                kfast: b_kfast,
                smem_off: t.bk * t.pitch_a(),
                pitch: t.pitch_b(),
                strides: [s0, s2, s1],
                conv: None,
            },
        ]
    }

    /// row/column, `bat` the batch (index type).
    pub(super) fn slots(&mut self, op: &Operand, tid: &str, d0: &str, bat: &str) -> Vec<Slot> {
        let t = self.t;
        let threads = t.threads();
        let vw = if op.vec { 4 } else { 1 };
        let count = op.dim * t.bk / vw / threads;
        let per_row = if op.kfast { t.bk / vw } else { op.dim / vw };
        let step = threads / per_row;
        let lane = self.v(format!("urem i32 {tid}, {per_row}"));
        let lane = self.v(format!("mul i32 {lane}, {vw}"));
        let row = self.v(format!("udiv i32 {tid}, {per_row}"));
        let batch_off = match op.conv {
            Some(g) => self.mulc(bat, g.cg),
            None => self.mulc(bat, op.strides[0]),
        };
        let mut out = Vec::new();
        for s in 0..count {
            let r = self.v(format!("add i32 {row}, {}", s * step));
            let (d, kl) = if op.kfast {
                (r, lane.clone())
            } else {
                (lane.clone(), r)
            };
            let si = self.v(format!("mul i32 {kl}, {}", op.pitch));
            let si = self.v(format!("add i32 {si}, {d}"));
            let sidx = self.v(format!("add i32 {si}, {}", op.smem_off));
            let kl = self.widen(&kl);
            let dw = self.widen(&d);
            let gd = self.add(d0, &dw);
            let valid = if !op.extent.is_multiple_of(u64::from(op.dim)) {
                Some(self.v(format!("icmp ult {} {gd}, {}", self.it, op.extent)))
            } else {
                None
            };
            let it = self.it;
            let (base, iy0, ix0) = match op.conv {
                None => {
                    let o = self.mulc(&gd, op.strides[1]);
                    (self.add(&batch_off, &o), String::new(), String::new())
                }
                Some(a) => {
                    let g = a.g;
                    // Row gd = (img·oh + oy)·ow + ox.
                    let img = self.v(format!("udiv {it} {gd}, {}", a.ohw));
                    let pix = self.v(format!("urem {it} {gd}, {}", a.ohw));
                    let oy = self.v(format!("udiv {it} {pix}, {}", g.ow));
                    let ox = self.v(format!("urem {it} {pix}, {}", g.ow));
                    let iy0 = self.mulc(&oy, g.stride[0]);
                    let iy0 = self.v(format!("sub {it} {iy0}, {}", g.pads[0]));
                    let ix0 = self.mulc(&ox, g.stride[1]);
                    let ix0 = self.v(format!("sub {it} {ix0}, {}", g.pads[1]));
                    let ib = self.mulc(&img, g.h * g.w * g.c);
                    let pos = self.mulc(&iy0, g.w);
                    let pos = self.add(&pos, &ix0);
                    let pos = self.mulc(&pos, g.c);
                    let base = self.add(&ib, &pos);
                    (self.add(&base, &batch_off), iy0, ix0)
                }
            };
            out.push(Slot {
                sidx,
                kl,
                base,
                valid,
                iy0,
                ix0,
            });
        }
        out
    }

    /// Loads the k-tile starting at `k0` (index type, may be negative)
    /// into registers; with `kcheck`, columns below 0 read as zero.
    pub(super) fn load(
        &mut self,
        op: &Operand,
        slots: &[Slot],
        k0: &str,
        kcheck: bool,
    ) -> Vec<String> {
        let it = self.it;
        // Per distinct k offset: (k term of the offset, dy, dx, k valid).
        let mut kterms: HashMap<String, (String, String, String, Option<String>)> = HashMap::new();
        let mut vals = Vec::new();
        for s in slots {
            let term = match kterms.get(&s.kl) {
                Some(x) => x.clone(),
                None => {
                    let kk = self.add(k0, &s.kl);
                    let kv = kcheck.then(|| self.v(format!("icmp sge {it} {kk}, 0")));
                    let x = match op.conv {
                        None => (self.mulc(&kk, op.strides[2]), "0".into(), "0".into(), kv),
                        Some(a) if a.g.kh * a.g.kw == 1 => (kk, "0".into(), "0".into(), kv),
                        Some(a) => {
                            let g = a.g;
                            let tap = self.v(format!("udiv {it} {kk}, {}", a.cg));
                            let tc = self.mulc(&tap, a.cg);
                            let ci = self.v(format!("sub {it} {kk}, {tc}"));
                            let ky = self.v(format!("udiv {it} {tap}, {}", g.kw));
                            let kyw = self.mulc(&ky, g.kw);
                            let kx = self.v(format!("sub {it} {tap}, {kyw}"));
                            let dy = self.mulc(&ky, g.dilation[0]);
                            let dx = self.mulc(&kx, g.dilation[1]);
                            let o = self.mulc(&dy, g.w);
                            let o = self.add(&o, &dx);
                            let o = self.mulc(&o, g.c);
                            (self.add(&o, &ci), dy, dx, kv)
                        }
                    };
                    kterms.insert(s.kl.clone(), x.clone());
                    x
                }
            };
            let (koff, dy, dx, kv) = term;
            let mut conds = vec![s.valid.clone(), kv];
            if let Some(a) = op.conv {
                if a.check_y {
                    let iy = self.add(&s.iy0, &dy);
                    conds.push(Some(self.v(format!("icmp ult {it} {iy}, {}", a.g.h))));
                }
                if a.check_x {
                    let ix = self.add(&s.ix0, &dx);
                    conds.push(Some(self.v(format!("icmp ult {it} {ix}, {}", a.g.w))));
                }
            }
            let valid = self.and_all(&conds);
            let mut off = self.add(&s.base, &koff);
            if let Some(v) = &valid {
                off = self.v(format!("select i1 {v}, {it} {off}, {it} 0"));
            }
            let ptr = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(1) {}, {it} {off}",
                op.ptr
            ));
            let (ty, align, zero) = if op.vec {
                ("<4 x float>", 16, "zeroinitializer")
            } else {
                ("float", 4, "0.0")
            };
            let mut x = self.v(format!("load {ty}, ptr addrspace(1) {ptr}, align {align}"));
            if let Some(v) = &valid {
                x = self.v(format!("select i1 {v}, {ty} {x}, {ty} {zero}"));
            }
            vals.push(x);
        }
        vals
    }

    /// Stores loaded values into the shared buffer at float offset `soff`.
    pub(super) fn store(&mut self, op: &Operand, slots: &[Slot], vals: &[String], soff: &str) {
        for (s, x) in slots.iter().zip(vals) {
            let idx = if soff == "0" {
                s.sidx.clone()
            } else {
                self.v(format!("add i32 {}, {soff}", s.sidx))
            };
            let p = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {idx}"
            ));
            if !op.vec {
                self.b
                    .ins(format!("store float {x}, ptr addrspace(3) {p}, align 4"));
            } else if !op.kfast {
                self.b.ins(format!(
                    "store <4 x float> {x}, ptr addrspace(3) {p}, align 16"
                ));
            } else {
                for q in 0..4 {
                    let e = self.v(format!("extractelement <4 x float> {x}, i32 {q}"));
                    let pq = self.v(format!(
                        "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                        q * op.pitch
                    ));
                    self.b
                        .ins(format!("store float {e}, ptr addrspace(3) {pq}, align 4"));
                }
            }
        }
    }
}
