//! The kernel skeleton (batch loop, k-tile pipeline) and the tensor-core
//! work: fragments from shared memory, `mma.sync`, and the epilogue.

use super::{Gen, Layout, MAX_Z, Path, TcPrecision};
use crate::kernels::gemm_epilogue;

impl Gen<'_> {
    pub(super) fn kernel(&mut self) {
        let (t, s) = (self.t, self.s);
        let nacc = self.nacc();
        self.acc = self.v(format!("alloca [{nacc} x float], align 4"));
        let ktp = self.v("alloca i32, align 4");
        let bzp = self.v("alloca i32, align 4");
        self.tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
        let bx = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
        let bz = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()");
        let ntn = s.n.div_ceil(t.bn as u64);
        let mt = self.v(format!("udiv i32 {bx}, {ntn}"));
        let nt = self.v(format!("urem i32 {bx}, {ntn}"));
        self.bm0 = self.v(format!("mul i32 {mt}, {}", t.bm));
        self.bn0 = self.v(format!("mul i32 {nt}, {}", t.bn));
        self.apos = self.positions(self.amap);
        self.bpos = self.positions(self.bmap);
        for _ in 0..self.apos.len() {
            let ty = self.chunk_ty(true);
            let a = self.v(format!("alloca {ty}, align 16"));
            self.aslot.push(a);
        }
        if self.bpath == Path::Staged {
            for _ in 0..self.bpos.len() {
                let ty = self.chunk_ty(false);
                let a = self.v(format!("alloca {ty}, align 16"));
                self.bslot.push(a);
            }
        }
        // Batches beyond grid.z come round again (a loop only then).
        let looped = s.batch > MAX_Z;
        self.ins(format!("store i32 {bz}, ptr {bzp}, align 4"));
        self.b.br("batch");
        self.b.place("batch");
        let bz32 = self.v(format!("load i32, ptr {bzp}, align 4"));
        self.bz = self.v(format!("zext i32 {bz32} to i64"));
        self.rows_and_cols();
        for i in 0..nacc {
            let p = self.acc_ptr(i);
            self.ins(format!("store float 0.0, ptr {p}, align 4"));
        }
        let ktiles = s.k.div_ceil(t.bk as u64);
        match (ktiles > 0, self.layout) {
            (false, _) => {}
            (true, Layout::Pairs) => self.mainloop(ktiles, &ktp),
            (true, Layout::Ring | Layout::RingA) => self.mainloop_ring(ktiles, &ktp),
        }
        self.epilogue();
        if looped {
            let nb = self.v(format!("add i32 {bz32}, {MAX_Z}"));
            self.ins(format!("store i32 {nb}, ptr {bzp}, align 4"));
            let more = self.v(format!("icmp ult i32 {nb}, {}", s.batch));
            // Shared memory of this batch's last tile is read until here.
            self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
            self.b.cond_br(&more, "batch", "exit");
        } else {
            self.b.br("exit");
        }
        self.b.place("exit");
        self.ins("ret void");
    }

    /// Prologue (tile 0 into stage 0) and the k loop: prefetch tile t+1
    /// into registers (or `cp.async` it into the other stage), multiply
    /// tile t, store the prefetched tile, barrier.
    fn mainloop(&mut self, ktiles: u64, ktp: &str) {
        let sb = self.t.stage_bytes(self.p);
        let ab = self.t.a_bytes(self.p);
        self.fetch("0", &ab.to_string());
        self.stage("0", &ab.to_string());
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        self.b.br("loop");
        self.b.place("loop");
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        let nk = self.v(format!("add i32 {kt}, 1"));
        let has = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        let noff = self.v(format!("and i32 {nk}, 1"));
        let noff = self.v(format!("mul i32 {noff}, {sb}"));
        let coff = self.v(format!("and i32 {kt}, 1"));
        let coff = self.v(format!("mul i32 {coff}, {sb}"));
        let nboff = self.v(format!("add i32 {noff}, {ab}"));
        let cboff = self.v(format!("add i32 {coff}, {ab}"));
        self.b.cond_br(&has, "pre", "mma");
        self.b.place("pre");
        self.fetch(&nk, &nboff);
        self.b.br("mma");
        self.b.place("mma");
        self.compute(&coff, &cboff);
        self.b.cond_br(&has, "put", "next");
        self.b.place("put");
        self.stage(&noff, &nboff);
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        self.b.br("next");
        self.b.place("next");
        self.ins(format!("store i32 {nk}, ptr {ktp}, align 4"));
        self.b.cond_br(&has, "loop", "epilogue");
        self.b.place("epilogue");
    }

    /// The MMAs of one k-tile: A at byte `a_off`, B at byte `b_off` of
    /// shared memory.
    pub(super) fn compute(&mut self, a_off: &str, b_off: &str) {
        let (t, p) = (self.t, self.p);
        let (mi, ni) = self.frags();
        let (es, pa, pb) = (p.size(), t.pa(p), t.pb(p));
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let wm = self.v(format!("udiv i32 {warp}, {}", t.warps_n));
        let wn = self.v(format!("urem i32 {warp}, {}", t.warps_n));
        let (wrows, wcols) = (t.bm / t.warps_m, t.bn / t.warps_n);
        // ldmatrix rows: lanes 0-15 address rows 0-15 of the first 16 bytes
        // of k, lanes 16-31 the same rows 16 bytes on (matrices a0 a1 a2 a3
        // = rows 0-7 / 8-15 × k 0-7 / 8-15 for f16, k 0-3 / 4-7 for tf32).
        let l15 = self.v(format!("and i32 {lane}, 15"));
        let l16 = self.v(format!("lshr i32 {lane}, 4"));
        let arow = self.v(format!("mul i32 {wm}, {wrows}"));
        let arow = self.v(format!("add i32 {arow}, {l15}"));
        let abase = self.v(format!("mul i32 {arow}, {}", pa * es));
        let half16 = self.v(format!("shl i32 {l16}, 4"));
        let abase = self.v(format!("add i32 {abase}, {half16}"));
        let abase = self.v(format!("add i32 {abase}, {a_off}"));
        let bcol0 = self.v(format!("mul i32 {wn}, {wcols}"));
        let bbase = if p == TcPrecision::Tf32 {
            // b0 = B[k = q][n = g], b1 = B[k = q + 4][n = g].
            let g = self.v(format!("lshr i32 {lane}, 2"));
            let q = self.v(format!("and i32 {lane}, 3"));
            let o = self.v(format!("mul i32 {q}, {pb}"));
            let o = self.v(format!("add i32 {o}, {bcol0}"));
            self.v(format!("add i32 {o}, {g}"))
        } else {
            // .trans: lanes 0-15 address k rows 0-15 at n 0, lanes 16-31 at
            // n 8 (matrices b0 b1 of n-tile j, then of j + 1).
            let o = self.v(format!("mul i32 {l15}, {pb}"));
            let o = self.v(format!("add i32 {o}, {bcol0}"));
            let n8 = self.v(format!("shl i32 {l16}, 3"));
            self.v(format!("add i32 {o}, {n8}"))
        };
        let bbase = self.v(format!("mul i32 {bbase}, {es}"));
        let bbase = self.v(format!("add i32 {bbase}, {b_off}"));
        let smem = |g: &mut Self, base: &str, off: u32| {
            let o = g.v(format!("add i32 {base}, {off}"));
            g.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {o}"
            ))
        };
        let regs = |g: &mut Self, f: &str| -> [String; 4] {
            [0, 1, 2, 3].map(|i| g.v(format!("extractvalue {{ i32, i32, i32, i32 }} {f}, {i}")))
        };
        let kstep = p.mma_k();
        for ks in 0..t.bk / kstep {
            let mut af = Vec::new();
            for m in 0..mi {
                let a = smem(self, &abase, m * 16 * pa * es + ks * 32);
                let f = self.v(format!(
                    "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3) {a})"
                ));
                af.push(regs(self, &f));
            }
            let mut bf: Vec<[String; 2]> = Vec::new();
            if p == TcPrecision::Tf32 {
                for n in 0..ni {
                    let mut two = Vec::new();
                    for h in 0..2 {
                        let off = ((ks * 8 + h * 4) * pb + n * 8) * 4;
                        let a = smem(self, &bbase, off);
                        two.push(self.v(format!("load i32, ptr addrspace(3) {a}, align 4")));
                    }
                    bf.push([two[0].clone(), two[1].clone()]);
                }
            } else {
                for nj in 0..ni / 2 {
                    let a = smem(self, &bbase, (ks * 16 * pb + nj * 16) * 2);
                    let f = self.v(format!(
                        "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16(ptr addrspace(3) {a})"
                    ));
                    let [r0, r1, r2, r3] = regs(self, &f);
                    bf.push([r0, r1]);
                    bf.push([r2, r3]);
                }
            }
            for (m, a) in af.iter().enumerate() {
                for (n, bv) in bf.iter().enumerate() {
                    self.mma((m as u32 * ni + n as u32) * 4, a, bv);
                }
            }
        }
    }

    /// `acc[base..base+4] += A·B` for one fragment.
    fn mma(&mut self, base: u32, a: &[String; 4], bv: &[String; 2]) {
        let ptrs: Vec<String> = (0..4).map(|r| self.acc_ptr(base + r)).collect();
        let cs: Vec<String> = ptrs
            .iter()
            .map(|p| self.v(format!("load float, ptr {p}, align 4")))
            .collect();
        let ops: Vec<String> = a.iter().chain(bv.iter()).cloned().collect();
        let args = match self.p {
            TcPrecision::F16 => {
                let hs: Vec<String> = ops
                    .iter()
                    .map(|r| {
                        let h = self.v(format!("bitcast i32 {r} to <2 x half>"));
                        format!("<2 x half> {h}")
                    })
                    .collect();
                hs.join(", ")
            }
            _ => ops
                .iter()
                .map(|r| format!("i32 {r}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let name = match self.p {
            TcPrecision::F16 => "m16n8k16.row.col.f32.f32",
            TcPrecision::Bf16 => "m16n8k16.row.col.bf16",
            TcPrecision::Tf32 => "m16n8k8.row.col.tf32",
        };
        let d = self.v(format!(
            "call {{ float, float, float, float }} @llvm.nvvm.mma.{name}({args}, float {}, float {}, float {}, float {})",
            cs[0], cs[1], cs[2], cs[3]
        ));
        for (r, p) in ptrs.iter().enumerate() {
            let x = self.v(format!(
                "extractvalue {{ float, float, float, float }} {d}, {r}"
            ));
            self.ins(format!("store float {x}, ptr {p}, align 4"));
        }
    }

    /// Bias, relu, the pointwise epilogue and the guarded stores.
    /// Accumulator `r` of fragment (mi, ni) is row `g + 8·(r/2)`, column
    /// `2q + r%2` of that m16n8 tile (`g = lane/4`, `q = lane%4`). The
    /// epilogue's offsets come from the same `row`, `col` and `bz` values
    /// that address the store, so they cannot disagree with it.
    fn epilogue(&mut self) {
        let (t, s) = (self.t, self.s);
        let (mi, ni) = self.frags();
        let tid = self.tid.clone();
        let bz = self.bz.clone();
        let warp_tile = [t.bm / t.warps_m, t.bn / t.warps_n];
        let (bm0, bn0) = (&self.bm0, &self.bn0);
        let (_, row0, col0) =
            gemm_epilogue::mma_origin(&mut self.b, &tid, t.warps_n, warp_tile, bm0, bn0);
        let [cb, cr, cc] = s.c_strides;
        let cbase = self.v(format!("mul i64 {bz}, {cb}"));
        // Column j of this thread: 8·(j/2) + j%2 past col0.
        let mut cols = Vec::new();
        for j in 0..ni * 2 {
            let col = self.v(format!("add i32 {col0}, {}", (j / 2) * 8 + j % 2));
            let ok = self.v(format!("icmp ult i32 {col}, {}", s.n));
            // No `+ 0.0` without bias: it would turn -0.0 into 0.0.
            let bias = s.bias.map(|st| {
                let c64 = self.v(format!("zext i32 {col} to i64"));
                let o = self.v(format!("mul i64 {bz}, {st}"));
                let o = self.v(format!("add i64 {o}, {c64}"));
                let o = self.v(format!("select i1 {ok}, i64 {o}, i64 0"));
                let p = self.v(format!(
                    "getelementptr float, ptr addrspace(1) %p2, i64 {o}"
                ));
                self.v(format!("load float, ptr addrspace(1) {p}, align 4"))
            });
            let c64 = self.v(format!("zext i32 {col} to i64"));
            let co = self.v(format!("mul i64 {c64}, {cc}"));
            cols.push((col, ok, bias, co));
        }
        let keeps = |st: u64, ext: u64| st.is_multiple_of(2) || ext <= 1;
        let pairs = s.aligned16
            && (cc == 1 || s.n <= 1)
            && s.n.is_multiple_of(2)
            && keeps(cr, s.m)
            && keeps(cb, s.batch);
        let cp = if s.bias.is_some() { "%p3" } else { "%p2" };
        // Per epilogue operand: the offset of this thread's first element
        // (row0, col0); element (row0 + dr, col0 + dc) is `dr·s1 + dc·s2`
        // past it, a constant, so its loads take immediate offsets.
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), Some(&bz), &row0, &col0);
        for m in 0..mi {
            for h in 0..2 {
                let row = self.v(format!("add i32 {row0}, {}", m * 16 + h * 8));
                let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
                let r64 = self.v(format!("zext i32 {row} to i64"));
                let ro = self.v(format!("mul i64 {r64}, {cr}"));
                let ro = self.v(format!("add i64 {ro}, {cbase}"));
                for n in 0..ni {
                    let mut xs = Vec::new();
                    for e in 0..2 {
                        let ai = (m * ni + n) * 4 + h * 2 + e;
                        let ap = self.acc_ptr(ai);
                        let x = self.v(format!("load float, ptr {ap}, align 4"));
                        let bias = cols[(n * 2 + e) as usize].2.as_deref();
                        xs.push(gemm_epilogue::bias_relu(&mut self.b, x, bias, s.relu));
                    }
                    let per: Vec<usize> = if pairs { vec![0] } else { vec![0, 1] };
                    for e in per {
                        let (_, cok, _, co) = cols[n as usize * 2 + e].clone();
                        let ok = self.and(&rok, &cok);
                        let o = self.v(format!("add i64 {ro}, {co}"));
                        let p = self.v(format!(
                            "getelementptr float, ptr addrspace(1) {cp}, i64 {o}"
                        ));
                        // A pair stores elements 0 and 1 (columns `col`
                        // and `col + 1`, both in range: n is even).
                        let mine = if pairs { 0..2 } else { e..e + 1 };
                        if self.epi.is_none() {
                            let text = gemm_epilogue::c_store(&mut self.b, &xs[mine], &p);
                            self.guarded(Some(ok), |g| g.ins(text));
                        } else {
                            // Inside the guard: the epilogue reads its
                            // operands only at elements that exist.
                            let (xs, ebase) = (&xs, &ebase);
                            self.guarded(Some(ok), |g| {
                                // Row `row0 + dr`, column `col0 + dc`: as
                                // `row` and `cols[n·2 + e].0` above.
                                let dr = (m * 16 + h * 8) as u64;
                                let ys: Vec<String> = mine
                                    .map(|e| {
                                        let dc = (n * 8) as u64 + e as u64;
                                        let epi = g.epi.as_ref();
                                        gemm_epilogue::value(&mut g.b, epi, &xs[e], ebase, dr, dc)
                                    })
                                    .collect();
                                let text = gemm_epilogue::c_store(&mut g.b, &ys, &p);
                                g.ins(text);
                            });
                        }
                    }
                }
            }
        }
    }
}
