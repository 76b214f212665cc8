//! The 2:4 sparse GEMM runs on the host (`host_sim`) with `mma.sp`
//! emulated in LLVM IR: each lane stores its A, B and metadata registers
//! in global arrays between two block barriers (a warp rendezvous), then
//! computes its four D elements from all lanes'. The layouts are the PTX
//! ISA's for sparse m16n8k32 f16 with sparsity selector 0 (as the MLIR
//! sparse-mma integration test reads them): A register `i` of lane `4g+q`
//! holds compressed columns `2q, 2q+1` (+8 for `i ≥ 2`) of row `g` (+8 for
//! odd `i`); lanes `4g`, `4g+1` pass the metadata of rows `g` (low half)
//! and `g+8` (high half) for compressed columns 0-7 and 8-15, two bits per
//! value from the low bit up; B register `j` of lane `4n+q` holds k = `2q +
//! 8j` and the next; D `d_r` is row `g + 8·(r/2)`, column `2q + r%2`. With
//! small integer data every sum is exact, so the kernel's output must equal
//! the reference exactly: this checks the kernel's fragment addressing,
//! metadata selection, k loop, bounds and stores against those layouts.

use aoc_backend_ptx::kernels::gemm_sp::{SpGemmSpec, SpTile, SparseGemmSpec, gemm_sp_f16, gemm_sp_tiled, pack_weight};
use aoc_backend_ptx::expr::{Binary, Expr, Unary};
use aoc_backend_ptx::kernels::GemmEpilogue;
use aoc_backend_ptx::{ModuleText, Sm};
use aoc_ir::ops::sparse;
use aoc_ir::{Scalar, Tensor, TensorType};

use super::super::host_sim::{Mem, with_jit};

const HEAD: &str = "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %lane = and i32 %tid, 31
  %wb = sub i32 %tid, %lane
  %g = lshr i32 %lane, 2
  %q = and i32 %lane, 3
";

const BAR: &str = "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n";

/// An f16 (low 16 bits of `%h`; normal or zero) as f32.
const H2F: &str = "
define internal float @emu.h2f(i32 %h) {
  %m = and i32 %h, 32767
  %z = icmp eq i32 %m, 0
  %s = and i32 %h, 32768
  %s32 = shl i32 %s, 16
  %e = lshr i32 %m, 10
  %e2 = add i32 %e, 112
  %e3 = shl i32 %e2, 23
  %f = and i32 %m, 1023
  %f2 = shl i32 %f, 13
  %b = or i32 %e3, %f2
  %b2 = or i32 %b, %s32
  %r = select i1 %z, i32 %s32, i32 %b2
  %x = bitcast i32 %r to float
  ret float %x
}
";

/// Half `h` (0 low, 1 high) of register `reg` of lane `lane` in `array`.
fn half_of(s: &mut String, t: &str, array: &str, lane: &str, reg: &str, h: &str) -> String {
    s.push_str(&format!(
        "  %p{t} = getelementptr [1024 x [4 x i32]], ptr {array}, i32 0, i32 {lane}, i32 {reg}
  %w{t} = load i32, ptr %p{t}
  %sh{t} = shl i32 {h}, 4
  %v{t} = lshr i32 %w{t}, %sh{t}
  %f{t} = call float @emu.h2f(i32 %v{t})
"
    ));
    format!("%f{t}")
}

