//! The k loop of the wgmma GEMM: the `cp.async` copies of each k-tile into
//! the ring, the matrix descriptors, and `wgmma` with its fence, commit and
//! waits as inline assembly (see the parent's doc for the pipeline).

use super::{A_BYTES, ALIGN, BM, Gen, Operands, ROW, THREADS};
use crate::kernels::{ConvGeom, conv_index};
use aoc_plan::plan::QuantElem;

/// Where this thread's copies of a k-tile go: per A chunk the element
/// offset of its row's first chunk column (i64) and its byte count (i32,
/// before the k tail); the byte offsets of the A and B chunks within a
/// stage; B's element offset of this thread's first chunk in k-tile 0.
struct Copies {
    a_src: Vec<String>,
    a_bytes: Vec<String>,
    a_dst: String,
    b_src: String,
    b_dst: String,
    /// Column (in k) of this thread's A chunks within a k-tile.
    a_col: String,
    /// An implicit convolution's A: per chunk the input origin row and
    /// column of its pixel (i32, negative in the padding) and whether its
    /// GEMM row exists; `a_src` is then the offset of the pixel's channel
    /// 0 (i64, meaningful only where the tap lies in the image).
    pixels: Vec<(String, String, String)>,
}

impl Gen<'_> {
    /// The per-thread copy addresses (see [`Copies`]); `ring` is the byte
    /// offset of the aligned ring from `@aoc_wg_smem`.
    fn copies(&mut self, nt: &str, ring: &str) -> Copies {
        let (t, s, p) = (self.t, self.s, self.p);
        let tid = self.tid.clone();
        // A: 8 threads per 128-byte row, rows tid/8 + 32·i.
        let c = self.v(format!("and i32 {tid}, 7"));
        let r0 = self.v(format!("lshr i32 {tid}, 3"));
        let a_col = self.v(format!("mul i32 {c}, {}", p.chunk()));
        let c64 = self.v(format!("zext i32 {a_col} to i64"));
        let mut a_src = Vec::new();
        let mut a_bytes = Vec::new();
        let mut pixels = Vec::new();
        for i in 0..BM * (ROW / 16) / THREADS {
            let row = self.v(format!("add i32 {}, {r0}", self.bm0));
            let row = self.v(format!("add i32 {row}, {}", 32 * i));
            let ok = self.v(format!("icmp ult i32 {row}, {}", s.m));
            if let Some(g) = self.conv {
                let (iy, ix, off) = conv_index::pixel(&mut self.b, &g, &row, "0", "i64");
                a_src.push(off);
                pixels.push((iy, ix, ok));
                continue;
            }
            let r64 = self.v(format!("zext i32 {row} to i64"));
            let o = self.v(format!("mul i64 {r64}, {}", self.row));
            let o = self.v(format!("add i64 {o}, {c64}"));
            a_src.push(self.v(format!("select i1 {ok}, i64 {o}, i64 0")));
            a_bytes.push(self.v(format!("select i1 {ok}, i32 16, i32 0")));
        }
        // Row r0 (and r0 + 32i, the same r % 8), chunk c at c ^ (r % 8).
        let sw = self.v(format!("and i32 {r0}, 7"));
        let sw = self.v(format!("xor i32 {c}, {sw}"));
        let sw = self.v(format!("shl i32 {sw}, 4"));
        let a_dst = self.v(format!("shl i32 {r0}, 7"));
        let a_dst = self.v(format!("add i32 {a_dst}, {sw}"));
        let a_dst = self.v(format!("add i32 {a_dst}, {ring}"));
        // B: block (0, nt), this thread's first 16 bytes.
        let nt64 = self.v(format!("zext i32 {nt} to i64"));
        let b_src = self.v(format!(
            "mul i64 {nt64}, {}",
            self.ktiles * (p.bk() * t.bn) as u64
        ));
        let t8 = self.v(format!("mul i32 {tid}, {}", p.chunk()));
        let t8 = self.v(format!("zext i32 {t8} to i64"));
        let b_src = self.v(format!("add i64 {b_src}, {t8}"));
        let b_dst = self.v(format!("shl i32 {tid}, 4"));
        let b_dst = self.v(format!("add i32 {b_dst}, {}", A_BYTES));
        let b_dst = self.v(format!("add i32 {b_dst}, {ring}"));
        Copies {
            a_src,
            a_bytes,
            a_dst,
            b_src,
            b_dst,
            a_col,
            pixels,
        }
    }

    /// `cp.async` of this thread's A chunks of the k-tile starting at
    /// column `k0` (i32) of an implicit convolution (`c` a multiple of the
    /// chunk's elements: each chunk is 8 halves or 16 bytes of channels of
    /// one filter tap; the thread's chunks share their column `kk`, so one
    /// tap per k-tile and thread) into the stage at byte `stage`; chunks
    /// whose row is past `m` or whose column is past `k` are zero-filled
    /// (B is zero there, the rows are not stored), and so are chunks whose
    /// tap falls in the padding, except for integers with a nonzero
    /// `x_zero`: the padding is that value, stored by the thread.
    fn issue_conv(&mut self, cp: &Copies, g: &ConvGeom, k0: &str, stage: &str) {
        let kk = self.v(format!("add i32 {k0}, {}", cp.a_col));
        let k_ok = self.v(format!("icmp ult i32 {kk}, {}", self.s.k));
        let tap = self.v(format!("udiv i32 {kk}, {}", g.c));
        let ci = self.v(format!("urem i32 {kk}, {}", g.c));
        let ky = self.v(format!("udiv i32 {tap}, {}", g.kw));
        let kx = self.v(format!("urem i32 {tap}, {}", g.kw));
        let dy = self.v(format!("mul i32 {ky}, {}", g.dilation[0]));
        let dx = self.v(format!("mul i32 {kx}, {}", g.dilation[1]));
        let tap_off = conv_index::tap_offset(&mut self.b, g, [&dy, &dx, &ci], "0", "i64");
        for (i, (src, (iy, ix, row_ok))) in cp.a_src.iter().zip(&cp.pixels).enumerate() {
            let y = self.v(format!("add i32 {iy}, {dy}"));
            let x = self.v(format!("add i32 {ix}, {dx}"));
            let yin = self.v(format!("icmp ult i32 {y}, {}", g.h));
            let xin = self.v(format!("icmp ult i32 {x}, {}", g.w));
            let inside = self.v(format!("and i1 {yin}, {xin}"));
            let real = self.v(format!("and i1 {row_ok}, {k_ok}"));
            let ok = self.v(format!("and i1 {inside}, {real}"));
            let o = self.v(format!("add i64 {src}, {tap_off}"));
            let o = self.v(format!("select i1 {ok}, i64 {o}, i64 0"));
            let bytes = self.v(format!("select i1 {ok}, i32 16, i32 0"));
            let zero = match self.p {
                Operands::Quant(q, _) if q.x_zero != 0 => q.x_zero as u8,
                _ => {
                    self.cp_async_a(cp, i, &o, &bytes, stage);
                    continue;
                }
            };
            let out = self.v(format!("xor i1 {inside}, true"));
            let pad = self.v(format!("and i1 {real}, {out}"));
            let (l_pad, l_copy, l_end) = (self.b.label("pad"), self.b.label("copy"), self.b.label("pad.end"));
            self.b.cond_br(&pad, &l_pad, &l_copy);
            self.b.place(&l_pad);
            let dst = self.a_dst(cp, i, stage);
            let z = i32::from_ne_bytes([zero; 4]);
            self.ins(format!(
                "store <4 x i32> <i32 {z}, i32 {z}, i32 {z}, i32 {z}>, ptr addrspace(3) {dst}, align 16"
            ));
            self.b.br(&l_end);
            self.b.place(&l_copy);
            self.cp_async_a(cp, i, &o, &bytes, stage);
            self.b.br(&l_end);
            self.b.place(&l_end);
        }
    }

    /// `cp.async` of this thread's A chunks of the k-tile starting at
    /// column `k0` (i32; `k064` as i64) of a strided A into the stage at
    /// byte `stage`: rows past `m` and the k tail zero-filled.
    fn issue_a(&mut self, cp: &Copies, k0: &str, k064: &str, stage: &str) {
        let s = self.s;
        let left = if s.k.is_multiple_of(self.p.bk() as u64) {
            None
        } else {
            // Elements of this thread's chunk inside k: k − (k0 + col),
            // clamped to 0 … chunk; as bytes.
            let kk = self.v(format!("add i32 {k0}, {}", cp.a_col));
            let l = self.v(format!("sub i32 {}, {kk}", s.k));
            let l = self.v(format!("call i32 @llvm.smax.i32(i32 {l}, i32 0)"));
            let l = self.v(format!("call i32 @llvm.smin.i32(i32 {l}, i32 {})", self.p.chunk()));
            Some(self.v(format!("mul i32 {l}, {}", self.p.bytes())))
        };
        for (i, (src, bytes)) in cp.a_src.iter().zip(&cp.a_bytes).enumerate() {
            let (bytes, o) = match &left {
                None => {
                    let o = self.v(format!("add i64 {src}, {k064}"));
                    (bytes.clone(), o)
                }
                Some(l) => {
                    let nb = self.v(format!("call i32 @llvm.smin.i32(i32 {bytes}, i32 {l})"));
                    let some = self.v(format!("icmp ne i32 {nb}, 0"));
                    let o = self.v(format!("add i64 {src}, {k064}"));
                    let o = self.v(format!("select i1 {some}, i64 {o}, i64 0"));
                    (nb, o)
                }
            };
            self.cp_async_a(cp, i, &o, &bytes, stage);
        }
    }

    /// One 16-byte `cp.async` of A chunk `i` of this thread from element
    /// `o` of A (`bytes` of it, the rest zero-filled) into the stage at
    /// byte `stage`.
    fn cp_async_a(&mut self, cp: &Copies, i: usize, o: &str, bytes: &str, stage: &str) {
        let el = self.p.elem();
        let srcp = self.v(format!("getelementptr {el}, ptr addrspace(1) %p0, i64 {o}"));
        let dst = self.a_dst(cp, i, stage);
        self.ins(format!(
            "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {srcp}, i32 {bytes})"
        ));
    }

    /// Where A chunk `i` of this thread goes in the stage at byte `stage`.
    fn a_dst(&mut self, cp: &Copies, i: usize, stage: &str) -> String {
        let d = self.v(format!("add i32 {}, {stage}", cp.a_dst));
        let d = self.v(format!("add i32 {d}, {}", i as u32 * 32 * ROW));
        self.smem(&d)
    }

    /// `cp.async` (not committed) of k-tile `kt` into the stage at byte
    /// `stage` of the ring.
    fn issue(&mut self, cp: &Copies, kt: &str, stage: &str) {
        let (t, p) = (self.t, self.p);
        let k0 = self.v(format!("mul i32 {kt}, {}", p.bk()));
        let k064 = self.v(format!("zext i32 {k0} to i64"));
        match self.conv {
            Some(g) => self.issue_conv(cp, &g, &k0, stage),
            None => self.issue_a(cp, &k0, &k064, stage),
        }
        let bo = self.v(format!("mul i64 {k064}, {}", t.bn));
        let bo = self.v(format!("add i64 {bo}, {}", cp.b_src));
        for i in 0..t.b_bytes() / 16 / THREADS {
            let o = self.v(format!("add i64 {bo}, {}", i * THREADS * p.chunk()));
            let srcp = self.v(format!("getelementptr {}, ptr addrspace(1) %p1, i64 {o}", p.elem()));
            let d = self.v(format!("add i32 {}, {stage}", cp.b_dst));
            let d = self.v(format!("add i32 {d}, {}", i * THREADS * 16));
            let dst = self.smem(&d);
            self.ins(format!(
                "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {srcp}, i32 16)"
            ));
        }
    }

    pub(super) fn smem(&mut self, off: &str) -> String {
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_wg_smem, i32 {off}"
        ))
    }

    /// The byte offset of k-tile `kt`'s stage within the ring.
    fn stage_of(&mut self, kt: &str) -> String {
        let j = self.v(format!("urem i32 {kt}, {}", self.t.stages));
        self.v(format!("mul i32 {j}, {}", self.t.stage_bytes()))
    }

    /// Prologue and k loop (module doc).
    pub(super) fn mainloop(&mut self, nt: &str, ktp: &str) {
        let t = self.t;
        let ktiles = self.ktiles;
        // The ring at the first 1024-byte boundary of dynamic shared memory.
        let base = self.v("ptrtoint ptr addrspace(3) @aoc_wg_smem to i32");
        let abs = self.v(format!("add i32 {base}, {}", ALIGN - 1));
        let abs = self.v(format!("and i32 {abs}, {}", !(ALIGN - 1) as i32));
        let ring = self.v(format!("sub i32 {abs}, {base}"));
        let cp = self.copies(nt, &ring);
        let wg = self.v(format!("lshr i32 {}, 7", self.tid));
        let a_wg = self.v(format!("mul i32 {wg}, {}", 64 * 128));
        for j in 0..self.ahead_tiles() {
            if (j as u64) < ktiles {
                let st = (j * t.stage_bytes()).to_string();
                self.issue(&cp, &j.to_string(), &st);
            }
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        if self.promoted() {
            return self.promoted_loop(&cp, ktp, &abs, &a_wg);
        }
        self.b.br("loop");
        self.b.place("loop");
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        let (da, db) = self.tile_head(&cp, &kt, &abs, &a_wg);
        let mut accs = self.load_acc();
        accs = self.tied("wgmma.fence.sync.aligned;", &accs, &[]);
        for ks in 0..ROW / 32 {
            // k step ks: 32 bytes into each 128-byte row (>> 4 = 2).
            let a = self.v(format!("add i64 {da}, {}", 2 * ks));
            let b = self.v(format!("add i64 {db}, {}", 2 * ks));
            accs = self.wgmma(&accs, &a, &b, true);
        }
        self.ins("call void asm sideeffect \"wgmma.commit_group.sync.aligned;\", \"~{memory}\"() convergent");
        accs = self.tied("wgmma.wait_group.sync.aligned 1;", &accs, &[]);
        self.store_acc(&accs);
        let nk = self.v(format!("add i32 {kt}, 1"));
        self.ins(format!("store i32 {nk}, ptr {ktp}, align 4"));
        let more = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        self.b.cond_br(&more, "loop", "drain");
        self.b.place("drain");
        let accs = self.load_acc();
        let accs = self.tied("wgmma.wait_group.sync.aligned 0;", &accs, &[]);
        self.store_acc(&accs);
    }

    /// The start of k-tile `kt` (i32): wait for its copies, the async-proxy
    /// fence and the barrier, the copies of tile `kt + stages − 2`, and the
    /// descriptors `(A of this warpgroup, B)` of the tile's stage.
    fn tile_head(&mut self, cp: &Copies, kt: &str, abs: &str, a_wg: &str) -> (String, String) {
        self.tile_sync(cp, kt);
        self.tile_descs(kt, abs, a_wg)
    }

    /// The synchronization part of [`Gen::tile_head`].
    fn tile_sync(&mut self, cp: &Copies, kt: &str) {
        self.own_copies_landed();
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        self.issue_far(cp, kt);
    }

    /// k-tiles whose copies are in flight ahead of the one multiplied:
    /// `stages − 2`, so a tile's stage is refilled once the tile two back
    /// has retired; `stages − 3` where a promotion covers two tiles
    /// ([`KLoop::Pairs`](super::KLoop::Pairs)), whose second tile's copies
    /// are waited for while the first's products still run.
    fn ahead_tiles(&self) -> u32 {
        self.t.stages - 1 - self.kloop.tiles()
    }

    /// This thread's copies of the oldest k-tile in flight have landed
    /// (`ahead − 1` groups may still be pending), and are visible to the
    /// async proxy (`wgmma`) once a barrier orders the other threads'.
    fn own_copies_landed(&mut self) {
        self.ins(format!("call void @llvm.nvvm.cp.async.wait.group(i32 {})", self.ahead_tiles() - 1));
        self.ins("call void asm sideeffect \"fence.proxy.async.shared::cta;\", \"~{memory}\"() convergent");
    }

    /// The copies of k-tile `kt + ahead` (i32; none past the last
    /// tile) into its stage, committed as one group (empty past k).
    fn issue_far(&mut self, cp: &Copies, kt: &str) {
        let far = self.v(format!("add i32 {kt}, {}", self.ahead_tiles()));
        let has_far = self.v(format!("icmp ult i32 {far}, {}", self.ktiles));
        let fstage = self.stage_of(&far);
        let (l_copy, l_end) = (self.b.label("copy"), self.b.label("copy.end"));
        self.b.cond_br(&has_far, &l_copy, &l_end);
        self.b.place(&l_copy);
        self.issue(cp, &far, &fstage);
        self.b.br(&l_end);
        self.b.place(&l_end);
        self.ins("call void @llvm.nvvm.cp.async.commit.group()");
    }

    /// The k loop's trip count through an empty assembly statement: a
    /// loop LLVM unrolls (a short k) leaves ptxas without the registers
    /// for its wgmma pipeline in some kernels, which it then serializes.
    fn opaque_ktiles(&mut self) -> String {
        self.v(format!("call i32 asm sideeffect \"mov.u32 $0, $1;\", \"=r,r\"(i32 {})", self.ktiles))
    }

    /// The descriptors of [`Gen::tile_head`].
    fn tile_descs(&mut self, kt: &str, abs: &str, a_wg: &str) -> (String, String) {
        // Descriptors of k-tile kt's stage: A of this warpgroup, B.
        // Descriptor bits other than the address: leading byte offset 16
        // (>> 4 = 1), stride byte offset 1024 (>> 4 = 64), 128-byte swizzle.
        let bits: u64 = (1 << 16) | (64 << 32) | (1 << 62);
        let cstage = self.stage_of(kt);
        let a = self.v(format!("add i32 {abs}, {cstage}"));
        let a = self.v(format!("add i32 {a}, {a_wg}"));
        let bsm = self.v(format!("add i32 {abs}, {cstage}"));
        let bsm = self.v(format!("add i32 {bsm}, {A_BYTES}"));
        let desc = |g: &mut Self, addr: &str| {
            let x = g.v(format!("lshr i32 {addr}, 4"));
            let x = g.v(format!("and i32 {x}, 16383"));
            let x = g.v(format!("zext i32 {x} to i64"));
            g.v(format!("or i64 {x}, {}", bits as i64))
        };
        (desc(self, &a), desc(self, &bsm))
    }

    /// Whether the k loop promotes (the parent's module doc, "fp8"): e4m3
    /// products, whose tensor-core sums are not f32-exact.
    pub(super) fn promoted(&self) -> bool {
        matches!(self.p, Operands::Quant(q, _) if q.elem != QuantElem::Int8)
    }

    /// The fp8 k loop with f32 promotion (parent's module doc): each run
    /// of [`KLoop::tiles`](super::KLoop::tiles) k-tiles multiplies into
    /// scratch accumulators started afresh (scale-d 0 on its first
    /// `wgmma`), the run's later
    /// tiles chained on the earlier ones' products in flight after their
    /// copies are waited for and the barrier passed; while the last tile's
    /// products run, the next run's first tile is waited for and the tile
    /// after the ring's reach issued; then `wait_group 0` and the scratch
    /// is added into the f32 accumulators with ordinary adds.
    fn promoted_loop(&mut self, cp: &Copies, ktp: &str, abs: &str, a_wg: &str) {
        let per = self.kloop.tiles();
        let ktiles = self.opaque_ktiles();
        self.tile_sync(cp, "0");
        let (l_loop, l_next, l_wait) = (self.b.label("loop"), self.b.label("loop.next"), self.b.label("loop.wait"));
        self.b.br(&l_loop);
        self.b.place(&l_loop);
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        let mut sc = self.load_set();
        for i in 0..per {
            let k = if i == 0 {
                kt.clone()
            } else {
                let k = self.v(format!("add i32 {kt}, {i}"));
                self.tile_sync(cp, &k);
                k
            };
            let (da, db) = self.tile_descs(&k, abs, a_wg);
            sc = self.tile_products(&sc, &da, &db, i > 0);
        }
        let nk = self.v(format!("add i32 {kt}, {per}"));
        let more = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        self.b.cond_br(&more, &l_next, &l_wait);
        self.b.place(&l_next);
        self.tile_sync(cp, &nk);
        self.b.br(&l_wait);
        self.b.place(&l_wait);
        let sc = self.tied("wgmma.wait_group.sync.aligned 0;", &sc, &[]);
        self.promote(&sc);
        self.store_set(&sc);
        self.ins(format!("store i32 {nk}, ptr {ktp}, align 4"));
        let l_end = self.b.label("loop.end");
        self.b.cond_br(&more, &l_loop, &l_end);
        self.b.place(&l_end);
    }

    /// One k-tile's four `wgmma` into the scratch set `sc` (the first with
    /// scale-d 0 unless `chained`: then all add to the products in
    /// flight), fenced and committed; returns the set in flight.
    fn tile_products(&mut self, sc: &[String], da: &str, db: &str, chained: bool) -> Vec<String> {
        let mut sc = self.tied("wgmma.fence.sync.aligned;", sc, &[]);
        for ks in 0..ROW / 32 {
            let a = self.v(format!("add i64 {da}, {}", 2 * ks));
            let b = self.v(format!("add i64 {db}, {}", 2 * ks));
            sc = self.wgmma(&sc, &a, &b, chained || ks > 0);
        }
        self.ins("call void asm sideeffect \"wgmma.commit_group.sync.aligned;\", \"~{memory}\"() convergent");
        sc
    }

    /// The f32 accumulators += a retired scratch set (ordinary f32 adds).
    fn promote(&mut self, scratch: &[String]) {
        let accs = self.load_acc();
        let sums: Vec<String> = accs
            .iter()
            .zip(scratch)
            .map(|(a, s)| self.v(format!("fadd float {a}, {s}")))
            .collect();
        self.store_acc(&sums);
    }

    fn load_set(&mut self) -> Vec<String> {
        (0..self.nacc())
            .map(|i| {
                let p = self.scratch_ptr(i);
                self.v(format!("load float, ptr {p}, align 4"))
            })
            .collect()
    }

    fn store_set(&mut self, vals: &[String]) {
        for (i, x) in vals.iter().enumerate() {
            let p = self.scratch_ptr(i as u32);
            self.ins(format!("store float {x}, ptr {p}, align 4"));
        }
    }

    fn load_acc(&mut self) -> Vec<String> {
        let (ty, _) = self.p.acc();
        (0..self.nacc())
            .map(|i| {
                let p = self.acc_ptr(i);
                self.v(format!("load {ty}, ptr {p}, align 4"))
            })
            .collect()
    }

    fn store_acc(&mut self, accs: &[String]) {
        let (ty, _) = self.p.acc();
        for (i, x) in accs.iter().enumerate() {
            let p = self.acc_ptr(i as u32);
            self.ins(format!("store {ty} {x}, ptr {p}, align 4"));
        }
    }

    /// Inline assembly `text` that takes the accumulators and gives them
    /// back in the same registers (operands `$0 … $(n-1)`), with `extra`
    /// inputs `(constraint, typed value)` as `$n …`.
    fn tied(&mut self, text: &str, accs: &[String], extra: &[(&str, String)]) -> Vec<String> {
        let n = accs.len();
        let (acc, con) = self.p.acc();
        let ty = format!("{{ {} }}", vec![acc; n].join(", "));
        let mut cons: Vec<String> = vec![format!("={con}"); n];
        cons.extend(extra.iter().map(|(c, _)| c.to_string()));
        cons.extend((0..n).map(|i| i.to_string()));
        cons.push("~{memory}".to_string());
        let args: Vec<String> = extra
            .iter()
            .map(|(_, v)| v.clone())
            .chain(accs.iter().map(|a| format!("{acc} {a}")))
            .collect();
        let r = self.v(format!(
            "call {ty} asm sideeffect \"{text}\", \"{}\"({}) convergent",
            cons.join(","),
            args.join(", ")
        ));
        (0..n)
            .map(|i| self.v(format!("extractvalue {ty} {r}, {i}")))
            .collect()
    }

    /// One `wgmma.mma_async` (m64n{bn}k16 of halves, m64n{bn}k32 of
    /// integer or e4m3 bytes) accumulating into `accs` (scale-d 1), or with
    /// `accumulate` false overwriting them (scale-d 0: D = A·B).
    fn wgmma(&mut self, accs: &[String], da: &str, db: &str, accumulate: bool) -> Vec<String> {
        let n = accs.len();
        let regs: Vec<String> = (0..n).map(|i| format!("${i}")).collect();
        // Halves take scale-a/b 1 and no transposes; integers take none.
        let (form, tail) = match self.p {
            Operands::Half(h) => {
                let p = h.ptx();
                (format!("k16.f32.{p}.{p}"), ", 1, 1, 0, 0")
            }
            // e4m3 takes scale-a/b 1 (no transposes for 8-bit types).
            Operands::Quant(q, _) => match q.elem {
                QuantElem::Int8 => {
                    let a = if q.x_signed { "s8" } else { "u8" };
                    (format!("k32.s32.{a}.s8"), "")
                }
                QuantElem::E4M3 | QuantElem::E4M3ToF32 => ("k32.f32.e4m3.e4m3".to_string(), ", 1, 1"),
            },
        };
        let text = format!(
            "{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, ${}, 0;\\0Awgmma.mma_async.sync.aligned.m64n{}{form} {{{}}}, ${}, ${}, p{tail};\\0A}}",
            n + 2,
            self.t.bn,
            regs.join(", "),
            n,
            n + 1
        );
        let extra = [
            ("l", format!("i64 {da}")),
            ("l", format!("i64 {db}")),
            ("r", format!("i32 {}", accumulate as u32)),
        ];
        self.tied(&text, accs, &extra)
    }
}
