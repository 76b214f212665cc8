//! The `wgmma.sp` kernel runs on the host (`host_sim`) with the `wgmma`
//! instructions emulated: `cp.async` copies at once (`host.rs`'s copies),
//! the fences, commits, waits and the operands' pin are identities, and each
//! `wgmma.mma_async.sp` is a host function (`sim_wgmma_sp`) that reads
//! both operands from the emulated shared memory through their matrix
//! descriptors as the hardware addresses them (start address, stride byte
//! offset between 8-row groups, 128-byte rows, the 128-byte swizzle as
//! an XOR of address bits 4–6 with bits 7–9: the model the dense `wgmma`
//! kernel's layout was measured correct against on an H200) and takes
//! the metadata from the lanes the PTX ISA's `mma.sp` m16n8k32 f16 layout
//! names, per warp of the warpgroup (the assumption the kernel makes;
//! the GPU check confirms it). Shared memory is a global aligned to 256
//! KiB, so a descriptor's 14-bit address is the offset into it. With
//! small integer data every sum is exact: this checks the kernel's copy
//! addressing, swizzle, stage ring, descriptors (values as A, the
//! activation halves as B), metadata placement and selection, and the
//! transposed epilogue, exactly.

use aoc_backend_ptx::kernels::HalfCopy;
use aoc_backend_ptx::kernels::gemm_sp::{SpGemmSpec, SpWgTile, gemm_sp_wgmma_with, pack_weight};
use aoc_backend_ptx::{ModuleText, Sm};
use aoc_ir::ops::sparse;
use aoc_ir::{Scalar, Tensor, TensorType};
use std::sync::atomic::{AtomicU32, Ordering};

use super::super::host_sim::{Mem, block_barrier, thread_index, with_jit_hooks};
use super::host::{f16_bits, ints, residual_relu_as};

/// Each thread's metadata operand of the current `wgmma.sp`.
static META: [AtomicU32; 256] = [const { AtomicU32::new(0) }; 256];

/// Element `(r, kk)` (f16 as f32) of a K-major operand with the 128-byte
/// swizzle at descriptor `desc` in shared memory `smem`.
///
/// # Safety
/// `smem` must point at the 256 KiB shared-memory global.
unsafe fn operand(smem: *const u8, desc: u64, r: u64, kk: u64) -> f32 {
    let start = (desc & 0x3fff) << 4;
    let sbo = ((desc >> 32) & 0x3fff) << 4;
    assert_eq!(desc >> 62, 1, "128-byte swizzle");
    let addr = start + (r / 8) * sbo + (r % 8) * 128 + 2 * kk;
    let addr = addr ^ (((addr >> 7) & 7) << 4);
    assert!(addr + 2 <= 256 << 10, "descriptor past shared memory");
    // SAFETY: inside the global (checked above).
    let bits = unsafe { (smem.add(addr as usize) as *const u16).read_unaligned() };
    half::f16::from_bits(bits).to_f32()
}

/// `wgmma.mma_async.sp.sync.aligned.m64n{2n}k32.f32.f16.f16` with
/// selector 0 and scale-d 1 for the calling thread: `accs` (its `n`
/// accumulators) += A (sparse, from `da`) · B (from `db`).
extern "C" fn sim_wgmma_sp(smem: *const u8, da: u64, db: u64, e: u32, accs: *mut f32, n: u32) {
    let tid = thread_index();
    META[tid as usize].store(e, Ordering::SeqCst);
    block_barrier();
    let (wg, w, l) = (tid / 128, (tid / 32) % 4, tid % 32);
    for i in 0..n {
        let (j, h, e) = (i / 4, (i / 2) % 2, i % 2);
        let row = 16 * w + l / 4 + 8 * h;
        let col = 8 * j + 2 * (l % 4) + e;
        let mut sum = 0.0f32;
        for c in 0..16u32 {
            let (p, jj) = (c / 8, c % 8);
            let rl = row % 16;
            let src = wg * 128 + (row / 16) * 32 + 4 * (rl % 8) + p;
            let word = META[src as usize].load(Ordering::SeqCst);
            let idx = (word >> (16 * (rl / 8) + 2 * jj)) & 3;
            let k = 16 * p + 4 * (jj / 2) + idx;
            // SAFETY: smem is the shared-memory global (the IR passes it).
            let (a, b) = unsafe { (operand(smem, da, row as u64, c as u64), operand(smem, db, col as u64, k as u64)) };
            sum += a * b;
        }
        // SAFETY: the IR wrapper passes `n` floats.
        unsafe { *accs.add(i as usize) += sum };
    }
    block_barrier();
}