fn mma_sp_function() -> String {
    let mut s = String::from(
        "
@emu.sp.a = global [1024 x [4 x i32]] zeroinitializer
@emu.sp.b = global [1024 x [4 x i32]] zeroinitializer
@emu.sp.e = global [1024 x i32] zeroinitializer
",
    );
    s.push_str(H2F);
    s.push_str("\ndefine internal { float, float, float, float } @emu.mma.sp(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, i32 %b2, i32 %b3, i32 %e, float %c0, float %c1, float %c2, float %c3) {\n");
    s.push_str(HEAD);
    for i in 0..4 {
        s.push_str(&format!(
            "  %sa{i} = getelementptr [1024 x [4 x i32]], ptr @emu.sp.a, i32 0, i32 %tid, i32 {i}\n  store i32 %a{i}, ptr %sa{i}\n  %sb{i} = getelementptr [1024 x [4 x i32]], ptr @emu.sp.b, i32 0, i32 %tid, i32 {i}\n  store i32 %b{i}, ptr %sb{i}\n"
        ));
    }
    s.push_str("  %se = getelementptr [1024 x i32], ptr @emu.sp.e, i32 0, i32 %tid\n  store i32 %e, ptr %se\n");
    s.push_str(BAR);
    s.push_str("  %g4 = shl i32 %g, 2\n  %lg = add i32 %wb, %g4\n  %q2 = shl i32 %q, 1\n  %d = insertvalue { float, float, float, float } poison, float 0.0, 0\n");
    let mut d = "%d".to_string();
    for r in 0..4 {
        s.push_str(&format!("  %n{r} = add i32 %q2, {}\n  %n4{r} = shl i32 %n{r}, 2\n  %ln{r} = add i32 %wb, %n4{r}\n", r % 2));
        let mut acc = format!("%c{r}");
        for cc in 0..16 {
            let t = format!("{r}_{cc}");
            // A: lane 4g + (cc%8)/2, register r/2 + 2·(cc/8), half cc%2.
            s.push_str(&format!("  %la{t} = add i32 %lg, {}\n", (cc % 8) / 2));
            let a = half_of(&mut s, &format!("a{t}"), "@emu.sp.a", &format!("%la{t}"), &format!("{}", r / 2 + 2 * (cc / 8)), &format!("{}", cc % 2));
            // Metadata: lane 4g + cc/8, half r/2, bits 2·(cc%8).
            s.push_str(&format!(
                "  %le{t} = add i32 %lg, {}
  %pe{t} = getelementptr [1024 x i32], ptr @emu.sp.e, i32 0, i32 %le{t}
  %we{t} = load i32, ptr %pe{t}
  %xe{t} = lshr i32 %we{t}, {}
  %idx{t} = and i32 %xe{t}, 3
  %k{t} = add i32 %idx{t}, {}
  %k8{t} = and i32 %k{t}, 7
  %kq{t} = lshr i32 %k8{t}, 1
  %lb{t} = add i32 %ln{r}, %kq{t}
  %rb{t} = lshr i32 %k{t}, 3
  %hb{t} = and i32 %k{t}, 1
",
                cc / 8,
                16 * (r / 2) + 2 * (cc % 8),
                4 * (cc / 2)
            ));
            let b = half_of(&mut s, &format!("b{t}"), "@emu.sp.b", &format!("%lb{t}"), &format!("%rb{t}"), &format!("%hb{t}"));
            s.push_str(&format!("  %m{t} = fmul float {a}, {b}\n  %s{t} = fadd float {acc}, %m{t}\n"));
            acc = format!("%s{t}");
        }
        s.push_str(&format!("  %d{} = insertvalue {{ float, float, float, float }} {d}, float {acc}, {r}\n", r + 1));
        d = format!("%d{}", r + 1);
    }
    s.push_str(BAR);
    s.push_str(&format!("  ret {{ float, float, float, float }} {d}\n}}\n"));
    s
}

/// The module with the inline `mma.sp` replaced by the emulation.
fn emulated(ir: &str) -> String {
    let mut text = ir.to_string();
    while let Some(at) = text.find("asm sideeffect \"mma.sp") {
        // `asm sideeffect "text", "constraints"(`: the first `"(` closes
        // the constraints (the text has none).
        let end = at + text[at..].find("\"(").expect("the asm's operands") + 1;
        text.replace_range(at..end, "@emu.mma.sp");
    }
    for decl in ["declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()", "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)"] {
        if !text.contains(decl) {
            text.push_str(&format!("\n{decl}"));
        }
    }
    text.push_str(&mma_sp_function());
    // The runner gives a block threads and a barrier when the kernel's text
    // names one: the emulation's barriers need them.
    text.replacen("entry:\n", "entry:\n  ; the emulation calls @llvm.nvvm.barrier.cta.sync.aligned.all(\n", 1)
}

pub fn f16_bits(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::f16::from_f64(x).to_bits().to_le_bytes()).collect()
}

/// Small integers in [-3, 3] (a small LCG): every product and sum exact.
pub fn ints(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) % 7) as f64 - 3.0
        })
        .collect()
}

