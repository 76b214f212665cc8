//! The k loop of the ring layouts ([`Layout::Ring`], [`Layout::RingA`]):
//! B (and for `RingA` the f32 A tile) move with `cp.async` several
//! k-tiles ahead, one commit group per k-tile.

use super::{Gen, Layout};

impl Gen<'_> {
    /// Converted A tiles at bytes 0 and `ab`; ring stage `j` at
    /// `2·ab + j·(raw + bb)` holding (`RingA` only) the f32 A tile of
    /// `raw` bytes, then the B tile. The prologue starts k-tiles
    /// `0 .. ring-1` (one group each, empty past k) and stages A tile 0.
    /// K-tile `t` then: barrier (tile `t` is visible; every warp is done
    /// with tile `t-1`, whose stage and the other converted A tile are
    /// free), `cp.async` of k-tile `t+ring-1` into the stage of tile `t-1`
    /// (a group, empty past k), for `Ring` global loads of A tile `t+1`
    /// into registers, the MMAs of tile `t`, and a wait until at most
    /// `ring-2` groups are pending (this thread's copies of k-tile `t+1`
    /// have landed) with A tile `t+1` converted into the other A tile.
    /// A thread converts only the f32 chunks it copied itself, so the
    /// wait needs no barrier; the barrier of `t+1` publishes them.
    pub(super) fn mainloop_ring(&mut self, ktiles: u64, ktp: &str) {
        let (t, p, ring) = (self.t, self.p, self.ring);
        let raw_a = self.layout == Layout::RingA;
        let raw = if raw_a { t.raw_bytes() } else { 0 };
        let (ab, stride) = (t.a_bytes(p), raw + t.b_bytes(p));
        let s0 = 2 * ab;
        let start = |g: &mut Self, kt: &str, base: &str| {
            if raw_a {
                g.fetch_a_async(kt, base);
            }
            let boff = g.v(format!("add i32 {base}, {raw}"));
            g.fetch_b(kt, &boff);
        };
        for j in 0..ring - 1 {
            if (j as u64) < ktiles {
                start(self, &j.to_string(), &(s0 + j * stride).to_string());
            }
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
        let wait = format!("call void @llvm.nvvm.cp.async.wait.group(i32 {})", ring - 2);
        if raw_a {
            self.ins(&wait);
            self.raw_to_slots(&s0.to_string());
            self.stage_a("0");
        } else {
            self.fetch_a("0");
            self.stage_a("0");
            self.ins(&wait);
        }
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        self.b.br("loop");
        self.b.place("loop");
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        let nk = self.v(format!("add i32 {kt}, 1"));
        let has = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        let far = self.v(format!("add i32 {kt}, {}", ring - 1));
        let has_far = self.v(format!("icmp ult i32 {far}, {ktiles}"));
        let stage_of = |g: &mut Self, k: &str| {
            let j = g.v(format!("urem i32 {k}, {ring}"));
            let o = g.v(format!("mul i32 {j}, {stride}"));
            g.v(format!("add i32 {o}, {s0}"))
        };
        let fbase = stage_of(self, &far);
        self.b.cond_br(&has_far, "ring", "ring.end");
        self.b.place("ring");
        start(self, &far, &fbase);
        self.b.br("ring.end");
        self.b.place("ring.end");
        self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        let noff = self.v(format!("and i32 {nk}, 1"));
        let noff = self.v(format!("mul i32 {noff}, {ab}"));
        let coff = self.v(format!("and i32 {kt}, 1"));
        let coff = self.v(format!("mul i32 {coff}, {ab}"));
        let cbase = stage_of(self, &kt);
        let cboff = self.v(format!("add i32 {cbase}, {raw}"));
        let nbase = stage_of(self, &nk);
        if raw_a {
            self.b.br("mma");
        } else {
            self.b.cond_br(&has, "pre", "mma");
            self.b.place("pre");
            self.fetch_a(&nk);
            self.b.br("mma");
        }
        self.b.place("mma");
        self.compute(&coff, &cboff);
        self.b.cond_br(&has, "put", "next");
        self.b.place("put");
        if raw_a {
            self.ins(&wait);
            self.raw_to_slots(&nbase);
            self.stage_a(&noff);
        } else {
            self.stage_a(&noff);
            self.ins(&wait);
        }
        self.b.br("next");
        self.b.place("next");
        self.ins(format!("store i32 {nk}, ptr {ktp}, align 4"));
        self.b.cond_br(&has, "loop", "epilogue");
        self.b.place("epilogue");
    }

    /// `cp.async` (not committed) of this thread's A chunks of k-tile `kt`
    /// into the f32 tile at byte `raw_off`: 16 bytes per 4 elements, fewer
    /// at the k tail, none where the chunk does not exist (zero fill).
    fn fetch_a_async(&mut self, kt: &str, raw_off: &str) {
        let (s, w) = (self.s, self.amap.w);
        let k0 = self.v(format!("mul i32 {kt}, {}", self.t.bk));
        for i in 0..self.apos.len() {
            let c = self.a_chunk(i, &k0);
            let tail = !s.k.is_multiple_of(w as u64);
            let (r, col) = (self.apos[i].r.clone(), self.apos[i].c.clone());
            let mut calls = Vec::new();
            for e in 0..w / 4 {
                let bytes = if tail {
                    // (A is strided.) Elements kk + 4e .. kk + 4e + 3 of
                    // a row that exists.
                    let left = self.v(format!("sub i32 {}, {}", s.k, c.kk));
                    let left = self.v(format!("sub i32 {left}, {}", 4 * e));
                    let left = self.v(format!("call i32 @llvm.smax.i32(i32 {left}, i32 0)"));
                    let left = self.v(format!("call i32 @llvm.smin.i32(i32 {left}, i32 4)"));
                    let b = self.v(format!("shl i32 {left}, 2"));
                    self.v(format!("select i1 {}, i32 {b}, i32 0", c.fixed_ok))
                } else {
                    self.v(format!("select i1 {}, i32 16, i32 0", c.ok))
                };
                let some = self.v(format!("icmp ne i32 {bytes}, 0"));
                let o = self.v(format!("add i64 {}, {}", c.off, 4 * e));
                let o = self.v(format!("select i1 {some}, i64 {o}, i64 0"));
                let src = self.v(format!(
                    "getelementptr float, ptr addrspace(1) %p0, i64 {o}"
                ));
                let dst = self.raw_smem(raw_off, &r, &col, e);
                calls.push(format!(
                    "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {src}, i32 {bytes})"
                ));
            }
            self.guarded(self.apos[i].exists.clone(), |g| {
                for call in calls {
                    g.ins(call);
                }
            });
        }
    }

    /// Loads this thread's f32 A chunks from the tile at byte `raw_off`
    /// into their slots (for [`Gen::stage_a`]).
    fn raw_to_slots(&mut self, raw_off: &str) {
        let w = self.amap.w;
        for i in 0..self.apos.len() {
            // A chunk that does not exist reads row 0 (its store is
            // skipped), so the address stays inside the tile.
            let r = match self.apos[i].exists.clone() {
                Some(e) => self.v(format!("select i1 {e}, i32 {}, i32 0", self.apos[i].r)),
                None => self.apos[i].r.clone(),
            };
            let col = self.apos[i].c.clone();
            let mut parts = Vec::new();
            for e in 0..w / 4 {
                let a = self.raw_smem(raw_off, &r, &col, e);
                parts.push(self.v(format!("load <4 x float>, ptr addrspace(3) {a}, align 16")));
            }
            let x = if w == 4 {
                parts[0].clone()
            } else {
                let m: Vec<String> = (0..w).map(|j| format!("i32 {j}")).collect();
                self.v(format!(
                    "shufflevector <4 x float> {}, <4 x float> {}, <{w} x i32> <{}>",
                    parts[0],
                    parts[1],
                    m.join(", ")
                ))
            };
            let slot = self.aslot[i].clone();
            self.ins(format!("store <{w} x float> {x}, ptr {slot}, align 16"));
        }
    }

    /// Shared address of the `e`-th 16 bytes of the chunk at (r, c) in the
    /// f32 tile at byte `raw_off`: rows of `bk` f32, 16-byte units of a row
    /// in the order `u ^ (r & 1)`, so that the 16-byte accesses of eight
    /// consecutive threads (two rows) hit distinct banks.
    fn raw_smem(&mut self, raw_off: &str, r: &str, c: &str, e: u32) -> String {
        let u = self.v(format!("lshr i32 {c}, 2"));
        let u = self.v(format!("add i32 {u}, {e}"));
        let odd = self.v(format!("and i32 {r}, 1"));
        let u = self.v(format!("xor i32 {u}, {odd}"));
        let o = self.v(format!("mul i32 {r}, {}", self.t.bk * 4));
        let u = self.v(format!("shl i32 {u}, 4"));
        let o = self.v(format!("add i32 {o}, {u}"));
        let o = self.v(format!("add i32 {o}, {raw_off}"));
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {o}"
        ))
    }
}
