//! The kernel's code: [`Gen`] writes the body of one `gemm_f32` kernel.
//!
//! This file owns the skeleton of the body and the arithmetic on it: the
//! index helpers every part uses (folding constants so that guards and
//! offsets the shape makes trivial vanish), the block → tile decode in
//! groups of `GROUP_M` row tiles, the batch loop past grid.z's limit, the
//! double-buffered k pipeline and the inner product out of shared memory.
//! The operand loads are in `load`, the C side (bias, k-group reduction,
//! stores) in `epilogue`.
//!
//! Invariants:
//! - Offsets are formed in `Gen::it` (i32 or i64, chosen from
//!   `Problem::max_index`), shared-memory indices in i32.
//! - Buffer 0 is at float 0 and buffer 1 at `stage_floats`; the first
//!   (partial) k-tile goes to buffer 0 and tile `t` to buffer `t mod 2`, so
//!   every shared offset in the loop is a constant. One barrier per k-tile
//!   separates its stores from the next multiply.
//! - The sums of a thread are added in a fixed order (k ascending within a
//!   group), and the last k-tile's sums are pinned before the epilogue.

use super::load::{Operand, Slot};
use super::problem::Problem;
use super::{MAX_Z, SimtTile};
use crate::irtext::Body;

/// Row tiles per group of the block order (L2 reuse).
const GROUP_M: u64 = 8;

/// One kernel being written: its body so far, the problem, the tile and
/// the index type every offset is formed in.
pub(super) struct Gen<'a> {
    pub(super) b: Body,
    pub(super) p: &'a Problem,
    pub(super) t: SimtTile,
    /// The index type.
    pub(super) it: &'static str,
    /// The epilogue helper to call on each element before it is stored.
    pub(super) epi: Option<String>,
}

