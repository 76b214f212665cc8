//! The C side of a kernel: where the accumulators start and how they end.
//!
//! [`Gen::columns`] fixes a thread's columns of C (and their guards),
//! [`Gen::acc_init`] starts the accumulators from the bias,
//! [`Gen::reduce`] adds the partial sums of the k groups through shared
//! memory, and [`Gen::epilogue`] applies relu and the pointwise epilogue
//! and stores the tile.
//!
//! Invariants:
//! - Only elements with `i < m`, `j < n` of the current batch are written;
//!   16-byte stores only where `aligned16`, a unit column stride, `n` and
//!   the other strides keep four consecutive columns contiguous and
//!   aligned (and `tn ≥ 4`).
//! - The bias is added first (it is the accumulators' start, in k group 0
//!   only), then the k sums, then the groups 1.. in order: the rounding is
//!   fixed and the same on every run.
//! - The reduction reuses the shared buffers after a barrier that follows
//!   the last multiply; only group 0 reaches the stores.
//! - Relu is `llvm.maxnum(x, 0)`, so NaN becomes 0 as with `f32::max`.
//! - The pointwise epilogue is called inside the store's guard, once per
//!   stored element (one store path: group 0 after the reduction), with
//!   the offsets `b·s0 + i·s1 + j·s2` of the element the store writes,
//!   formed in i64 as the offset of the thread's first row and column
//!   plus a constant. Without an epilogue no instruction is added.

use super::emit::Gen;

/// Row (column) `r` of a thread's register tile, past its first one: the
/// rows come in groups of `w` consecutive ones, `w · nt` apart (`nt`
/// threads along that side).
fn spread(r: u32, w: u32, nt: u32) -> u32 {
    (r / w) * w * nt + r % w
}

