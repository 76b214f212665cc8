//! The int8 kernels run on the host (`host_sim`), with the warp-collective
//! instructions emulated in LLVM IR: `ldmatrix`, `mma.sync` m16n8k32 and
//! `shfl.sync.bfly` exchange their lanes' operands through global arrays
//! between two block barriers (every thread of the kernel executes each of
//! them, in the same order, so a block barrier is a warp rendezvous);
//! `cp.async` copies at once (16 bytes, or zeros for a source size of 0),
//! and its commit and wait do nothing. The fragment layouts are those of the
//! PTX ISA (m16n8k32 `.s8`/`.u8`: A `a_i` at row `g + 8·(i%2)`, k `4q +
//! 16·(i/2)` + byte; B `b_i` at n `g`, k `4q + 16·i` + byte; D `d_i` at row
//! `g + 8·(i/2)`, column `2q + i%2`; `ldmatrix` lane `l` receives bytes
//! `4·(l%4) ..` of row `l/4` of each 8×16-byte matrix, whose rows lanes
//! `8i .. 8i+8` address). The kernels' outputs must equal an exact
//! reference with the CPU's requantization bit for bit. This checks the
//! index math of every path (swizzle, fragments, padding, epilogue swap);
//! `cp.async` ordering is not modelled.

use aoc_backend_ptx::kernels::gemm_s8::{
    QConvSpec, S8Tile, choose_tile, pack_weights, qconv_s8_tile,
};
use aoc_backend_ptx::{ModuleText, Sm};

use super::super::host_sim::{Mem, with_jit};

/// The emulation functions (IR) and the module with the intrinsics
/// renamed to them.
fn emulated(ir: &str) -> String {
    let renames = [
        (
            "@llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
            "@emu.ldmatrix",
        ),
        ("@llvm.nvvm.mma.m16n8k32.row.col.u8.s8", "@emu.mma.u8"),
        ("@llvm.nvvm.mma.m16n8k32.row.col.s8", "@emu.mma.s8"),
        ("@llvm.nvvm.shfl.sync.bfly.i32", "@emu.shfl"),
        ("@llvm.nvvm.cp.async.cg.shared.global.16.s", "@emu.cp"),
        ("@llvm.nvvm.cp.async.commit.group", "@emu.commit"),
        ("@llvm.nvvm.cp.async.wait.group", "@emu.wait"),
    ];
    let mut text: String = ir
        .lines()
        .filter(|l| !(l.starts_with("declare") && renames.iter().any(|(from, _)| l.contains(from))))
        .collect::<Vec<_>>()
        .join("\n");
    for (from, to) in renames {
        text = text.replace(&format!("{from}("), &format!("{to}("));
    }
    for d in [
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    ] {
        if !text.contains(d) {
            text.push_str(&format!("\n{d}"));
        }
    }
    text.push_str(&emu_functions());
    // The runner gives a block threads and a barrier when the kernel's text
    // names one; the emulations' barriers (a `shfl` of a kernel with K = 0)
    // need them too.
    text.replacen(
        "entry:\n",
        "entry:\n  ; the emulations call @llvm.nvvm.barrier.cta.sync.aligned.all(\n",
        1,
    )
}

/// `%lane`, `%wb` (the warp's first thread) and the slot of this thread,
/// after storing nothing: the common head of the emulations.
const HEAD: &str = "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %lane = and i32 %tid, 31
  %wb = sub i32 %tid, %lane
  %g = lshr i32 %lane, 2
  %q = and i32 %lane, 3
";

const BAR: &str = "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n";

