//! Moving operand tiles into shared memory: each thread's 16-byte chunks,
//! their rows' data, `cp.async` of A and B, and A through registers.

use super::{APath, ARow, BK, Gen, Pos};
use crate::kernels::conv_index;

impl Gen<'_> {
    /// This thread's chunks of a `rows × 64`-byte tile: four 16-byte units
    /// per row, consecutive threads on consecutive units of a row, then
    /// rows (`threads` divides `4·rows`, checked with the tile).
    pub(super) fn positions(&mut self, rows: u32) -> Vec<Pos> {
        let threads = self.t.threads();
        let step = threads / 4;
        let tid = self.tid.clone();
        let u = self.v(format!("and i32 {tid}, 3"));
        let r0 = self.v(format!("lshr i32 {tid}, 2"));
        (0..rows / step)
            .map(|p| {
                let r = self.v(format!("add i32 {r0}, {}", p * step));
                Pos { r, u: u.clone() }
            })
            .collect()
    }

    /// Per-chunk row data of A (pixel, range) and B (packed weight row).
    pub(super) fn rows(&mut self) {
        let s = self.s;
        let g = s.geom;
        let grp = self.grp.clone();
        let xt = self.xt;
        let grpx = self.widen(&grp, xt, false);
        for i in 0..self.apos.len() {
            let r = self.apos[i].r.clone();
            let row = self.v(format!("add i32 {}, {r}", self.bm0));
            let ok = self.v(format!("icmp ult i32 {row}, {}", s.m()));
            let (iy, ix, off) = conv_index::pixel(&mut self.b, &g, &row, &grpx, xt);
            self.arow.push(ARow { ok, off, iy, ix });
        }
        for i in 0..self.bpos.len() {
            let r = self.bpos[i].r.clone();
            let col = self.v(format!("add i32 {}, {r}", self.bn0));
            let ok = self.v(format!("icmp ult i32 {col}, {}", s.ocg()));
            // Packed row grp·ocg + col, `Kp` bytes each.
            let o = self.v(format!("mul i32 {grp}, {}", s.ocg()));
            let o = self.v(format!("add i32 {o}, {col}"));
            let wt = self.wt;
            let o = self.widen(&o, wt, false);
            let off = self.v(format!("mul {wt} {o}, {}", s.kp()));
            self.brow.push((ok, off));
        }
    }

    /// The i32 value `v` as an offset of type `ty` (i32: itself).
    pub(super) fn widen(&mut self, v: &str, ty: &str, signed: bool) -> String {
        conv_index::widen(&mut self.b, v, ty, signed)
    }

    /// Shared address of unit `u` of row `r` in the tile at byte `base`:
    /// rows of 64 bytes, unit `u` at `u ^ ((r >> 1) & 3)`.
    pub(super) fn swz(&mut self, base: &str, r: &str, u: &str) -> String {
        let key = self.v(format!("lshr i32 {r}, 1"));
        let key = self.v(format!("and i32 {key}, 3"));
        let pu = self.v(format!("xor i32 {u}, {key}"));
        let pu = self.v(format!("shl i32 {pu}, 4"));
        let o = self.v(format!("mul i32 {r}, {BK}"));
        let o = self.v(format!("add i32 {o}, {pu}"));
        let o = self.v(format!("add i32 {o}, {base}"));
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {o}"
        ))
    }

    /// Where the `w` bytes at k-tile byte `k0 + 16u + e` of A chunk `i`
    /// lie: whether they are in the image (`inside`: row and k in range,
    /// tap inside; else the value is `x_zero`) and their byte offset in x
    /// (meaningful only where `inside`).
    fn a_at(&mut self, i: usize, k0: &str, e: u32) -> (String, String) {
        let s = self.s;
        let g = s.geom;
        let u = self.apos[i].u.clone();
        let ARow { ok, off, iy, ix } = &self.arow[i];
        let (ok, off, iy0, ix0) = (ok.clone(), off.clone(), iy.clone(), ix.clone());
        let kk = self.v(format!("shl i32 {u}, 4"));
        let kk = self.v(format!("add i32 {kk}, {k0}"));
        let kk = self.v(format!("add i32 {kk}, {e}"));
        let kin = self.v(format!("icmp ult i32 {kk}, {}", s.k()));
        // `w` bytes never cross a tap.
        let (dy, dx, ci, yin, xin) = conv_index::tap(&mut self.b, &g, &kk, &iy0, &ix0);
        let inside = self.and(&ok, &kin);
        let inside = self.and(&inside, &yin);
        let inside = self.and(&inside, &xin);
        let xt = self.xt;
        let o = conv_index::tap_offset(&mut self.b, &g, [&dy, &dx, &ci], &off, xt);
        (inside, o)
    }

    /// The four bytes `x_zero` as an i32.
    fn zero_word(&self) -> i32 {
        (self.s.q.x_zero as u8 as u32 * 0x0101_0101) as i32
    }

    /// Starts k-tile `kt` into the stage at byte `base` (not committed):
    /// `cp.async` of B, and of A on the async path (padding chunks stored
    /// as `x_zero` bytes directly).
    pub(super) fn issue(&mut self, kt: &str, base: &str) {
        let k0 = self.v(format!("mul i32 {kt}, {BK}"));
        if self.apath == APath::Async {
            for i in 0..self.apos.len() {
                self.async_a(i, &k0, base);
            }
        }
        let bbase = self.v(format!("add i32 {base}, {}", self.t.bm * BK));
        for i in 0..self.bpos.len() {
            let (r, u) = (self.bpos[i].r.clone(), self.bpos[i].u.clone());
            let (ok, off) = self.brow[i].clone();
            let kk = self.v(format!("shl i32 {u}, 4"));
            let kk = self.v(format!("add i32 {kk}, {k0}"));
            let kin = self.v(format!("icmp ult i32 {kk}, {}", self.s.kp()));
            let ok = self.and(&ok, &kin);
            let wt = self.wt;
            let kkw = self.widen(&kk, wt, false);
            let o = self.v(format!("add {wt} {off}, {kkw}"));
            let dst = self.swz(&bbase, &r, &u);
            self.copy16(&dst, "%p1", wt, &o, &ok);
        }
    }

    /// `cp.async` of 16 bytes at byte `off` of `src` to `dst` where `ok`,
    /// else 16 zero bytes (source size 0, address clamped to the first
    /// byte).
    fn copy16(&mut self, dst: &str, src: &str, ty: &str, off: &str, ok: &str) {
        let bytes = self.v(format!("select i1 {ok}, i32 16, i32 0"));
        let o = self.v(format!("select i1 {ok}, {ty} {off}, {ty} 0"));
        let p = self.v(format!(
            "getelementptr i8, ptr addrspace(1) {src}, {ty} {o}"
        ));
        self.ins(format!(
            "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {p}, i32 {bytes})"
        ));
    }

    /// A chunk `i` of k-tile byte `k0` by `cp.async` (16 channels of one
    /// tap): a chunk in the padding of a row that exists is `x_zero`
    /// bytes, stored here (a zero-filling copy would give 0); rows past
    /// `M` and k past `K` copy zeros (B is zero there, the rows are not
    /// stored).
    fn async_a(&mut self, i: usize, k0: &str, base: &str) {
        let (r, u) = (self.apos[i].r.clone(), self.apos[i].u.clone());
        let (inside, off) = self.a_at(i, k0, 0);
        let dst = self.swz(base, &r, &u);
        let z = self.zero_word();
        if z == 0 {
            self.copy16(&dst, "%p0", self.xt, &off, &inside);
            return;
        }
        // Padding: the row exists, k < K, the tap lies outside.
        let kk = self.v(format!("shl i32 {u}, 4"));
        let kk = self.v(format!("add i32 {kk}, {k0}"));
        let kin = self.v(format!("icmp ult i32 {kk}, {}", self.s.k()));
        let real = self.and(&self.arow[i].ok.clone(), &kin);
        let out = self.v(format!("xor i1 {inside}, true"));
        let pad = self.and(&real, &out);
        self.if_else(
            &pad,
            |g| {
                g.ins(format!(
                    "store <4 x i32> <i32 {z}, i32 {z}, i32 {z}, i32 {z}>, ptr addrspace(3) {dst}, align 16"
                ))
            },
            |g| g.copy16(&dst, "%p0", g.xt, &off, &inside),
        );
    }

    /// Global loads of this thread's A chunks of k-tile `kt` into their
    /// slots (staged path): words of `w` bytes, `x_zero` where outside the
    /// image (and for rows past `M`, k past `K`: B is zero there).
    pub(super) fn fetch_a(&mut self, kt: &str, w: u32) {
        let k0 = self.v(format!("mul i32 {kt}, {BK}"));
        let zw = self.zero_word();
        let zb = self.s.q.x_zero as u8 as i8;
        for i in 0..self.apos.len() {
            let mut words = Vec::new();
            for e in (0..16).step_by(w as usize) {
                let (inside, off) = self.a_at(i, &k0, e);
                let xt = self.xt;
                let o = self.v(format!("select i1 {inside}, {xt} {off}, {xt} 0"));
                let p = self.v(format!("getelementptr i8, ptr addrspace(1) %p0, {xt} {o}"));
                let ty = if w == 4 { "i32" } else { "i8" };
                let x = self.v(format!("load {ty}, ptr addrspace(1) {p}, align {w}"));
                let z = if w == 4 {
                    zw.to_string()
                } else {
                    zb.to_string()
                };
                words.push(self.v(format!("select i1 {inside}, {ty} {x}, {ty} {z}")));
            }
            let mut v = "poison".to_string();
            if w == 4 {
                for (j, x) in words.iter().enumerate() {
                    v = self.v(format!("insertelement <4 x i32> {v}, i32 {x}, i32 {j}"));
                }
            } else {
                for (j, x) in words.iter().enumerate() {
                    v = self.v(format!("insertelement <16 x i8> {v}, i8 {x}, i32 {j}"));
                }
                v = self.v(format!("bitcast <16 x i8> {v} to <4 x i32>"));
            }
            let slot = self.aslot[i].clone();
            self.ins(format!("store <4 x i32> {v}, ptr {slot}, align 16"));
        }
    }

    /// Stores this thread's staged A chunks into the A tile of the stage
    /// at byte `base`.
    pub(super) fn store_a(&mut self, base: &str) {
        for i in 0..self.apos.len() {
            let slot = self.aslot[i].clone();
            let x = self.v(format!("load <4 x i32>, ptr {slot}, align 16"));
            let (r, u) = (self.apos[i].r.clone(), self.apos[i].u.clone());
            let dst = self.swz(base, &r, &u);
            self.ins(format!(
                "store <4 x i32> {x}, ptr addrspace(3) {dst}, align 16"
            ));
        }
    }
}
