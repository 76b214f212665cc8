//! Moving operand tiles from global to shared memory: where each thread's
//! chunks lie, the guarded (zero-filling) global loads, the conversion to
//! the multiply precision and the shared stores, and `cp.async` for half B.

use super::{ARow, Gen, Map, Path, Pos, TcPrecision};
use crate::kernels::{AMode, conv_index};

/// See [`Gen::a_chunk`].
pub(super) struct AChunk {
    pub off: String,
    pub ok: String,
    pub kk: String,
    pub fixed_ok: String,
}

impl Gen<'_> {
    /// The positions of this thread's chunks under `map`.
    pub(super) fn positions(&mut self, map: Map) -> Vec<Pos> {
        let threads = self.t.threads();
        let (gr, gc) = if map.vec_rows {
            (map.rows / map.w, map.cols)
        } else {
            (map.rows, map.cols / map.w)
        };
        let (gfast, gslow) = if map.lane_rows { (gr, gc) } else { (gc, gr) };
        let step = threads / gfast;
        let tid = self.tid.clone();
        let fast = self.v(format!("urem i32 {tid}, {gfast}"));
        let slow0 = self.v(format!("udiv i32 {tid}, {gfast}"));
        let mut out = Vec::new();
        for p in 0..gslow.div_ceil(step) {
            let slow = self.v(format!("add i32 {slow0}, {}", p * step));
            let exists =
                ((p + 1) * step > gslow).then(|| self.v(format!("icmp ult i32 {slow}, {gslow}")));
            let (ur, uc) = if map.lane_rows {
                (&fast, &slow)
            } else {
                (&slow, &fast)
            };
            let (fr, fc) = if map.vec_rows { (map.w, 1) } else { (1, map.w) };
            let r = self.v(format!("mul i32 {ur}, {fr}"));
            let c = self.v(format!("mul i32 {uc}, {fc}"));
            out.push(Pos { r, c, exists });
        }
        out
    }

    /// Per-chunk row data of A and column data of B for this batch.
    pub(super) fn rows_and_cols(&mut self) {
        let s = self.s;
        let bz = self.bz.clone();
        self.arow.clear();
        self.bcol.clear();
        for i in 0..self.apos.len() {
            let r = self.apos[i].r.clone();
            let row = self.v(format!("add i32 {}, {r}", self.bm0));
            let ok = self.v(format!("icmp ult i32 {row}, {}", s.m));
            let row64 = self.v(format!("zext i32 {row} to i64"));
            match s.a {
                AMode::Strided { batch, row: sr, .. } => {
                    let o = self.v(format!("mul i64 {row64}, {sr}"));
                    let ob = self.v(format!("mul i64 {bz}, {batch}"));
                    let o = self.v(format!("add i64 {o}, {ob}"));
                    self.arow.push(ARow {
                        ok,
                        off: o,
                        yx: None,
                    });
                }
                AMode::Conv(g) => {
                    // The batch index is the group.
                    let (iy, ix, o) = conv_index::pixel(&mut self.b, &g, &row, &bz, "i64");
                    self.arow.push(ARow {
                        ok,
                        off: o,
                        yx: Some((iy, ix)),
                    });
                }
            }
        }
        let [sb, _, sn] = s.b_strides;
        for i in 0..self.bpos.len() {
            let c = self.bpos[i].c.clone();
            let col = self.v(format!("add i32 {}, {c}", self.bn0));
            let col64 = self.v(format!("zext i32 {col} to i64"));
            let o = self.v(format!("mul i64 {col64}, {sn}"));
            let ob = self.v(format!("mul i64 {bz}, {sb}"));
            let o = self.v(format!("add i64 {o}, {ob}"));
            self.bcol.push((col, o));
        }
    }

    /// Starts k-tile `kt` ([`Layout::Pairs`](super::Layout)): global
    /// loads of staged chunks into their slots, `cp.async` of half B into
    /// the B tile at byte `b_off` of shared memory.
    pub(super) fn fetch(&mut self, kt: &str, b_off: &str) {
        self.fetch_a(kt);
        self.fetch_b(kt, b_off);
        if self.bpath == Path::Async {
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
    }

    /// Global loads of this thread's A chunks of k-tile `kt` into their
    /// slots.
    pub(super) fn fetch_a(&mut self, kt: &str) {
        let k0 = self.v(format!("mul i32 {kt}, {}", self.t.bk));
        for i in 0..self.apos.len() {
            let v = self.load_a(i, &k0);
            let slot = self.aslot[i].clone();
            let ty = self.chunk_ty(true);
            self.ins(format!("store {ty} {v}, ptr {slot}, align 16"));
        }
    }

    /// B chunks of k-tile `kt`: `cp.async` (not committed) into the B tile
    /// at byte `b_off`, or global loads into their slots.
    pub(super) fn fetch_b(&mut self, kt: &str, b_off: &str) {
        let k0 = self.v(format!("mul i32 {kt}, {}", self.t.bk));
        for i in 0..self.bpos.len() {
            if self.bpath == Path::Async {
                self.async_b(i, &k0, b_off);
            } else {
                let v = self.load_b(i, &k0);
                let slot = self.bslot[i].clone();
                let ty = self.chunk_ty(false);
                self.ins(format!("store {ty} {v}, ptr {slot}, align 16"));
            }
        }
    }

    /// Chunk `i` of A in k-tile `k0`.
    fn load_a(&mut self, i: usize, k0: &str) -> String {
        let s = self.s;
        let w = self.amap.w;
        let c = self.a_chunk(i, k0);
        let tail = w > 1 && !s.k.is_multiple_of(w as u64);
        self.load_chunk(
            "%p0",
            "float",
            w,
            &c.off,
            &c.ok,
            tail.then_some((&c.fixed_ok, &c.kk, s.k)),
        )
    }

    /// Where A chunk `i` of k-tile `k0` lies: its element offset (in the
    /// padding for a convolution where `ok` is false), whether its first
    /// element exists (`ok`), its column `kk`, and whether its row exists
    /// (`fixed_ok`: with `kk + e < k`, whether element `e` exists, for a
    /// strided A).
    pub(super) fn a_chunk(&mut self, i: usize, k0: &str) -> AChunk {
        let s = self.s;
        let pos_c = self.apos[i].c.clone();
        let ARow {
            ok: rowok,
            off: rowoff,
            yx,
        } = self.arow[i].clone();
        let kk = self.v(format!("add i32 {k0}, {pos_c}"));
        let kin = self.v(format!("icmp ult i32 {kk}, {}", s.k));
        let kk64 = self.v(format!("zext i32 {kk} to i64"));
        let mut ok = self.and(&rowok, &kin);
        let off = match (s.a, yx) {
            (AMode::Strided { col, .. }, _) => {
                let o = self.v(format!("mul i64 {kk64}, {col}"));
                self.v(format!("add i64 {rowoff}, {o}"))
            }
            (AMode::Conv(g), Some((iy0, ix0))) => {
                // A chunk never crosses a tap.
                let (dy, dx, ci, yin, xin) = conv_index::tap(&mut self.b, &g, &kk, &iy0, &ix0);
                ok = self.and(&ok, &yin);
                ok = self.and(&ok, &xin);
                conv_index::tap_offset(&mut self.b, &g, [&dy, &dx, &ci], &rowoff, "i64")
            }
            _ => unreachable!("a convolution row always has its position"),
        };
        if let Some(e) = self.apos[i].exists.clone() {
            ok = self.and(&ok, &e);
        }
        let fixed_ok = match self.apos[i].exists.clone() {
            Some(e) => self.and(&rowok, &e),
            None => rowok,
        };
        AChunk {
            off,
            ok,
            kk,
            fixed_ok,
        }
    }

    /// Chunk `i` of staged B in k-tile `k0`.
    fn load_b(&mut self, i: usize, k0: &str) -> String {
        let s = self.s;
        let map = self.bmap;
        let r = self.bpos[i].r.clone();
        let (col, coloff) = self.bcol[i].clone();
        let kk = self.v(format!("add i32 {k0}, {r}"));
        let kin = self.v(format!("icmp ult i32 {kk}, {}", s.k));
        let cin = self.v(format!("icmp ult i32 {col}, {}", s.n));
        let kk64 = self.v(format!("zext i32 {kk} to i64"));
        let o = self.v(format!("mul i64 {kk64}, {}", s.b_strides[1]));
        let off = self.v(format!("add i64 {coloff}, {o}"));
        let mut ok = self.and(&kin, &cin);
        if let Some(e) = self.bpos[i].exists.clone() {
            ok = self.and(&ok, &e);
        }
        let ety = if self.b_half { "i16" } else { "float" };
        // The chunk runs along k (vec_rows) or n; a partial chunk is
        // possible when that extent is not a multiple of the chunk.
        let (fixed_ok, idx, lim) = if map.vec_rows {
            (cin, kk, s.k)
        } else {
            (kin, col, s.n)
        };
        let fixed_ok = match self.bpos[i].exists.clone() {
            Some(e) => self.and(&fixed_ok, &e),
            None => fixed_ok,
        };
        let tail = map.w > 1 && !lim.is_multiple_of(map.w as u64);
        self.load_chunk(
            "%p1",
            ety,
            map.w,
            &off,
            &ok,
            tail.then_some((&fixed_ok, &idx, lim)),
        )
    }

    /// Loads `w` consecutive elements at element offset `off` of `base`
    /// when `ok` (else zeros). With `tail = (fixed_ok, idx, lim)` the chunk
    /// may be partial: element `e` exists where `fixed_ok` and
    /// `idx + e < lim`; `ok` then only says the first one does, and the
    /// whole chunk is loaded at once only when its last element exists.
    fn load_chunk(
        &mut self,
        base: &str,
        ety: &str,
        w: u32,
        off: &str,
        ok: &str,
        tail: Option<(&String, &String, u64)>,
    ) -> String {
        let vty = format!("<{w} x {ety}>");
        let esz = if ety == "float" { 4 } else { 2 };
        let align = if w == 1 { esz } else { 16 };
        let Some((fixed_ok, idx, lim)) = tail else {
            let o = self.v(format!("select i1 {ok}, i64 {off}, i64 0"));
            let p = self.v(format!(
                "getelementptr {ety}, ptr addrspace(1) {base}, i64 {o}"
            ));
            let x = self.v(format!("load {vty}, ptr addrspace(1) {p}, align {align}"));
            return self.v(format!("select i1 {ok}, {vty} {x}, {vty} zeroinitializer"));
        };
        let last = self.v(format!("add i32 {idx}, {}", w - 1));
        let lin = self.v(format!("icmp ult i32 {last}, {lim}"));
        let full = self.and(fixed_ok, &lin);
        let (lf, lp, lj) = (
            self.b.label("full"),
            self.b.label("part"),
            self.b.label("got"),
        );
        self.b.cond_br(&full, &lf, &lp);
        self.b.place(&lf);
        let p = self.v(format!(
            "getelementptr {ety}, ptr addrspace(1) {base}, i64 {off}"
        ));
        let xf = self.v(format!("load {vty}, ptr addrspace(1) {p}, align {align}"));
        self.b.br(&lj);
        self.b.place(&lp);
        let mut x = "zeroinitializer".to_string();
        for e in 0..w {
            let ie = self.v(format!("add i32 {idx}, {e}"));
            let ein = self.v(format!("icmp ult i32 {ie}, {lim}"));
            let oke = self.and(fixed_ok, &ein);
            let oe = self.v(format!("add i64 {off}, {e}"));
            let oe = self.v(format!("select i1 {oke}, i64 {oe}, i64 0"));
            let p = self.v(format!(
                "getelementptr {ety}, ptr addrspace(1) {base}, i64 {oe}"
            ));
            let y = self.v(format!("load {ety}, ptr addrspace(1) {p}, align {esz}"));
            let y = self.v(format!("select i1 {oke}, {ety} {y}, {ety} zeroinitializer"));
            x = self.v(format!("insertelement {vty} {x}, {ety} {y}, i32 {e}"));
        }
        self.b.br(&lj);
        self.b.place(&lj);
        self.v(format!("phi {vty} [ {xf}, %{lf} ], [ {x}, %{lp} ]"))
    }

    /// `cp.async` of half-B chunk `i` of k-tile `k0` into the B tile at
    /// byte `b_off`: 16 bytes, fewer at the n edge, none past k.
    fn async_b(&mut self, i: usize, k0: &str, b_off: &str) {
        let s = self.s;
        let r = self.bpos[i].r.clone();
        let c = self.bpos[i].c.clone();
        let (col, coloff) = self.bcol[i].clone();
        let kk = self.v(format!("add i32 {k0}, {r}"));
        let kin = self.v(format!("icmp ult i32 {kk}, {}", s.k));
        let rem = self.v(format!("sub i32 {}, {col}", s.n));
        let rem = self.v(format!("call i32 @llvm.smax.i32(i32 {rem}, i32 0)"));
        let rem = self.v(format!("call i32 @llvm.smin.i32(i32 {rem}, i32 8)"));
        let bytes = self.v(format!("shl i32 {rem}, 1"));
        let bytes = self.v(format!("select i1 {kin}, i32 {bytes}, i32 0"));
        let kk64 = self.v(format!("zext i32 {kk} to i64"));
        let o = self.v(format!("mul i64 {kk64}, {}", s.b_strides[1]));
        let off = self.v(format!("add i64 {coloff}, {o}"));
        let some = self.v(format!("icmp ne i32 {bytes}, 0"));
        let off = self.v(format!("select i1 {some}, i64 {off}, i64 0"));
        let src = self.v(format!(
            "getelementptr i16, ptr addrspace(1) %p1, i64 {off}"
        ));
        let dst = self.b_smem(b_off, &r, &c);
        let call = format!(
            "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {src}, i32 {bytes})"
        );
        self.guarded(self.bpos[i].exists.clone(), |g| g.ins(call));
    }

    fn a_smem(&mut self, a_off: &str, r: &str, c: &str) -> String {
        let pa = self.t.pa(self.p);
        self.smem_at(a_off, pa, r, c)
    }

    pub(super) fn b_smem(&mut self, b_off: &str, r: &str, c: &str) -> String {
        let pb = self.t.pb(self.p);
        self.smem_at(b_off, pb, r, c)
    }

    /// Shared address of element (r, c) of the tile at byte `tile_off`,
    /// rows `pitch` elements apart.
    fn smem_at(&mut self, tile_off: &str, pitch: u32, r: &str, c: &str) -> String {
        let es = self.p.size();
        let o = self.v(format!("mul i32 {r}, {pitch}"));
        let o = self.v(format!("add i32 {o}, {c}"));
        let o = self.v(format!("mul i32 {o}, {es}"));
        let o = self.v(format!("add i32 {o}, {tile_off}"));
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {o}"
        ))
    }

    /// Converts the staged chunks and stores them into the A tile at byte
    /// `a_off` and the B tile at byte `b_off`; waits for this thread's
    /// `cp.async` copies.
    pub(super) fn stage(&mut self, a_off: &str, b_off: &str) {
        self.stage_a(a_off);
        self.stage_b(b_off);
    }

    /// Converts this thread's A chunks and stores them into the A tile at
    /// byte `a_off`.
    pub(super) fn stage_a(&mut self, a_off: &str) {
        for i in 0..self.apos.len() {
            let ty = self.chunk_ty(true);
            let slot = self.aslot[i].clone();
            let x = self.v(format!("load {ty}, ptr {slot}, align 16"));
            let (r, c) = (self.apos[i].r.clone(), self.apos[i].c.clone());
            let w = self.amap.w;
            let y = self.convert(&x, w);
            let dst = self.a_smem(a_off, &r, &c);
            let st = self.p.ty();
            let al = (w * self.p.size()).min(16);
            let text = format!("store <{w} x {st}> {y}, ptr addrspace(3) {dst}, align {al}");
            self.guarded(self.apos[i].exists.clone(), |g| g.ins(text));
        }
    }

    /// Stores this thread's staged B chunks (converted for f32 B) into the
    /// B tile at byte `b_off`, or waits for its `cp.async` copies.
    fn stage_b(&mut self, b_off: &str) {
        if self.bpath == Path::Async {
            self.ins("call void @llvm.nvvm.cp.async.wait.all()");
            return;
        }
        let map = self.bmap;
        for i in 0..self.bpos.len() {
            let ty = self.chunk_ty(false);
            let slot = self.bslot[i].clone();
            let x = self.v(format!("load {ty}, ptr {slot}, align 16"));
            let (r, c) = (self.bpos[i].r.clone(), self.bpos[i].c.clone());
            let (y, st, es) = if self.b_half {
                (x, "i16", 2)
            } else {
                (self.convert(&x, map.w), self.p.ty(), self.p.size())
            };
            let exists = self.bpos[i].exists.clone();
            let w = map.w;
            self.guarded(exists, |g| {
                if map.vec_rows {
                    // Along k: one element per shared row.
                    for e in 0..w {
                        let re = g.v(format!("add i32 {r}, {e}"));
                        let dst = g.b_smem(b_off, &re, &c);
                        let z = g.v(format!("extractelement <{w} x {st}> {y}, i32 {e}"));
                        g.ins(format!(
                            "store {st} {z}, ptr addrspace(3) {dst}, align {es}"
                        ));
                    }
                } else {
                    let dst = g.b_smem(b_off, &r, &c);
                    let al = (w * es).min(16);
                    g.ins(format!(
                        "store <{w} x {st}> {y}, ptr addrspace(3) {dst}, align {al}"
                    ));
                }
            });
        }
    }

    /// `<w x float>` → `<w x>` of the shared element type.
    fn convert(&mut self, x: &str, w: u32) -> String {
        match self.p {
            TcPrecision::F16 | TcPrecision::Bf16 => {
                let ty = self.p.ty();
                self.v(format!("fptrunc <{w} x float> {x} to <{w} x {ty}>"))
            }
            TcPrecision::Tf32 => {
                let mut y = "zeroinitializer".to_string();
                for e in 0..w {
                    let z = self.v(format!("extractelement <{w} x float> {x}, i32 {e}"));
                    let z = self.v(format!("call i32 @llvm.nvvm.f2tf32.rna(float {z})"));
                    y = self.v(format!("insertelement <{w} x i32> {y}, i32 {z}, i32 {e}"));
                }
                y
            }
        }
    }
}
