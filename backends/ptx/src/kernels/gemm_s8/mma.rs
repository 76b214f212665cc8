//! The k loop over the `cp.async` ring, the tensor-core work (fragments
//! by `ldmatrix`, `mma.sync` m16n8k32) and the requantizing epilogue.

use super::{APath, BK, Gen, mma_suffix};
use crate::kernels::gemm_epilogue;

impl Gen<'_> {
    /// Byte offset of the stage of k-tile `k` (i32 value).
    fn stage_of(&mut self, k: &str) -> String {
        let j = self.v(format!("urem i32 {k}, {}", self.stages));
        self.v(format!("mul i32 {j}, {}", self.t.stage_bytes()))
    }

    /// Prologue: k-tiles `0 .. stages-1` start (one commit group each,
    /// empty past k), A tile 0 through registers on the staged path, a wait
    /// for this thread's copies of tile 0. K-tile `t`: barrier (tile `t`
    /// is visible to all; every warp is done with tile `t-1`, whose stage
    /// is free), start of tile `t+stages-1` into that stage, register
    /// loads of A tile `t+1` (for bytes: after the MMAs), the MMAs of tile
    /// `t`, the stores of A tile `t+1` into its stage (last read for tile `t+1-stages`, before this
    /// barrier), a wait until this thread's copies of tile `t+1` landed.
    pub(super) fn mainloop(&mut self, ktiles: u64, ktp: &str) {
        let st = self.stages;
        let sb = self.t.stage_bytes();
        for j in 0..st - 1 {
            if (j as u64) < ktiles {
                self.issue(&j.to_string(), &(j * sb).to_string());
            }
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
        let staged = match self.apath {
            APath::Async => None,
            APath::Staged(w) => Some(w),
        };
        if let Some(w) = staged {
            self.fetch_a("0", w);
            self.store_a("0");
        }
        let wait = format!("call void @llvm.nvvm.cp.async.wait.group(i32 {})", st - 2);
        self.ins(&wait);
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        let (lp, done) = (self.b.label("kloop"), self.b.label("kdone"));
        self.b.br(&lp);
        self.b.place(&lp);
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        let far = self.v(format!("add i32 {kt}, {}", st - 1));
        let has_far = self.v(format!("icmp ult i32 {far}, {ktiles}"));
        let fbase = self.stage_of(&far);
        self.guarded(&has_far, |g| g.issue(&far, &fbase));
        self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        let nk = self.v(format!("add i32 {kt}, 1"));
        let has = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        // Words are loaded before the MMAs (their latency hides behind
        // them); bytes after, as 16 loads per chunk held across the MMAs
        // would spill.
        let early = staged == Some(4);
        if early {
            self.guarded(&has, |g| g.fetch_a(&nk, 4));
        }
        let cbase = self.stage_of(&kt);
        self.compute(&cbase);
        if let Some(w) = staged {
            let nbase = self.stage_of(&nk);
            self.guarded(&has, |g| {
                if !early {
                    g.fetch_a(&nk, w);
                }
                g.store_a(&nbase)
            });
        }
        self.ins(&wait);
        self.ins(format!("store i32 {nk}, ptr {ktp}, align 4"));
        self.b.cond_br(&has, &lp, &done);
        self.b.place(&done);
    }

    /// The MMAs of the k-tile in the stage at byte `base`.
    fn compute(&mut self, base: &str) {
        let t = self.t;
        let (mi, ni) = self.frags();
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let wm = self.v(format!("udiv i32 {warp}, {}", t.warps_n));
        let wn = self.v(format!("urem i32 {warp}, {}", t.warps_n));
        let (wrows, wcols) = (t.bm / t.warps_m, t.bn / t.warps_n);
        // Every row a lane addresses is its base row (a multiple of 8)
        // plus `lane & 7` (or `lane & 15`), so its unit swizzle
        // `(row >> 1) & 3` is `(lane >> 1) & 3`.
        let key = self.v(format!("lshr i32 {lane}, 1"));
        let key = self.v(format!("and i32 {key}, 3"));
        // A: lanes 0-15 address rows 0-15 at k bytes 0-15 of the k32 step,
        // lanes 16-31 the same rows at bytes 16-31 (matrices a0 a1 a2 a3 =
        // rows 0-7 / 8-15 × bytes 0-15 / 16-31).
        let l15 = self.v(format!("and i32 {lane}, 15"));
        let ahi = self.v(format!("lshr i32 {lane}, 4"));
        let arow = self.v(format!("mul i32 {wm}, {wrows}"));
        let arow = self.v(format!("add i32 {arow}, {l15}"));
        let arow = self.v(format!("mul i32 {arow}, {BK}"));
        let arow = self.v(format!("add i32 {arow}, {base}"));
        // B (n rows of k bytes): lanes 0-7 n rows 0-7 at bytes 0-15, 8-15
        // the same rows at bytes 16-31, 16-31 likewise for n rows 8-15
        // (matrices b0 b1 of n-tile j, then of j + 1).
        let l7 = self.v(format!("and i32 {lane}, 7"));
        let bhi = self.v(format!("lshr i32 {lane}, 3"));
        let bhi = self.v(format!("and i32 {bhi}, 1"));
        let n8 = self.v(format!("lshr i32 {lane}, 4"));
        let n8 = self.v(format!("shl i32 {n8}, 3"));
        let brow = self.v(format!("mul i32 {wn}, {wcols}"));
        let brow = self.v(format!("add i32 {brow}, {l7}"));
        let brow = self.v(format!("add i32 {brow}, {n8}"));
        let brow = self.v(format!("add i32 {brow}, {}", t.bm));
        let brow = self.v(format!("mul i32 {brow}, {BK}"));
        let brow = self.v(format!("add i32 {brow}, {base}"));
        let smem = |g: &mut Self, row: &str, unit: &str, off: u32| {
            let o = g.v(format!("add i32 {row}, {unit}"));
            let o = g.v(format!("add i32 {o}, {off}"));
            g.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {o}"
            ))
        };
        let ldm = |g: &mut Self, p: &str| -> [String; 4] {
            let f = g.v(format!(
                "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3) {p})"
            ));
            [0, 1, 2, 3].map(|i| g.v(format!("extractvalue {{ i32, i32, i32, i32 }} {f}, {i}")))
        };
        for ks in 0..BK / 32 {
            // Swizzled byte offsets of this lane's units in the step.
            let au = self.v(format!("add i32 {ahi}, {}", 2 * ks));
            let au = self.v(format!("xor i32 {au}, {key}"));
            let au = self.v(format!("shl i32 {au}, 4"));
            let bu = self.v(format!("add i32 {bhi}, {}", 2 * ks));
            let bu = self.v(format!("xor i32 {bu}, {key}"));
            let bu = self.v(format!("shl i32 {bu}, 4"));
            let mut af = Vec::new();
            for m in 0..mi {
                let p = smem(self, &arow, &au, m * 16 * BK);
                af.push(ldm(self, &p));
            }
            let mut bf: Vec<[String; 2]> = Vec::new();
            for nj in 0..ni / 2 {
                let p = smem(self, &brow, &bu, nj * 16 * BK);
                let [r0, r1, r2, r3] = ldm(self, &p);
                bf.push([r0, r1]);
                bf.push([r2, r3]);
            }
            for (m, a) in af.iter().enumerate() {
                for (n, bv) in bf.iter().enumerate() {
                    self.mma((m as u32 * ni + n as u32) * 4, a, bv);
                }
            }
        }
    }

    /// `acc[base..base+4] += A·B` for one m16n8k32 fragment.
    fn mma(&mut self, base: u32, a: &[String; 4], bv: &[String; 2]) {
        let ptrs: Vec<String> = (0..4).map(|r| self.acc_ptr(base + r)).collect();
        let cs: Vec<String> = ptrs
            .iter()
            .map(|p| self.v(format!("load i32, ptr {p}, align 4")))
            .collect();
        let args: Vec<String> = a
            .iter()
            .chain(bv.iter())
            .chain(cs.iter())
            .map(|r| format!("i32 {r}"))
            .collect();
        let d = self.v(format!(
            "call {{ i32, i32, i32, i32 }} @llvm.nvvm.mma.m16n8k32.row.col.{}({})",
            mma_suffix(self.s.q.x_signed),
            args.join(", ")
        ));
        for (r, p) in ptrs.iter().enumerate() {
            let x = self.v(format!("extractvalue {{ i32, i32, i32, i32 }} {d}, {r}"));
            self.ins(format!("store i32 {x}, ptr {p}, align 4"));
        }
    }

    /// Requantizes accumulator `acc` of a column with `comp`, `scale`,
    /// `shift` (see the module doc): the output value as an i32.
    fn requant(&mut self, acc: &str, col: &(String, String, String, String)) -> String {
        let (_, comp, scale, shift) = col;
        gemm_epilogue::requantize(&mut self.b, &self.s.q, acc, [comp, scale, shift])
    }

    /// Requantization and the guarded byte stores. Accumulator `r` of
    /// fragment (m, n) is row `g + 8·(r/2)`, column `2q + r%2` of that
    /// m16n8 tile (`g = lane/4`, `q = lane%4`).
    pub(super) fn epilogue(&mut self) {
        let (t, s) = (self.t, self.s);
        let (mi, ni) = self.frags();
        let tid = self.tid.clone();
        let warp_tile = [t.bm / t.warps_m, t.bn / t.warps_n];
        let (bm0, bn0) = (&self.bm0, &self.bn0);
        let (lane, row0, col0) =
            gemm_epilogue::mma_origin(&mut self.b, &tid, t.warps_n, warp_tile, bm0, bn0);
        let grp = self.grp.clone();
        let gc = self.v(format!("mul i32 {grp}, {}", s.ocg()));
        // Per column j of this thread (8·(j/2) + j%2 past col0): in range,
        // comp, scale, shift (read at channel 0 where out of range).
        let mut cols = Vec::new();
        for j in 0..ni * 2 {
            let col = self.v(format!("add i32 {col0}, {}", (j / 2) * 8 + j % 2));
            let ok = self.v(format!("icmp ult i32 {col}, {}", s.ocg()));
            let o = self.v(format!("add i32 {gc}, {col}"));
            let o = self.v(format!("select i1 {ok}, i32 {o}, i32 0"));
            let o = self.v(format!("zext i32 {o} to i64"));
            let mut vals = Vec::new();
            for (p, ty) in [("%p2", "i32"), ("%p3", "float"), ("%p4", "float")] {
                let a = self.v(format!("getelementptr {ty}, ptr addrspace(1) {p}, i64 {o}"));
                vals.push(self.v(format!("load {ty}, ptr addrspace(1) {a}, align 4")));
            }
            let [comp, scale, shift] = [vals[0].clone(), vals[1].clone(), vals[2].clone()];
            cols.push((ok, comp, scale, shift));
        }
        let oc = s.geom.oc;
        let width = if oc.is_multiple_of(4) && s.ocg().is_multiple_of(4) {
            4
        } else if oc.is_multiple_of(2) && s.ocg().is_multiple_of(2) {
            2
        } else {
            1
        };
        // The byte offset of (row, col0 + dc) in y: row·oc + grp·ocg + col.
        let yt = self.yt;
        let gcy = self.widen(&gc, yt, false);
        let yoff = |g: &mut Self, row: &str, col: &str| {
            let r = g.widen(row, yt, false);
            let o = g.v(format!("mul {yt} {r}, {oc}"));
            let o = g.v(format!("add {yt} {o}, {gcy}"));
            let c = g.widen(col, yt, false);
            let o = g.v(format!("add {yt} {o}, {c}"));
            g.v(format!("getelementptr i8, ptr addrspace(1) %p5, {yt} {o}"))
        };
        let odd = self.v(format!("and i32 {lane}, 1"));
        let odd = self.v(format!("icmp ne i32 {odd}, 0"));
        for m in 0..mi {
            // Per half h: the row and whether it exists.
            let mut rows = Vec::new();
            for h in 0..2 {
                let row = self.v(format!("add i32 {row0}, {}", m * 16 + h * 8));
                let ok = self.v(format!("icmp ult i32 {row}, {}", s.m()));
                rows.push((row, ok));
            }
            for n in 0..ni {
                // Bytes [h][e] of fragment (m, n).
                let mut ys = [
                    [String::new(), String::new()],
                    [String::new(), String::new()],
                ];
                for (h, yh) in ys.iter_mut().enumerate() {
                    for (e, y) in yh.iter_mut().enumerate() {
                        let p = self.acc_ptr((m * ni + n) * 4 + h as u32 * 2 + e as u32);
                        let a = self.v(format!("load i32, ptr {p}, align 4"));
                        let col = cols[(n * 2) as usize + e].clone();
                        *y = self.requant(&a, &col);
                    }
                }
                let cok = cols[(n * 2) as usize].0.clone();
                let c0 = self.v(format!("add i32 {col0}, {}", n * 8));
                if width == 4 {
                    self.store4(&ys, &rows, &c0, &cok, &odd, &yoff);
                    continue;
                }
                for (h, (row, rok)) in rows.iter().enumerate() {
                    if width == 2 {
                        let ok = self.and(rok, &cok);
                        let w = self.pair(&ys[h][0], &ys[h][1]);
                        let w = self.v(format!("trunc i32 {w} to i16"));
                        let p = yoff(self, row, &c0);
                        self.guarded(&ok, |g| {
                            g.ins(format!("store i16 {w}, ptr addrspace(1) {p}, align 2"))
                        });
                        continue;
                    }
                    for e in 0..2 {
                        let cok = cols[(n * 2) as usize + e].0.clone();
                        let ok = self.and(rok, &cok);
                        let c = self.v(format!("add i32 {c0}, {e}"));
                        let b = self.v(format!("trunc i32 {} to i8", ys[h][e]));
                        let p = yoff(self, row, &c);
                        self.guarded(&ok, |g| {
                            g.ins(format!("store i8 {b}, ptr addrspace(1) {p}, align 1"))
                        });
                    }
                }
            }
        }
    }

    /// Bytes `lo`, `hi` (i32 values in a byte's range) as the low 16 bits
    /// of an i32, `lo` first in memory.
    fn pair(&mut self, lo: &str, hi: &str) -> String {
        let lo = self.v(format!("and i32 {lo}, 255"));
        let hi = self.v(format!("and i32 {hi}, 255"));
        let hi = self.v(format!("shl i32 {hi}, 8"));
        self.v(format!("or i32 {lo}, {hi}"))
    }

    /// 4-byte stores of fragment bytes `ys[h][e]` (row `rows[h]`, column
    /// `c0 + e`, `c0 = col0 + 8n`): lanes `q` and `q ^ 1` swap halves, so
    /// an even `q` stores row 0's columns `c0 .. c0+4` and an odd `q` row
    /// 8's columns `c0-2 .. c0+2` (both start at a multiple of 4: `ocg`
    /// and `oc` are, so a word is all in range or all out).
    fn store4(
        &mut self,
        ys: &[[String; 2]; 2],
        rows: &[(String, String)],
        c0: &str,
        cok: &str,
        odd: &str,
        yoff: &dyn Fn(&mut Self, &str, &str) -> String,
    ) {
        let p0 = self.pair(&ys[0][0], &ys[0][1]);
        let p1 = self.pair(&ys[1][0], &ys[1][1]);
        // Even lanes give away row 8's pair, odd lanes row 0's.
        let give = self.v(format!("select i1 {odd}, i32 {p0}, i32 {p1}"));
        let got = self.v(format!(
            "call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 {give}, i32 1, i32 31)"
        ));
        let keep = self.v(format!("select i1 {odd}, i32 {p1}, i32 {p0}"));
        let (lo, hi) = (
            self.v(format!("select i1 {odd}, i32 {got}, i32 {keep}")),
            self.v(format!("select i1 {odd}, i32 {keep}, i32 {got}")),
        );
        let hi = self.v(format!("shl i32 {hi}, 16"));
        let word = self.v(format!("or i32 {lo}, {hi}"));
        let row = self.v(format!(
            "select i1 {odd}, i32 {}, i32 {}",
            rows[1].0, rows[0].0
        ));
        let rok = self.v(format!(
            "select i1 {odd}, i1 {}, i1 {}",
            rows[1].1, rows[0].1
        ));
        let c = self.v(format!("add i32 {c0}, -2"));
        let c = self.v(format!("select i1 {odd}, i32 {c}, i32 {c0}"));
        // The partner's first column is in range exactly when ours is.
        let ok = self.and(&rok, cok);
        let p = yoff(self, &row, &c);
        self.guarded(&ok, |g| {
            g.ins(format!("store i32 {word}, ptr addrspace(1) {p}, align 4"))
        });
    }
}
