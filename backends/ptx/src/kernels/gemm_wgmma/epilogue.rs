//! The epilogue of the wgmma GEMM: bias, relu, the pointwise expression
//! and the guarded stores of C from the accumulator fragments (layout in
//! the parent's doc), with `gemm_tc`'s pieces (`gemm_epilogue`).

use super::Gen;
use crate::kernels::gemm_epilogue;

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
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &row0, &col0);
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
                    let x = self.v(format!("load float, ptr {ap}, align 4"));
                    let bias = bias.as_deref();
                    xs.push(gemm_epilogue::bias_relu(&mut self.b, x, bias, s.relu));
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
                            let epi = self.epi.as_ref();
                            gemm_epilogue::value(&mut self.b, epi, &xs[e], &ebase, dr, dc)
                        })
                        .collect()
                    } else {
                        xs[mine].to_vec()
                    };
                    if self.half.is_none_or(|h| h.keep_f32) {
                        let st = gemm_epilogue::c_store(&mut self.b, &ys, &p);
                        self.ins(st);
                    }
                    // Element offsets in C are the copy's (C is dense).
                    match (self.half, ys.as_slice()) {
                        (Some(h), [y0, y1]) => h.store_pair(&mut self.b, [y0, y1], "%h", &o),
                        (Some(h), [y]) => h.store(&mut self.b, y, "%h", &o),
                        _ => {}
                    }
                    self.b.br(&end);
                    self.b.place(&end);
                }
            }
        }
    }
}