fn emu_functions() -> String {
    let mut s = String::from(
        "
@emu.p = global [1024 x ptr] zeroinitializer
@emu.a = global [1024 x [16 x i8]] zeroinitializer
@emu.b = global [1024 x [8 x i8]] zeroinitializer
@emu.v = global [1024 x i32] zeroinitializer

define internal void @emu.commit() {
  ret void
}

define internal void @emu.wait(i32 %n) {
  ret void
}

define internal void @emu.cp(ptr %dst, ptr %src, i32 %n) {
  %some = icmp ne i32 %n, 0
  br i1 %some, label %copy, label %zero
copy:
  %x = load <16 x i8>, ptr %src, align 1
  store <16 x i8> %x, ptr %dst, align 16
  ret void
zero:
  store <16 x i8> zeroinitializer, ptr %dst, align 16
  ret void
}

define internal i32 @emu.shfl(i32 %mask, i32 %v, i32 %m, i32 %c) {
",
    );
    s.push_str(HEAD);
    s.push_str("  %slot = getelementptr [1024 x i32], ptr @emu.v, i32 0, i32 %tid\n");
    s.push_str("  store i32 %v, ptr %slot\n");
    s.push_str(BAR);
    s.push_str("  %other = xor i32 %tid, %m\n");
    s.push_str("  %os = getelementptr [1024 x i32], ptr @emu.v, i32 0, i32 %other\n");
    s.push_str("  %r = load i32, ptr %os\n");
    s.push_str(BAR);
    s.push_str("  ret i32 %r\n}\n");
    // ldmatrix.x4: matrix i's row r is addressed by lane 8i + r; lane l
    // gets bytes 4·(l%4) .. + 4 of row l/4.
    s.push_str("\ndefine internal { i32, i32, i32, i32 } @emu.ldmatrix(ptr %p) {\n");
    s.push_str(HEAD);
    s.push_str("  %slot = getelementptr [1024 x ptr], ptr @emu.p, i32 0, i32 %tid\n");
    s.push_str("  store ptr %p, ptr %slot\n");
    s.push_str(BAR);
    s.push_str(
        "  %qb = shl i32 %q, 2\n  %r0 = insertvalue { i32, i32, i32, i32 } poison, i32 0, 0\n",
    );
    for i in 0..4 {
        s.push_str(&format!(
            "  %l{i} = add i32 %wb, {}
  %l{i}g = add i32 %l{i}, %g
  %s{i} = getelementptr [1024 x ptr], ptr @emu.p, i32 0, i32 %l{i}g
  %b{i} = load ptr, ptr %s{i}
  %e{i} = getelementptr i8, ptr %b{i}, i32 %qb
  %x{i} = load i32, ptr %e{i}, align 4
  %r{} = insertvalue {{ i32, i32, i32, i32 }} %r{i}, i32 %x{i}, {i}
",
            8 * i,
            i + 1
        ));
    }
    s.push_str(BAR);
    s.push_str("  ret { i32, i32, i32, i32 } %r4\n}\n");
    for signed in [true, false] {
        s.push_str(&mma_function(signed));
    }
    s
}

/// `D = A·B + C` for one m16n8k32 fragment: each lane stores its A and B
/// registers as bytes, then computes its four D elements from all lanes'.
fn mma_function(signed: bool) -> String {
    let (name, ext) = if signed {
        ("s8", "sext")
    } else {
        ("u8", "zext")
    };
    let mut s = format!(
        "\ndefine internal {{ i32, i32, i32, i32 }} @emu.mma.{name}(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, i32 %c0, i32 %c1, i32 %c2, i32 %c3) {{\n"
    );
    s.push_str(HEAD);
    for i in 0..4 {
        s.push_str(&format!(
            "  %pa{i} = getelementptr [1024 x [16 x i8]], ptr @emu.a, i32 0, i32 %tid, i32 {}\n  store i32 %a{i}, ptr %pa{i}, align 1\n",
            4 * i
        ));
    }
    for i in 0..2 {
        s.push_str(&format!(
            "  %pb{i} = getelementptr [1024 x [8 x i8]], ptr @emu.b, i32 0, i32 %tid, i32 {}\n  store i32 %b{i}, ptr %pb{i}, align 1\n",
            4 * i
        ));
    }
    s.push_str(BAR);
    s.push_str("  %g4 = shl i32 %g, 2\n  %q2 = shl i32 %q, 1\n  %d = insertvalue { i32, i32, i32, i32 } poison, i32 0, 0\n");
    let mut d = "%d".to_string();
    for r in 0..4 {
        // Row g + 8·(r/2) (A lane g·4 + (k%16)/4, register (r/2) + 2·(k/16)),
        // column 2q + r%2 (B lane col·4 + (k%16)/4, register k/16).
        s.push_str(&format!(
            "  %col{r} = add i32 %q2, {}\n  %c4{r} = shl i32 %col{r}, 2\n",
            r % 2
        ));
        let mut acc = format!("%c{r}");
        for k in 0..32 {
            let t = format!("{r}_{k}");
            let la = k % 16 / 4;
            let ra = r / 2 + 2 * (k / 16);
            let rb = k / 16;
            s.push_str(&format!(
                "  %la{t} = add i32 %wb, %g4
  %la2{t} = add i32 %la{t}, {la}
  %pa{t} = getelementptr [1024 x [16 x i8]], ptr @emu.a, i32 0, i32 %la2{t}, i32 {}
  %xa{t} = load i8, ptr %pa{t}
  %ya{t} = {ext} i8 %xa{t} to i32
  %lb{t} = add i32 %wb, %c4{r}
  %lb2{t} = add i32 %lb{t}, {la}
  %pb{t} = getelementptr [1024 x [8 x i8]], ptr @emu.b, i32 0, i32 %lb2{t}, i32 {}
  %xb{t} = load i8, ptr %pb{t}
  %yb{t} = sext i8 %xb{t} to i32
  %m{t} = mul i32 %ya{t}, %yb{t}
  %s{t} = add i32 {acc}, %m{t}
",
                4 * ra + k % 4,
                4 * rb + k % 4
            ));
            acc = format!("%s{t}");
        }
        s.push_str(&format!(
            "  %d{} = insertvalue {{ i32, i32, i32, i32 }} {d}, i32 {acc}, {r}\n",
            r + 1
        ));
        d = format!("%d{}", r + 1);
    }
    s.push_str(BAR);
    s.push_str(&format!("  ret {{ i32, i32, i32, i32 }} {d}\n}}\n"));
    s
}

/// Deterministic bytes (a small LCG).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// The exact reference: i64 accumulation (padding reads `x_zero`), then
/// `aoc_runtime::kernels::qconv::requantize`'s f32 operations.
fn reference(
    s: &QConvSpec,
    x: &[u8],
    w: &[i8],
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
) -> Vec<u8> {
    let g = &s.geom;
    let (cg, ocg) = (g.c / g.group, g.oc / g.group);
    let mut y = Vec::new();
    let xv = |b: u8| {
        if s.q.x_signed {
            b as i8 as i64
        } else {
            b as i64
        }
    };
    for img in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for o in 0..g.oc {
                    let grp = o / ocg;
                    let mut acc = 0i64;
                    for ky in 0..g.kh {
                        for kx in 0..g.kw {
                            let iy =
                                (oy * g.stride[0] + ky * g.dilation[0]) as i64 - g.pads[0] as i64;
                            let ix =
                                (ox * g.stride[1] + kx * g.dilation[1]) as i64 - g.pads[1] as i64;
                            for ci in 0..cg {
                                let v = if iy < 0 || ix < 0 || iy >= g.h as i64 || ix >= g.w as i64
                                {
                                    s.q.x_zero as i64
                                } else {
                                    let at = ((img * g.h + iy as u64) * g.w + ix as u64) * g.c
                                        + grp * cg
                                        + ci;
                                    xv(x[at as usize])
                                };
                                let wk = w[(((o * g.kh + ky) * g.kw + kx) * cg + ci) as usize];
                                acc += v * wk as i64;
                            }
                        }
                    }
                    let acc = (acc as i32).wrapping_add(comp[o as usize]);
                    let r = (acc as f32)
                        .mul_add(scale[o as usize], shift[o as usize])
                        .round_ties_even();
                    let lo = (s.q.y_min as i64 - s.q.y_zero as i64) as f32;
                    let hi = (s.q.y_max as i64 - s.q.y_zero as i64) as f32;
                    y.push((r.clamp(lo, hi) as i64 + s.q.y_zero as i64) as u8);
                }
            }
        }
    }
    y
}

