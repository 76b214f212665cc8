//! The C side of a kernel: where the accumulators start and how they end.
//!
//! [`Gen::columns`] fixes a thread's columns of C (and their guards),
//! [`Gen::acc_init`] starts the accumulators from the bias,
//! [`Gen::reduce`] adds the partial sums of the k groups through shared
//! memory, and [`Gen::epilogue`] applies relu and stores the tile.
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

use super::emit::Gen;

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
            let local = (cc / wb) * wb * ntx + cc % wb;
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

    /// Relu and the guarded stores of this thread's `tm × tn` tile.
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
        for r in 0..t.tm {
            let local = (r / wa) * wa * nty + r % wa;
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
                    x = self.v(format!("call float @llvm.maxnum.f32(float {x}, float 0.0)"));
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
                if grp.len() == 4 {
                    let mut v = "poison".to_string();
                    for (q, &c) in grp.iter().enumerate() {
                        v = self.v(format!(
                            "insertelement <4 x float> {v}, float {}, i32 {q}",
                            outs[c]
                        ));
                    }
                    self.b.ins(format!(
                        "store <4 x float> {v}, ptr addrspace(1) {ptr}, align 16"
                    ));
                } else {
                    self.b.ins(format!(
                        "store float {}, ptr addrspace(1) {ptr}, align 4",
                        outs[grp[0]]
                    ));
                }
                if ok.is_some() {
                    self.b.br(&next);
                    self.b.place(&next);
                }
            }
        }
    }
}