pub fn check(s: SparseGemmSpec, seed: u64) {
    let SparseGemmSpec { m: rows, n, k } = s;
    let (rows, n, k) = (rows as usize, n as usize, k as usize);
    let mut mt = ModuleText::new();
    let geo = gemm_sp_f16(&mut mt, "k", &s, Sm::Sm86).unwrap();
    let ir = emulated(&mt.finish());
    let x = ints(rows * k, seed);
    let dense = Tensor::from_f64(TensorType::new(vec![n, k], Scalar::F16), ints(n * k, seed + 1));
    let w = sparse::prune(&dense, 2, 4).unwrap();
    let (values, meta) = sparse::compress(&w).unwrap();
    let wv = w.to_f64();
    let want: Vec<f32> = (0..rows * n)
        .map(|i| {
            let (r, j) = (i / n, i % n);
            (0..k).map(|kk| x[r * k + kk] * wv[j * k + kk]).sum::<f64>() as f32
        })
        .collect();
    let mut bufs = [
        Mem::new(&f16_bits(&x), 0),
        Mem::new(&f16_bits(&values.to_f64()), 0),
        Mem::new(&meta, 0),
        Mem::new(&vec![0xA5; rows * n * 4], 0),
    ];
    with_jit(&ir, |run| {
        let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
        run("k", geo, &mut refs);
    });
    let got = bufs[3].to_f32s();
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        let bad = (0..want.len()).filter(|&i| got[i] != want[i]).count();
        panic!("{s:?}: {bad} of {} values differ; first at row {}, feature {}: got {} want {}", want.len(), i / n, i % n, got[i], want[i]);
    }
}

/// `ldmatrix.x4` and `cp.async` emulated as `kernels_gemm_s8/host.rs` does
/// (matrix `i`'s row `r` addressed by lane `8i + r`, lane `l` receiving
/// bytes `4·(l%4)` … of row `l/4`; a copy of 16 bytes, or zeros for a
/// source size of 0, at once; commit and wait do nothing).
pub const COPIES: &str = "
@emu.sp.p = global [1024 x ptr] zeroinitializer

define internal void @emu.sp.commit() {
  ret void
}

define internal void @emu.sp.wait(i32 %n) {
  ret void
}

