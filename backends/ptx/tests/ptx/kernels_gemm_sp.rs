//! `kernels::gemm_sp`: the 2:4 sparse tensor-core GEMM (`mma.sp`). Checks
//! that the kernel gives IR that LLVM accepts and PTX that ptxas assembles
//! for sm_80 … sm_90a, with the sparse f16 `mma.sp` of k = 32 and no
//! shared memory, the launch geometry, and the refusals (k not a multiple
//! of 32, targets without `mma`), and runs the kernel on the host with
//! `mma.sp` emulated (`kernels_gemm_sp/host.rs`) against the dense product
//! of the pruned weight, exactly. `AOC_PTX_DUMP_DIR=dir` also writes the
//! sm_80 and sm_90 modules and a manifest of their specs there, for
//! `tests/gpu_checks/gemm_sp.py`, which runs them on a GPU against NumPy.

#[path = "kernels_gemm_sp/host.rs"]
mod host;

use aoc_backend_ptx::kernels::gemm_sp::{SparseGemmSpec, gemm_sp_f16};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};

const SMS: [Sm; 5] = [Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a];

/// Shapes: exact tiles, ragged rows and features, one row, long k.
fn specs() -> Vec<(&'static str, SparseGemmSpec)> {
    vec![
        ("tile", SparseGemmSpec { m: 32, n: 16, k: 32 }),
        ("ragged", SparseGemmSpec { m: 37, n: 45, k: 96 }),
        ("one_row", SparseGemmSpec { m: 1, n: 64, k: 64 }),
        ("square", SparseGemmSpec { m: 256, n: 256, k: 512 }),
        ("ffn", SparseGemmSpec { m: 128, n: 3072, k: 768 }),
    ]
}

#[test]
fn gemm_sp_assembles_for_every_sm() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for sm in SMS {
        let mut m = ModuleText::new();
        let mut manifest = vec![];
        for (what, s) in specs() {
            let name = format!("sp16_{what}");
            let g = gemm_sp_f16(&mut m, &name, &s, sm).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(g.block, [128, 1, 1], "{name}");
            assert_eq!(g.grid, [s.n.div_ceil(16) as u32, 1, s.m.div_ceil(128) as u32], "{name}");
            assert_eq!(g.smem, 0);
            manifest.push(format!("name={name} m={} n={} k={} grid={}:{}:{} block={}", s.m, s.n, s.k, g.grid[0], g.grid[1], g.grid[2], g.block[0]));
        }
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        if let (Some(dir), Sm::Sm80 | Sm::Sm90) = (&dump, sm) {
            std::fs::create_dir_all(dir).unwrap();
            let base = format!("gemm_sp_{}", sm.name());
            std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
            std::fs::write(dir.join(format!("{base}.txt")), manifest.join("\n") + "\n").unwrap();
        }
        for (what, s) in specs() {
            let body = super::entry(&ptx, &format!("sp16_{what}"));
            // Four per k-tile of 32, however far LLVM unrolls the loop.
            let mmas = body.matches("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32").count() as u64;
            assert!(mmas >= 4 && mmas <= 4 * (s.k / 32) && mmas % 4 == 0, "{what}: {mmas} mma.sp");
            assert!(!body.contains(".shared"), "{what}: no shared memory");
            let stores = body.matches("st.global").count();
            assert!((1..=16).contains(&stores), "{what}: {stores} stores");
        }
        if let Ok(p) = &ptxas {
            let report = super::assemble(p, &ptx, sm, "gemm_sp");
            for line in report.lines().filter(|l| l.contains("spill stores")) {
                assert!(line.contains(" 0 bytes spill stores, 0 bytes spill loads"), "{sm}: {line}");
            }
        }
    }
}

#[test]
fn gemm_sp_refuses_what_it_cannot_run() {
    let mut m = ModuleText::new();
    let e = gemm_sp_f16(&mut m, "a", &SparseGemmSpec { m: 8, n: 8, k: 48 }, Sm::Sm80).unwrap_err();
    assert!(e.contains("multiple of 32"), "{e}");
    let e = gemm_sp_f16(&mut m, "b", &SparseGemmSpec { m: 8, n: 8, k: 0 }, Sm::Sm80).unwrap_err();
    assert!(e.contains("multiple of 32"), "{e}");
    let e = gemm_sp_f16(&mut m, "c", &SparseGemmSpec { m: 8, n: 8, k: 32 }, Sm::Sm75).unwrap_err();
    assert!(e.contains("sm_80"), "{e}");
    let e = gemm_sp_f16(&mut m, "bad name", &SparseGemmSpec { m: 8, n: 8, k: 32 }, Sm::Sm80).unwrap_err();
    assert!(!e.is_empty());
    let e = gemm_sp_f16(&mut m, "d", &SparseGemmSpec { m: 8, n: 1 << 31, k: 32 }, Sm::Sm80).unwrap_err();
    assert!(e.contains("more than a launch holds"), "{e}");
    // An empty product reads nothing: a kernel that returns at once.
    for (i, s) in [SparseGemmSpec { m: 0, n: 16, k: 32 }, SparseGemmSpec { m: 8, n: 0, k: 32 }].into_iter().enumerate() {
        let mut e = ModuleText::new();
        let name = format!("empty{i}");
        let g = gemm_sp_f16(&mut e, &name, &s, Sm::Sm80).unwrap();
        assert_eq!(g.grid, [1, 1, 1]);
        let ptx = ir_to_ptx(&e.finish(), Sm::Sm80).unwrap();
        let body = super::entry(&ptx, &name);
        assert!(!body.contains("ld.global") && !body.contains("mma.sp"), "{body}");
    }
}

/// The shapes of `bench/gpu/sparse_gemm.py` (4096³, 8192³) assemble;
/// with `AOC_PTX_DUMP_DIR` they are written as `gemm_sp_bench_SM.{ptx,txt}`.
#[test]
fn gemm_sp_bench_shapes_assemble() {
    let ptxas = super::find_ptxas();
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for sm in [Sm::Sm80, Sm::Sm90] {
        let mut m = ModuleText::new();
        let mut manifest = vec![];
        for n in [4096u64, 8192] {
            let s = SparseGemmSpec { m: n, n, k: n };
            let name = format!("sp16_bench_{n}");
            let g = gemm_sp_f16(&mut m, &name, &s, sm).unwrap();
            manifest.push(format!("name={name} m={n} n={n} k={n} grid={}:{}:{} block={}", g.grid[0], g.grid[1], g.grid[2], g.block[0]));
        }
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap();
        if let Ok(p) = &ptxas {
            super::assemble(p, &ptx, sm, "gemm_sp_bench");
        }
        if let Some(dir) = &dump {
            std::fs::create_dir_all(dir).unwrap();
            let base = format!("gemm_sp_bench_{}", sm.name());
            std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
            std::fs::write(dir.join(format!("{base}.txt")), manifest.join("\n") + "\n").unwrap();
        }
    }
}

/// The kernel on the host with `mma.sp` emulated (`kernels_gemm_sp/host.rs`):
/// exact integer products against the dense product of the pruned weight,
/// for whole and ragged tiles, one row, several k-tiles.
#[test]
fn gemm_sp_runs_on_the_host_to_the_dense_product() {
    for (i, s) in specs().into_iter().filter(|(w, _)| *w != "ffn" && *w != "square").enumerate() {
        host::check(s.1, 100 + i as u64);
    }
    host::check(SparseGemmSpec { m: 70, n: 33, k: 128 }, 7);
}