impl Gen<'_> {
    /// Adds the partial sums of k groups 1.. to group 0's `acc` through
    /// shared memory (thread-fastest layout: conflict-free). The sum order
    /// is fixed, so results do not vary between runs.
    pub(super) fn reduce(&mut self, acc: &[String], is0: &str, grp: &str, lt: &str) -> Vec<String> {
        let t = self.t;
        let gt = t.group_threads();
        let nacc = t.tm * t.tn;
        // Every group has finished reading the last k-tile.
        self.barrier();
        self.b.cond_br(is0, "red.wait", "red.put");
        self.b.place("red.put");
        let g1 = self.v(format!("add i32 {grp}, -1"));
        let base = self.v(format!("mul i32 {g1}, {}", nacc * gt));
        let base = self.v(format!("add i32 {base}, {lt}"));
        let p = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {base}"
        ));
        for (i, x) in acc.iter().enumerate() {
            let q = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                i as u32 * gt
            ));
            self.b
                .ins(format!("store float {x}, ptr addrspace(3) {q}, align 4"));
        }
        self.b.br("red.wait");
        self.b.place("red.wait");
        self.barrier();
        self.b.cond_br(is0, "red.sum", "epi.done");
        self.b.place("red.sum");
        let p = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {lt}"
        ));
        let mut out = acc.to_vec();
        for g in 1..t.ks {
            for (i, x) in out.iter_mut().enumerate() {
                let q = self.v(format!(
                    "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                    ((g - 1) * nacc + i as u32) * gt
                ));
                let y = self.v(format!("load float, ptr addrspace(3) {q}, align 4"));
                *x = self.v(format!("fadd float {x}, {y}"));
            }
        }
        out
    }

    /// This thread's columns of C: index and validity (absent: always in
    /// range).
    pub(super) fn columns(
        &mut self,
        tx: &str,
        j0: &str,
        ntx: u32,
        wb: u32,
    ) -> Vec<(String, Option<String>)> {
        let (p, t, it) = (self.p, self.t, self.it);
        let txw = self.widen(tx);
        let tx_off = self.mulc(&txw, u64::from(wb));
        let j_base = self.add(j0, &tx_off);
        let mut cols = Vec::new();
        for cc in 0..t.tn {
            let local = spread(cc, wb, ntx);
            let j = self.add(&j_base, &local.to_string());
            let ok =
                (p.n % u64::from(t.bn) != 0).then(|| self.v(format!("icmp ult {it} {j}, {}", p.n)));
            cols.push((j, ok));
        }
        cols
    }

    /// The accumulators' start: the bias of their column (in k group 0),
    /// else 0. Starting from the bias rather than adding it at the end
    /// keeps the epilogue free of it (registers) and rounds as well.
    pub(super) fn acc_init(
        &mut self,
        cols: &[(String, Option<String>)],
        bat: &str,
        is0: Option<&str>,
    ) -> Vec<String> {
        let (p, t, it) = (self.p, self.t, self.it);
        let Some(s) = p.bias else {
            return vec!["0.0".to_string(); (t.tm * t.tn) as usize];
        };
        let bb = self.mulc(bat, s);
        let mut vals = Vec::new();
        for (j, ok) in cols {
            let mut o = self.add(&bb, j);
            if let Some(ok) = ok {
                o = self.v(format!("select i1 {ok}, {it} {o}, {it} 0"));
            }
            let ptr = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(1) %pbias, {it} {o}"
            ));
            let mut x = self.v(format!("load float, ptr addrspace(1) {ptr}, align 4"));
            if let Some(is0) = is0 {
                x = self.v(format!("select i1 {is0}, float {x}, float 0.0"));
            }
            vals.push(x);
        }
        (0..t.tm).flat_map(|_| vals.iter().cloned()).collect()
    }

    /// Relu, the pointwise epilogue and the guarded stores of this
    /// thread's `tm × tn` tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn epilogue(
        &mut self,
        acc: &[String],
        cols: &[(String, Option<String>)],
        ty: &str,
        i0: &str,
        bat: &str,
        nty: u32,
        wa: u32,
    ) {
        let (p, t, it) = (self.p, self.t, self.it);
        let [c0, c1, c2] = p.c;
        let vec = p.aligned16 && t.tn >= 4 && c2 == 1 && p.n % 4 == 0 && c1 % 4 == 0 && c0 % 4 == 0;
        let tyw = self.widen(ty);
        let ty_off = self.mulc(&tyw, u64::from(wa));
        let cb = self.mulc(bat, c0);
        // The epilogue operands' offsets at this thread's first row and
        // column (column 0 of `cols` is the first: its offset is 0); the
        // other elements' are constants past these, which keeps one i64
        // per operand live through the stores.
        let epi_base = if self.epi.is_some() {
            let i = self.add(i0, &ty_off);
            self.epi_base(bat, &i, &cols[0].0)
        } else {
            Vec::new()
        };
        let (wb, ntx) = (t.tn.min(4), t.bn / t.tn);
        for r in 0..t.tm {
            let local = spread(r, wa, nty);
            let i = self.add(i0, &ty_off);
            let i = self.add(&i, &local.to_string());
            let iok =
                (p.m % u64::from(t.bm) != 0).then(|| self.v(format!("icmp ult {it} {i}, {}", p.m)));
            let ro = self.mulc(&i, c1);
            let ro = self.add(&cb, &ro);
            let mut outs = Vec::new();
            for cc in 0..cols.len() {
                let mut x = acc[(r * t.tn) as usize + cc].clone();
                if p.relu {
                    x = crate::kernels::gemm_epilogue::relu_keeping_nan(&mut self.b, &x);
                }
                outs.push(x);
            }
            let groups: Vec<Vec<usize>> = if vec {
                (0..t.tn as usize)
                    .collect::<Vec<_>>()
                    .chunks(4)
                    .map(|c| c.to_vec())
                    .collect()
            } else {
                (0..t.tn as usize).map(|c| vec![c]).collect()
            };
            for grp in groups {
                let (j, jok) = cols[grp[0]].clone();
                let ok = self.and_all(&[iok.clone(), jok]);
                let next = self.b.label("st.next");
                if let Some(ok) = &ok {
                    let st = self.b.label("st");
                    self.b.cond_br(ok, &st, &next);
                    self.b.place(&st);
                }
                let jo = self.mulc(&j, c2);
                let o = self.add(&ro, &jo);
                let ptr = self.v(format!(
                    "getelementptr inbounds float, ptr addrspace(1) %pc, {it} {o}"
                ));
                // Inside the guard: the epilogue reads its operands at
                // this element only when it is in range.
                let vals: Vec<String> = grp
                    .iter()
                    .map(|&c| {
                        let dj = spread(c as u32, wb, ntx);
                        self.apply_epi(&outs[c], &epi_base, local, dj)
                    })
                    .collect();
                if grp.len() == 4 {
                    let mut v = "poison".to_string();
                    for (q, x) in vals.iter().enumerate() {
                        v = self.v(format!("insertelement <4 x float> {v}, float {x}, i32 {q}"));
                    }
                    self.b.ins(format!(
                        "store <4 x float> {v}, ptr addrspace(1) {ptr}, align 16"
                    ));
                } else {
                    self.b.ins(format!(
                        "store float {}, ptr addrspace(1) {ptr}, align 4",
                        vals[0]
                    ));
                }
                if ok.is_some() {
                    self.b.br(&next);
                    self.b.place(&next);
                }
            }
        }
    }

    /// Each epilogue operand's offset `b·s0 + i·s1 + j·s2` in i64 for the
    /// indices `b`, `i`, `j` in the index type.
    fn epi_base(&mut self, b: &str, i: &str, j: &str) -> Vec<String> {
        let idx = [b, i, j].map(|x| {
            if self.it == "i64" || x.parse::<u64>().is_ok() {
                x.to_string()
            } else {
                self.v(format!("zext i32 {x} to i64"))
            }
        });
        let strides = self.p.epi.clone();
        strides
            .iter()
            .map(|s| {
                let mut acc = "0".to_string();
                for (x, &sd) in idx.iter().zip(s) {
                    let term = match (sd, x.parse::<u64>()) {
                        (0, _) => "0".to_string(),
                        (_, Ok(c)) => c.wrapping_mul(sd).to_string(),
                        (1, _) => x.clone(),
                        _ => self.v(format!("mul i64 {x}, {sd}")),
                    };
                    acc = match (acc.as_str(), term.as_str()) {
                        ("0", _) => term,
                        (_, "0") => acc,
                        _ => self.v(format!("add i64 {acc}, {term}")),
                    };
                }
                acc
            })
            .collect()
    }

    /// `x` through the epilogue for the element `di` rows and `dj` columns
    /// past the one at offsets `base` of the extra operands; `x` itself
    /// without an epilogue.
    fn apply_epi(&mut self, x: &str, base: &[String], di: u32, dj: u32) -> String {
        let Some(f) = self.epi.clone() else {
            return x.to_string();
        };
        let mut args = format!("float {x}");
        for (k, (o, s)) in base.iter().zip(&self.p.epi).enumerate() {
            // Wrapping: past the edge (the element is not stored) the
            // constant may leave the i64 range; in range it is below 2^62.
            let d = u64::from(di)
                .wrapping_mul(s[1])
                .wrapping_add(u64::from(dj).wrapping_mul(s[2])) as i64;
            let o = match (o.as_str(), d) {
                (_, 0) => o.clone(),
                ("0", _) => d.to_string(),
                _ => self.b.v(format!("add i64 {o}, {d}")),
            };
            args.push_str(&format!(", ptr addrspace(1) %pe{}, i64 {o}", k + 1));
        }
        self.v(format!("call float @{f}({args})"))
    }
}