define internal void @emu.sp.cp(ptr %dst, ptr %src, i32 %n) {
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
";

fn ldmatrix_function() -> String {
    let mut s =
        String::from("\ndefine internal { i32, i32, i32, i32 } @emu.sp.ldmatrix(ptr %p) {\n");
    s.push_str(HEAD);
    s.push_str("  %slot = getelementptr [1024 x ptr], ptr @emu.sp.p, i32 0, i32 %tid\n  store ptr %p, ptr %slot\n");
    s.push_str(BAR);
    s.push_str(
        "  %qb = shl i32 %q, 2\n  %r0 = insertvalue { i32, i32, i32, i32 } poison, i32 0, 0\n",
    );
    for i in 0..4 {
        s.push_str(&format!(
            "  %l{i} = add i32 %wb, {}
  %l{i}g = add i32 %l{i}, %g
  %s{i} = getelementptr [1024 x ptr], ptr @emu.sp.p, i32 0, i32 %l{i}g
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
    s
}

/// [`emulated`] plus `ldmatrix` and `cp.async`.
fn emulated_tiled(ir: &str) -> String {
    let renames = [
        (
            "@llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
            "@emu.sp.ldmatrix",
        ),
        ("@llvm.nvvm.cp.async.cg.shared.global.16.s", "@emu.sp.cp"),
        ("@llvm.nvvm.cp.async.commit.group", "@emu.sp.commit"),
        ("@llvm.nvvm.cp.async.wait.group", "@emu.sp.wait"),
    ];
    let mut text: String = ir
        .lines()
        .filter(|l| !(l.starts_with("declare") && renames.iter().any(|(from, _)| l.contains(from))))
        .collect::<Vec<_>>()
        .join("\n");
    for (from, to) in renames {
        text = text.replace(&format!("{from}("), &format!("{to}("));
    }
    let mut text = emulated(&text);
    text.push_str(COPIES);
    text.push_str(&ldmatrix_function());
    text
}

/// The epilogue `relu(v + r)` with `r` laid out as the output (`m ×
/// ldc`).
pub fn residual_relu(s: &SpGemmSpec) -> GemmEpilogue {
    residual_relu_as(s, Scalar::F32)
}

/// [`residual_relu`] with the residual operand in `dtype` (f16: read
/// from a half copy, as the PTX translation does where a scratch slot
/// holds one).
pub fn residual_relu_as(s: &SpGemmSpec, dtype: Scalar) -> GemmEpilogue {
    let st: &[u64] = &[s.ldc, 1];
    let exprs = [Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Add, 0, 1), Expr::Unary(Unary::Relu, 2)];
    GemmEpilogue {
        kernel: super::super::kernel("", &[s.m, s.n], &[(Scalar::F32, st), (dtype, st)], &exprs, Scalar::F32),
        strides: vec![[0, s.ldc, 1]],
    }
}

/// The tiled kernel (`gemm_sp_tiled`) on the host against the exact
/// dense product of the pruned weight, with bias and relu when asked and,
/// with `residual`, the epilogue `relu(v + r)`: activation rows at pitch
/// `lda`, output at pitch `ldc`, ragged edges.
pub fn check_tiled(s: SpGemmSpec, tile: SpTile, seed: u64, residual: bool) {
    let (rows, n, k, lda, ldc) = (
        s.m as usize,
        s.n as usize,
        s.k as usize,
        s.lda as usize,
        s.ldc as usize,
    );
    let mut mt = ModuleText::new();
    let epi = residual.then(|| residual_relu(&s));
    let geo = gemm_sp_tiled(&mut mt, "k", &s, tile, Sm::Sm86, epi.as_ref()).unwrap();
    let ir = emulated_tiled(&mt.finish());
    let x = ints(rows * lda, seed);
    let dense = Tensor::from_f64(
        TensorType::new(vec![n, k], Scalar::F16),
        ints(n * k, seed + 1),
    );
    let w = sparse::prune(&dense, 2, 4).unwrap();
    let wv = w.to_f64();
    let bits = |v: f64| half::f16::from_f64(v).to_bits();
    let packed = pack_weight(s.n, s.k, &tile, |j, kk| bits(wv[(j * s.k + kk) as usize])).unwrap();
    let bias: Vec<f32> = ints(n, seed + 2).iter().map(|&b| b as f32).collect();
    let res: Vec<f32> = ints(rows * ldc, seed + 3).iter().map(|&b| b as f32).collect();
    let want: Vec<f32> = (0..rows * ldc)
        .map(|i| {
            let (r, j) = (i / ldc, i % ldc);
            if j >= n {
                return f32::from_bits(0xA5A5_A5A5);
            }
            let mut y = (0..k)
                .map(|kk| x[r * lda + kk] * wv[j * k + kk])
                .sum::<f64>() as f32;
            if s.bias {
                y += bias[j];
            }
            let y = if s.relu { y.max(0.0) } else { y };
            if residual { (y + res[i]).max(0.0) } else { y }
        })
        .collect();
    let words: Vec<u8> = packed.meta.iter().flat_map(|w| w.to_le_bytes()).collect();
    let vals: Vec<u8> = packed.values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut bufs = vec![
        Mem::new(&f16_bits(&x), 0),
        Mem::new(&vals, 0),
        Mem::new(&words, 0),
    ];
    if s.bias {
        bufs.push(Mem::from_f32s(&bias));
    }
    bufs.push(Mem::new(&vec![0xA5; rows * ldc * 4], 0));
    let y = bufs.len() - 1;
    if residual {
        bufs.push(Mem::from_f32s(&res));
    }
    with_jit(&ir, |run| {
        let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
        run("k", geo, &mut refs);
    });
    let got = bufs[y].to_f32s();
    // Exact (small integers); ±0 compare equal.
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        let bad = (0..want.len()).filter(|&i| got[i] != want[i]).count();
        panic!(
            "{s:?} {tile:?}: {bad} of {} values differ; first at row {}, column {}: got {} want {}",
            want.len(),
            i / ldc,
            i % ldc,
            got[i],
            want[i]
        );
    }
}
