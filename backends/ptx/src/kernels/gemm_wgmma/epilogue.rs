//! The epilogue of the wgmma GEMM: bias, relu, the pointwise expression
//! and the guarded stores of C from the accumulator fragments (layout in
//! the parent's doc), as `gemm_tc` does it.

use super::Gen;

impl Gen<'_> {
    pub(super) fn epilogue(&mut self) {
        let (t, s) = (self.t, self.s);
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        // Warp w of the block: warpgroup w/4, rows 16·(w%4) of it.
        let row0 = self.v(format!("mul i32 {warp}, 16"));
        let row0 = self.v(format!("add i32 {row0}, {}", self.bm0));
        let g = self.v(format!("lshr i32 {lane}, 2"));
        let row0 = self.v(format!("add i32 {row0}, {g}"));
        let q = self.v(format!("and i32 {lane}, 3"));
        let q2 = self.v(format!("shl i32 {q}, 1"));
        let col0 = self.v(format!("add i32 {}, {q2}", self.bn0));
        let cr = s.c_strides[1];
        let keeps = |st: u64, ext: u64| st.is_multiple_of(2) || ext <= 1;
        let pairs = s.aligned16 && s.n.is_multiple_of(2) && keeps(cr, s.m);
        let cp = if s.bias.is_some() { "%p3" } else { "%p2" };
        let ebase = self.epi_bases(&row0, &col0);
        // Rows row0 and row0 + 8: in range, element offset in C.
        let mut rows = Vec::new();
        for h in 0..2 {
            let row = self.v(format!("add i32 {row0}, {}", 8 * h));
            let ok = self.v(format!("icmp ult i32 {row}, {}", s.m));
            let r64 = self.v(format!("zext i32 {row} to i64"));
            let ro = self.v(format!("mul i64 {r64}, {cr}"));
            rows.push((ok, ro));
        }
        for j in 0..t.bn / 8 {
            // Columns col0 + 8j + e, e = 0, 1.
            let mut cols = Vec::new();
            for e in 0..2 {
                let col = self.v(format!("add i32 {col0}, {}", 8 * j + e));
                let ok = self.v(format!("icmp ult i32 {col}, {}", s.n));
                let c64 = self.v(format!("zext i32 {col} to i64"));
                // No `+ 0.0` without bias: it would turn -0.0 into 0.0.
                let bias = s.bias.map(|_| {
                    let o = self.v(format!("select i1 {ok}, i64 {c64}, i64 0"));
                    let p = self.v(format!(
                        "getelementptr float, ptr addrspace(1) %p2, i64 {o}"
                    ));
                    self.v(format!("load float, ptr addrspace(1) {p}, align 4"))
                });
                cols.push((ok, bias, c64));
            }
            for (h, (rok, ro)) in rows.clone().into_iter().enumerate() {
                let mut xs = Vec::new();
                for (e, (_, bias, _)) in cols.iter().enumerate() {
                    let ap = self.acc_ptr(4 * j + 2 * h as u32 + e as u32);
                    let mut x = self.v(format!("load float, ptr {ap}, align 4"));
                    if let Some(b) = bias {
                        x = self.v(format!("fadd float {x}, {b}"));
                    }
                    if s.relu {
                        x = self.v(format!("call float @llvm.maxnum.f32(float {x}, float 0.0)"));
                    }
                    xs.push(x);
                }
                let per: Vec<usize> = if pairs { vec![0] } else { vec![0, 1] };
                for e in per {
                    let (cok, _, c64) = cols[e].clone();
                    let ok = self.v(format!("and i1 {rok}, {cok}"));
                    let o = self.v(format!("add i64 {ro}, {c64}"));
                    let p = self.v(format!(
                        "getelementptr float, ptr addrspace(1) {cp}, i64 {o}"
                    ));
                    // A pair stores columns `col` and `col + 1`, both in
                    // range: n is even.
                    let mine = if pairs { 0..2 } else { e..e + 1 };
                    let (l, end) = (self.b.label("st"), self.b.label("st.end"));
                    self.b.cond_br(&ok, &l, &end);
                    self.b.place(&l);
                    let ys: Vec<String> = if self.epi.is_some() {
                        // Row row0 + 8h, column col0 + 8j + e.
                        mine.map(|e| {
                            let (dr, dc) = (8 * h as u64, (8 * j) as u64 + e as u64);
                            self.epi_value(&xs[e], &ebase, dr, dc)
                        })
                        .collect()
                    } else {
                        xs[mine].to_vec()
                    };
                    self.c_store(&ys, &p);
                    self.b.br(&end);
                    self.b.place(&end);
                }
            }
        }
    }

    /// Per epilogue operand `k`, `row0·s1 + col0·s2` (i64); none without
    /// an epilogue. It may lie outside the operand (row0 or col0 past the
    /// edge): only offsets of stored elements are read, and the i64
    /// arithmetic wraps back to them.
    fn epi_bases(&mut self, row0: &str, col0: &str) -> Vec<String> {
        let Some((_, strides)) = self.epi.clone() else {
            return Vec::new();
        };
        let r = self.v(format!("zext i32 {row0} to i64"));
        let c = self.v(format!("zext i32 {col0} to i64"));
        strides
            .iter()
            .map(|st| {
                let [_, s1, s2] = st.map(|x| x as i64);
                let o = self.v(format!("mul i64 {r}, {s1}"));
                let t = self.v(format!("mul i64 {c}, {s2}"));
                self.v(format!("add i64 {o}, {t}"))
            })
            .collect()
    }

    /// `x`, the value of element (row0 + dr, col0 + dc), through the
    /// epilogue: operand `k` at `base[k] + dr·s1 + dc·s2`.
    fn epi_value(&mut self, x: &str, base: &[String], dr: u64, dc: u64) -> String {
        let (f, strides) = self.epi.clone().expect("an epilogue");
        let mut args = vec![format!("float {x}")];
        for (k, (b, [_, s1, s2])) in base.iter().zip(&strides).enumerate() {
            let d = dr.wrapping_mul(*s1).wrapping_add(dc.wrapping_mul(*s2)) as i64;
            let o = self.v(format!("add i64 {b}, {d}"));
            args.push(format!("ptr addrspace(1) %e{}, i64 {o}", k + 1));
        }
        self.v(format!("call float @{f}({})", args.join(", ")))
    }

    /// Stores `ys` (one element, or a pair as one 8-byte store) at `p`.
    fn c_store(&mut self, ys: &[String], p: &str) {
        if let [y0, y1] = ys {
            let v = self.v(format!(
                "insertelement <2 x float> poison, float {y0}, i32 0"
            ));
            let v = self.v(format!("insertelement <2 x float> {v}, float {y1}, i32 1"));
            self.ins(format!(
                "store <2 x float> {v}, ptr addrspace(1) {p}, align 8"
            ));
        } else {
            self.ins(format!(
                "store float {}, ptr addrspace(1) {p}, align 4",
                ys[0]
            ));
        }
    }
}