impl Gen<'_> {
    pub(super) fn v(&mut self, rhs: String) -> String {
        self.b.v(rhs)
    }

    /// An i32 value (non-negative) in the index type.
    pub(super) fn widen(&mut self, x: &str) -> String {
        if self.it == "i32" {
            x.to_string()
        } else {
            self.v(format!("zext i32 {x} to i64"))
        }
    }

    /// `x + y` in the index type, folding zeros.
    pub(super) fn add(&mut self, x: &str, y: &str) -> String {
        match (x, y) {
            ("0", _) => y.to_string(),
            (_, "0") => x.to_string(),
            _ => self.v(format!("add {} {x}, {y}", self.it)),
        }
    }

    /// `x · c` in the index type, folding 0 and 1.
    pub(super) fn mulc(&mut self, x: &str, c: u64) -> String {
        match c {
            0 => "0".to_string(),
            1 => x.to_string(),
            _ => self.v(format!("mul {} {x}, {c}", self.it)),
        }
    }

    pub(super) fn and_all(&mut self, conds: &[Option<String>]) -> Option<String> {
        let mut acc: Option<String> = None;
        for c in conds.iter().flatten() {
            acc = Some(match acc {
                None => c.clone(),
                Some(a) => self.v(format!("and i1 {a}, {c}")),
            });
        }
        acc
    }

    /// The kernel body (after `entry:`).
    pub(super) fn kernel(&mut self) -> String {
        let (p, t) = (self.p, self.t);
        let [opa, opb] = self.operands();
        let tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()".into());
        let pid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()".into());
        let (tmi, tni) = self.decode_tile(&pid);
        let i0 = self.v(format!("mul i32 {tmi}, {}", t.bm));
        let j0 = self.v(format!("mul i32 {tni}, {}", t.bn));
        let ntx = t.bn / t.tn;
        let nty = t.bm / t.tm;
        let (wa, wb) = (t.tm.min(4), t.tn.min(4));
        // k group `grp` multiplies rows grp·bk/ks .. of every k-tile.
        let gt = t.group_threads();
        let (lt, grp) = if t.ks > 1 {
            (
                self.v(format!("urem i32 {tid}, {gt}")),
                self.v(format!("udiv i32 {tid}, {gt}")),
            )
        } else {
            (tid.clone(), "0".to_string())
        };
        let kg = t.bk / t.ks;
        let ty = self.v(format!("udiv i32 {lt}, {ntx}"));
        let tx = self.v(format!("urem i32 {lt}, {ntx}"));
        let a_rd = self.v(format!("mul i32 {ty}, {wa}"));
        let a_k = self.v(format!("mul i32 {grp}, {}", kg * t.pitch_a()));
        let a_rd = self.v(format!("add i32 {a_rd}, {a_k}"));
        let b_rd = self.v(format!("mul i32 {tx}, {wb}"));
        let b_k = self.v(format!("mul i32 {grp}, {}", kg * t.pitch_b()));
        let b_rd = self.v(format!("add i32 {b_rd}, {b_k}"));
        let b_rd = self.v(format!("add i32 {b_rd}, {}", opb.smem_off));

        // The batch: grid.z, looping when there are more than 65535.
        let bz = if p.batch > 1 {
            self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()".into())
        } else {
            "0".to_string()
        };
        let looped = p.batch > MAX_Z;
        let bat = if looped {
            self.b.br("bat.pre");
            self.b.place("bat.pre");
            self.b.br("bat");
            self.b.place("bat");
            self.b.ins(format!(
                "%bat.i = phi i32 [ {bz}, %bat.pre ], [ %bat.next, %bat.latch ]"
            ));
            "%bat.i".to_string()
        } else {
            bz
        };
        let batw = self.widen(&bat);

        let i0w = self.widen(&i0);
        let j0w = self.widen(&j0);
        let sa = self.slots(&opa, &tid, &i0w, &batw);
        let sb = self.slots(&opb, &tid, &j0w, &batw);

        let ktiles = p.k.div_ceil(u64::from(t.bk));
        let sf = t.stage_floats();
        let cols = self.columns(&tx, &j0w, ntx, wb);
        let is0 = (t.ks > 1).then(|| self.v(format!("icmp eq i32 {grp}, 0")));
        let init = self.acc_init(&cols, &batw, is0.as_deref());
        let mut acc = init.clone();
        if ktiles > 0 {
            // The first k-tile starts at `k − ktiles·bk` (≤ 0): it holds the
            // partial one, so only the prologue's loads check k.
            let kfirst = p.k as i64 - (ktiles * u64::from(t.bk)) as i64;
            let ra = self.load(&opa, &sa, &kfirst.to_string(), kfirst < 0);
            let rb = self.load(&opb, &sb, &kfirst.to_string(), kfirst < 0);
            self.store(&opa, &sa, &ra, "0");
            self.store(&opb, &sb, &rb, "0");
            self.barrier();
            // Steps t = 0 .. ktiles-2 (prefetch tile t+1, multiply tile t),
            // two per loop iteration so that buffer offsets are constants.
            let ops = [opa, opb];
            let slots = [sa, sb];
            let rd = (a_rd.as_str(), b_rd.as_str());
            let steps = ktiles - 1;
            let k0_of = |g: &mut Self, tile: &str| {
                let k0 = g.mulc(tile, u64::from(t.bk));
                g.add(&k0, &kfirst.to_string())
            };
            if steps >= 2 {
                self.b.br("kpre");
                self.b.place("kpre");
                self.b.br("kloop");
                self.b.place("kloop");
                self.b
                    .ins("%kp = phi i32 [ 0, %kpre ], [ %kp.next, %kloop ]");
                let mut phis = Vec::new();
                let mut next = Vec::new();
                for (i, x) in init.iter().enumerate() {
                    self.b.ins(format!(
                        "%acc.{i} = phi float [ {x}, %kpre ], [ %accn.{i}, %kloop ]"
                    ));
                    phis.push(format!("%acc.{i}"));
                    next.push(format!("%accn.{i}"));
                }
                let kt = self.v("shl i32 %kp, 1".into());
                let kt = self.widen(&kt);
                let t1 = self.add(&kt, "1");
                let k0 = k0_of(self, &t1);
                let mid = self.step(&ops, &slots, &k0, 0, sf, rd, &phis, None);
                let t2 = self.add(&kt, "2");
                let k0 = k0_of(self, &t2);
                self.step(&ops, &slots, &k0, sf, 0, rd, &mid, Some(&next));
                self.b.ins("%kp.next = add i32 %kp, 1");
                let more = self.v(format!("icmp ult i32 %kp.next, {}", steps / 2));
                self.b.cond_br(&more, "kloop", "kdone");
                self.b.place("kdone");
                acc = next;
            }
            if steps % 2 == 1 {
                let k0 = (kfirst + (steps * u64::from(t.bk)) as i64).to_string();
                acc = self.step(&ops, &slots, &k0, 0, sf, rd, &acc, None);
            }
            let last = ((ktiles - 1) % 2) as u32 * sf;
            acc = self.compute(&last.to_string(), &a_rd, &b_rd, &acc, None);
            // Pin the sums here: otherwise LLVM sinks the last k-tile's
            // fma chains into the guarded stores below, which keeps every
            // fragment of that tile live at once (hundreds of registers).
            for x in acc.iter_mut() {
                *x = self.v(format!(
                    "call float asm sideeffect \"\", \"=f,0\"(float {x})"
                ));
            }
        }
        if let Some(is0) = &is0 {
            // Groups 1.. hand their sums to group 0, which stores C.
            if ktiles > 0 {
                acc = self.reduce(&acc, is0, &grp, &lt);
            }
            self.b.cond_br(is0, "epi", "epi.done");
            self.b.place("epi");
        }
        self.epilogue(&acc, &cols, &ty, &i0w, &batw, nty, wa);
        if t.ks > 1 {
            self.b.br("epi.done");
            self.b.place("epi.done");
        }

        if looped {
            self.b.br("bat.latch");
            self.b.place("bat.latch");
            // The next batch's first stores reuse buffer 0.
            self.barrier();
            self.b.ins(format!("%bat.next = add i32 %bat.i, {MAX_Z}"));
            let more = self.v(format!("icmp ult i32 %bat.next, {}", p.batch));
            self.b.cond_br(&more, "bat", "done");
            self.b.place("done");
        }
        self.b.ins("ret void");
        std::mem::take(&mut self.b).into_text()
    }

    /// One pipeline step: load the k-tile at `k0` into registers, multiply
    /// the buffer at float offset `cs`, store the registers into the
    /// buffer at `ss`, barrier.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        ops: &[Operand; 2],
        slots: &[Vec<Slot>; 2],
        k0: &str,
        cs: u32,
        ss: u32,
        rd: (&str, &str),
        acc: &[String],
        names: Option<&[String]>,
    ) -> Vec<String> {
        let ra = self.load(&ops[0], &slots[0], k0, false);
        let rb = self.load(&ops[1], &slots[1], k0, false);
        let acc = self.compute(&cs.to_string(), rd.0, rd.1, acc, names);
        self.store(&ops[0], &slots[0], &ra, &ss.to_string());
        self.store(&ops[1], &slots[1], &rb, &ss.to_string());
        self.barrier();
        acc
    }
    pub(super) fn barrier(&mut self) {
        self.b
            .ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    }

    /// Block `pid` → (row tile, column tile): groups of `GROUP_M` row tiles,
    /// row tiles fastest within a group.
    fn decode_tile(&mut self, pid: &str) -> (String, String) {
        let (p, t) = (self.p, self.t);
        let tiles_m = p.m.div_ceil(u64::from(t.bm));
        let tiles_n = p.n.div_ceil(u64::from(t.bn));
        let gm = GROUP_M.min(tiles_m);
        let width = gm * tiles_n;
        let groups = tiles_m.div_ceil(gm);
        let last_g = tiles_m - (groups - 1) * gm;
        let grp = self.v(format!("udiv i32 {pid}, {width}"));
        let first = self.v(format!("mul i32 {grp}, {gm}"));
        let local = self.v(format!("urem i32 {pid}, {width}"));
        let mut tmo = self.v(format!("urem i32 {local}, {gm}"));
        let mut tno = self.v(format!("udiv i32 {local}, {gm}"));
        if last_g != gm {
            let is_last = self.v(format!("icmp eq i32 {grp}, {}", groups - 1));
            let lm = self.v(format!("urem i32 {local}, {last_g}"));
            let ln = self.v(format!("udiv i32 {local}, {last_g}"));
            tmo = self.v(format!("select i1 {is_last}, i32 {lm}, i32 {tmo}"));
            tno = self.v(format!("select i1 {is_last}, i32 {ln}, i32 {tno}"));
        }
        let tmi = self.v(format!("add i32 {first}, {tmo}"));
        (tmi, tno)
    }

    /// The load units of this thread for `op`; `d0` is the tile's first
    /// Loads `n` floats in groups of `w` from shared row `kk` at `base`;
    /// group `g` starts `g·gap` floats on.
    fn frag(&mut self, base: &str, off: u32, n: u32, w: u32, gap: u32) -> Vec<String> {
        let mut out = Vec::new();
        for g in 0..n / w {
            let p = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) {base}, i32 {}",
                off + g * gap
            ));
            if w == 1 {
                out.push(self.v(format!("load float, ptr addrspace(3) {p}, align 4")));
            } else {
                let x = self.v(format!(
                    "load <{w} x float>, ptr addrspace(3) {p}, align {}",
                    4 * w
                ));
                for q in 0..w {
                    out.push(self.v(format!("extractelement <{w} x float> {x}, i32 {q}")));
                }
            }
        }
        out
    }

    /// Multiplies the shared buffer at float offset `soff` into `acc`;
    /// with `names`, the final values get those names.
    fn compute(
        &mut self,
        soff: &str,
        a_rd: &str,
        b_rd: &str,
        acc: &[String],
        names: Option<&[String]>,
    ) -> Vec<String> {
        let t = self.t;
        let (wa, wb) = (t.tm.min(4), t.tn.min(4));
        let (nty, ntx) = (t.bm / t.tm, t.bn / t.tn);
        let ai = self.v(format!("add i32 {a_rd}, {soff}"));
        let pa = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {ai}"
        ));
        let bi = self.v(format!("add i32 {b_rd}, {soff}"));
        let pb = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {bi}"
        ));
        let mut acc = acc.to_vec();
        for kk in 0..t.bk / t.ks {
            let a = self.frag(&pa, kk * t.pitch_a(), t.tm, wa, wa * nty);
            let bv = self.frag(&pb, kk * t.pitch_b(), t.tn, wb, wb * ntx);
            for (r, ar) in a.iter().enumerate() {
                for (c, bc) in bv.iter().enumerate() {
                    let i = r * t.tn as usize + c;
                    let rhs = format!(
                        "call float @llvm.fma.f32(float {ar}, float {bc}, float {})",
                        acc[i]
                    );
                    acc[i] = match names {
                        Some(n) if kk == t.bk / t.ks - 1 => {
                            self.b.ins(format!("{} = {rhs}", n[i]));
                            n[i].clone()
                        }
                        _ => self.v(rhs),
                    };
                }
            }
        }
        acc
    }
}