/// Runs spec `s` on the host for sm_86 (three stages, at most 48 KiB of
/// shared memory) with `tile` (None: the chosen one) and compares with
/// [`reference`].
pub fn check(what: &str, s: &QConvSpec, tile: Option<S8Tile>, seed: u64) {
    let g = &s.geom;
    let mut m = ModuleText::new();
    let t = tile.unwrap_or_else(|| choose_tile(s));
    let geo = qconv_s8_tile(&mut m, "k", s, Sm::Sm86, t).unwrap();
    assert!(geo.smem <= 49152, "{what}: {geo:?}");
    let ir = emulated(&m.finish());
    let cg = g.c / g.group;
    let k = (g.kh * g.kw * cg) as usize;
    let x = bytes((g.n * g.h * g.w * g.c) as usize, seed);
    let w: Vec<i8> = bytes(g.oc as usize * k, seed + 1)
        .iter()
        .map(|&b| b as i8)
        .collect();
    let comp: Vec<i32> = bytes(g.oc as usize, seed + 2)
        .iter()
        .map(|&b| (b as i32 - 128) * 23)
        .collect();
    // Output scales that reach past the range; every third a power of two
    // with a shift of a quarter (ties to round to even).
    let mag = 4.0 / (128.0 * 128.0 * (k.max(1) as f32).sqrt());
    let scale: Vec<f32> = bytes(g.oc as usize, seed + 3)
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if i % 3 == 0 {
                1.0 / 256.0
            } else {
                (b as f32 / 64.0 + 0.2) * mag * 127.0
            }
        })
        .collect();
    let shift: Vec<f32> = bytes(g.oc as usize, seed + 4)
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if i % 3 == 0 {
                (b as i32 % 16 - 8) as f32 * 0.25
            } else {
                b as f32 / 8.0 - 16.0
            }
        })
        .collect();
    let want = reference(s, &x, &w, &comp, &scale, &shift);
    let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let packed: Vec<u8> = pack_weights(s, &w).iter().map(|&b| b as u8).collect();
    let mut bufs = [
        Mem::new(&x, 0),
        Mem::new(&packed, 0),
        Mem::new(&i32s(&comp), 0),
        Mem::new(&f32s(&scale), 0),
        Mem::new(&f32s(&shift), 0),
        Mem::new(&vec![0xA5; want.len()], 0),
    ];
    with_jit(&ir, |run| {
        let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
        run("k", geo, &mut refs);
    });
    let got = bufs[5].bytes();
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        let bad = (0..want.len()).filter(|&i| got[i] != want[i]).count();
        panic!(
            "{what}: {bad} of {} bytes differ; first at {i} (row {}, channel {}): got {} want {}",
            want.len(),
            i as u64 / g.oc,
            i as u64 % g.oc,
            got[i],
            want[i]
        );
    }
}