/// The kernel's IR with the `wgmma` instructions emulated (module doc).
fn emulated(ir: &str, nacc: u32) -> String {
    let mut text: String = ir
        .lines()
        .filter(|l| !l.contains("call void asm sideeffect"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "@aoc_wg_smem = external addrspace(3) global [0 x i8], align 1024",
            "@aoc_wg_smem = global [262144 x i8] zeroinitializer, align 262144",
        );
    for (from, to) in [
        ("@llvm.nvvm.cp.async.cg.shared.global.16.s", "@emu.sp.cp"),
        ("@llvm.nvvm.cp.async.commit.group", "@emu.sp.commit"),
        ("@llvm.nvvm.cp.async.wait.group", "@emu.sp.wait"),
    ] {
        text = text
            .lines()
            .filter(|l| !(l.starts_with("declare") && l.contains(from)))
            .collect::<Vec<_>>()
            .join("\n")
            .replace(&format!("{from}("), &format!("{to}("));
    }
    // The tied inline assembly: `asm sideeffect "TEXT", "CONSTRAINTS"(`.
    while let Some(at) = text.find("asm sideeffect \"") {
        let end = at + text[at..].find("\"(").expect("the asm's operands") + 1;
        let asm = &text[at..end];
        let with = if asm.contains("wgmma.mma_async.sp") {
            "@emu.wgsp"
        } else if asm.contains("wgmma.fence") {
            "@emu.id"
        } else if asm.contains("wgmma.wait_group") {
            "@emu.wait"
        } else if asm.starts_with("asm sideeffect \"\",") {
            "@emu.pin"
        } else {
            panic!("unexpected inline assembly {asm}")
        };
        text.replace_range(at..end, with);
    }
    let ty = format!("{{ {} }}", vec!["float"; nacc as usize].join(", "));
    let params: Vec<String> = (0..nacc).map(|i| format!("float %a{i}")).collect();
    let mut f = String::new();
    let build = |f: &mut String, src: &dyn Fn(u32) -> String| {
        let mut prev = "poison".to_string();
        for i in 0..nacc {
            f.push_str(&format!("  %s{i} = insertvalue {ty} {prev}, float {}, {i}\n", src(i)));
            prev = format!("%s{i}");
        }
        f.push_str(&format!("  ret {ty} {prev}\n}}\n"));
    };
    f.push_str(&format!("\ndefine internal {ty} @emu.id({}) {{\n", params.join(", ")));
    build(&mut f, &|i| format!("%a{i}"));
    // The waits also take the metadata words of the tile they retire.
    f.push_str(&format!(
        "\ndefine internal {ty} @emu.wait(i32 %e0, i32 %e1, i32 %e2, i32 %e3, {}) {{\n",
        params.join(", ")
    ));
    build(&mut f, &|i| format!("%a{i}"));
    f.push_str(&format!(
        "\ndeclare void @sim.wgsp(ptr, i64, i64, i32, ptr, i32)\ndefine internal {ty} @emu.wgsp(i64 %da, i64 %db, i32 %e, i32 %one, {}) {{\n  %buf = alloca [{nacc} x float]\n",
        params.join(", ")
    ));
    for i in 0..nacc {
        f.push_str(&format!("  %p{i} = getelementptr [{nacc} x float], ptr %buf, i32 0, i32 {i}\n  store float %a{i}, ptr %p{i}\n"));
    }
    f.push_str(&format!("  call void @sim.wgsp(ptr addrspace(3) @aoc_wg_smem, i64 %da, i64 %db, i32 %e, ptr %buf, i32 {nacc})\n"));
    for i in 0..nacc {
        f.push_str(&format!("  %r{i} = load float, ptr %p{i}\n"));
    }
    build(&mut f, &|i| format!("%r{i}"));
    // The pin of the descriptors, metadata and scale-d (four steps: 8
    // i64, 5 i32).
    let pty = format!("{{ {}, {} }}", vec!["i64"; 8].join(", "), vec!["i32"; 5].join(", "));
    let pparams: Vec<String> = (0..13).map(|i| format!("{} %v{i}", if i < 8 { "i64" } else { "i32" })).collect();
    f.push_str(&format!("\ndefine internal {pty} @emu.pin({}) {{\n", pparams.join(", ")));
    let mut prev = "poison".to_string();
    for (i, p) in pparams.iter().enumerate() {
        f.push_str(&format!("  %q{i} = insertvalue {pty} {prev}, {p}, {i}\n"));
        prev = format!("%q{i}");
    }
    f.push_str(&format!("  ret {pty} {prev}\n}}\n"));
    text.push_str(&f);
    text.push_str(super::host::COPIES);
    text
}

/// The `wgmma.sp` kernel on the host against the exact dense product of
/// the pruned weight (bias, relu and the residual epilogue as asked),
/// activation rows at pitch `lda`, output at pitch `ldc`, ragged edges;
/// with `half`, also the half copy of y (f32 y stored or not, as it says).
/// `residual` is the residual operand's type (f32, or f16 as read from a
/// half copy), `None` for no residual epilogue.
pub fn check_wgmma(s: SpGemmSpec, tile: SpWgTile, seed: u64, residual: Option<Scalar>, half: Option<HalfCopy>) {
    let (rows, n, k, lda, ldc) = (s.m as usize, s.n as usize, s.k as usize, s.lda as usize, s.ldc as usize);
    let mut mt = ModuleText::new();
    let epi = residual.map(|t| residual_relu_as(&s, t));
    let geo = gemm_sp_wgmma_with(&mut mt, "k", &s, tile, Sm::Sm90a, epi.as_ref(), half).unwrap();
    let ir = emulated(&mt.finish(), tile.bn / 2);
    let x = ints(rows * lda, seed);
    let dense = Tensor::from_f64(TensorType::new(vec![n, k], Scalar::F16), ints(n * k, seed + 1));
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
            let mut y = (0..k).map(|kk| x[r * lda + kk] * wv[j * k + kk]).sum::<f64>() as f32;
            if s.bias {
                y += bias[j];
            }
            let y = if s.relu { y.max(0.0) } else { y };
            if residual.is_some() { (y + res[i]).max(0.0) } else { y }
        })
        .collect();
    let words: Vec<u8> = packed.meta.iter().flat_map(|w| w.to_le_bytes()).collect();
    let vals: Vec<u8> = packed.values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut bufs = vec![Mem::new(&f16_bits(&x), 0), Mem::new(&vals, 0), Mem::new(&words, 0)];
    if s.bias {
        bufs.push(Mem::from_f32s(&bias));
    }
    bufs.push(Mem::new(&vec![0xA5; rows * ldc * 4], 0));
    let y = bufs.len() - 1;
    match residual {
        // The residuals are small integers: exact in f16.
        Some(Scalar::F16) => bufs.push(Mem::new(&f16_bits(&res.iter().map(|&r| r as f64).collect::<Vec<_>>()), 0)),
        Some(_) => bufs.push(Mem::from_f32s(&res)),
        None => {}
    }
    if half.is_some() {
        bufs.push(Mem::new(&vec![0xA5; rows * ldc * 2], 0));
    }
    with_jit_hooks(&ir, &[("sim.wgsp", sim_wgmma_sp as *const () as usize)], |run| {
        let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
        run("k", geo, &mut refs);
    });
    if let Some(h) = half {
        let hb = bufs.last().unwrap().bytes();
        for (i, w) in want.iter().enumerate() {
            let got = u16::from_le_bytes([hb[2 * i], hb[2 * i + 1]]);
            let want_bits = if i % ldc >= n {
                0xA5A5
            } else if h.bf16 {
                half::bf16::from_f32(*w).to_bits()
            } else {
                half::f16::from_f32(*w).to_bits()
            };
            assert_eq!(got, want_bits, "{s:?} {tile:?}: half copy at row {}, column {}", i / ldc, i % ldc);
        }
        if !h.keep_f32 {
            assert!(bufs[y].bytes().iter().all(|&b| b == 0xA5), "{s:?} {tile:?}: f32 y written without keep_f32");
            return;
        }
    }
    let got = bufs[y].to_f32s();
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
