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
#[path = "kernels_gemm_sp/wgmma.rs"]
mod wgmma;
#[path = "kernels_gemm_sp/wgmma_host.rs"]
mod wgmma_host;

use aoc_backend_ptx::kernels::gemm_sp::{SpGemmSpec, SpTile, SparseGemmSpec, choose_sp_tile, gemm_sp_f16, gemm_sp_tiled, pack_weight};
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

/// Shapes of the tiled kernel: whole tiles, ragged rows and features, k
/// not a multiple of the k step (64), pitches wider than the product,
/// bias and relu, one row, BERT's FFN.
fn tiled_specs() -> Vec<(&'static str, SpGemmSpec)> {
    let s = |m, n, k, bias, relu| SpGemmSpec {
        m,
        n,
        k,
        lda: k,
        ldc: n,
        bias,
        relu,
    };
    vec![
        ("tile", s(128, 128, 128, false, false)),
        (
            "ragged",
            SpGemmSpec {
                lda: 104,
                ldc: 50,
                ..s(37, 45, 96, true, false)
            },
        ),
        ("relu", s(70, 33, 160, true, true)),
        ("one_row", s(1, 64, 64, false, false)),
        ("square", s(512, 512, 512, false, false)),
        ("ffn", s(4096, 3072, 768, true, false)),
        ("bench4096", s(4096, 4096, 4096, false, false)),
        ("bench8192", s(8192, 8192, 8192, false, false)),
        // BERT-base at batch 32: q/k/v and output projections, FFN2.
        ("bench_bert_qkv", s(4096, 768, 768, false, false)),
        ("bench_bert_ffn1", s(4096, 3072, 768, false, false)),
        ("bench_bert_ffn2", s(4096, 768, 3072, false, false)),
    ]
}

/// The tiled kernel assembles for every sm with every tile, without
/// spills, with the instruction mix its doc promises (`mma.sp` per k step
/// of 32 and fragment, `ldmatrix` and `cp.async`, one barrier in the k
/// loop). With `AOC_PTX_DUMP_DIR`, writes `gemm_sp_tiled_SM.{ptx,txt}`
/// (sm_80 and sm_90) for `tests/gpu_checks/gemm_sp.py` and
/// `bench/gpu/sparse_gemm.py`: one manifest line per kernel.
#[test]
fn gemm_sp_tiled_assembles_without_spills() {
    let ptxas = super::find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    for sm in SMS {
        let mut m = ModuleText::new();
        let mut manifest = vec![];
        let mut names = vec![];
        for (what, s) in tiled_specs() {
            let mut tiles = vec![choose_sp_tile(&s, sm)];
            if what == "square" || what.starts_with("bench") {
                // The chosen tile first (`_0`), then every other.
                let all = SpTile::ALL.iter().chain(&SpTile::CANDIDATES).copied();
                let first = tiles[0];
                tiles.extend(all.filter(|t| t.check(sm).is_ok() && *t != first));
            }
            for (ti, t) in tiles.into_iter().enumerate() {
                let name = format!("sptiled_{what}_{ti}");
                let g = gemm_sp_tiled(&mut m, &name, &s, t, sm, None)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(g.block, [t.threads(), 1, 1], "{name}");
                assert_eq!(
                    g.grid,
                    [
                        (s.n.div_ceil(t.bm as u64) * s.m.div_ceil(t.bn as u64)) as u32,
                        1,
                        1
                    ],
                    "{name}"
                );
                assert_eq!(g.smem, t.smem_bytes());
                manifest.push(format!(
                    "name={name} m={} n={} k={} lda={} ldc={} bias={} relu={} bm={} bn={} bk={} stages={} minblocks={} grid={} block={} smem={}",
                    s.m, s.n, s.k, s.lda, s.ldc, s.bias as u8, s.relu as u8, t.bm, t.bn, t.bk, t.stages, t.min_blocks, g.grid[0], g.block[0], g.smem
                ));
                names.push((name, s, t));
            }
        }
        // A fused epilogue (not in the manifest: the GPU check passes no
        // epilogue operands).
        let (_, ffn) = tiled_specs().into_iter().find(|(w, _)| *w == "ffn").unwrap();
        let t = choose_sp_tile(&ffn, sm);
        gemm_sp_tiled(&mut m, "sptiled_epi_0", &ffn, t, sm, Some(&host::residual_relu(&ffn))).unwrap();
        names.push(("sptiled_epi_0".to_string(), ffn, t));
        let ptx = ir_to_ptx(&m.finish(), sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
        if let (Some(dir), Sm::Sm80 | Sm::Sm90) = (&dump, sm) {
            std::fs::create_dir_all(dir).unwrap();
            let base = format!("gemm_sp_tiled_{}", sm.name());
            std::fs::write(dir.join(format!("{base}.ptx")), &ptx).unwrap();
            std::fs::write(dir.join(format!("{base}.txt")), manifest.join("\n") + "\n").unwrap();
        }
        for (name, _, t) in &names {
            let body = super::entry(&ptx, name);
            let mmas = body
                .matches("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32")
                .count() as u32;
            let per_ktile = (t.bm / t.warps_m / 16) * (t.bn / t.warps_n / 8) * (t.bk / 32);
            assert!(
                mmas >= per_ktile && mmas % per_ktile == 0,
                "{name}: {mmas} mma.sp, {per_ktile} per k-tile"
            );
            assert!(
                body.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                "{name}: ldmatrix"
            );
            assert!(
                body.contains("cp.async.cg.shared.global"),
                "{name}: cp.async"
            );
            assert!(
                body.contains("cp.async.wait_group"),
                "{name}: cp.async.wait_group"
            );
            assert!(
                !body.contains("ld.global.u16") && !body.contains("ld.global.b16"),
                "{name}: no scalar global loads of halves"
            );
        }
        if let Ok(p) = &ptxas {
            let report = super::assemble(p, &ptx, sm, "gemm_sp_tiled");
            let mut seen = 0;
            for line in report.lines().filter(|l| l.contains("spill stores")) {
                seen += 1;
                assert!(
                    line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                    "{sm}: {line}"
                );
            }
            assert!(seen > 0, "{sm}: ptxas reported no kernels:\n{report}");
        }
    }
}

#[test]
fn gemm_sp_tiled_refuses_what_it_cannot_run() {
    let mut m = ModuleText::new();
    let s = SpGemmSpec {
        m: 8,
        n: 8,
        k: 48,
        lda: 48,
        ldc: 8,
        bias: false,
        relu: false,
    };
    let t = SpTile::ALL[2];
    let e = gemm_sp_tiled(&mut m, "a", &s, t, Sm::Sm80, None).unwrap_err();
    assert!(e.contains("multiple of 32"), "{e}");
    let e = gemm_sp_tiled(
        &mut m,
        "b",
        &SpGemmSpec {
            k: 64,
            lda: 64,
            ..s
        },
        t,
        Sm::Sm75,
        None,
    )
    .unwrap_err();
    assert!(e.contains("sm_80"), "{e}");
    let e = gemm_sp_tiled(
        &mut m,
        "c",
        &SpGemmSpec {
            k: 64,
            lda: 60,
            ..s
        },
        t,
        Sm::Sm80,
        None,
    )
    .unwrap_err();
    assert!(e.contains("unsupported"), "{e}");
    let bad = SpTile { bm: 48, ..t };
    assert!(
        gemm_sp_tiled(
            &mut m,
            "d",
            &SpGemmSpec {
                k: 64,
                lda: 64,
                ..s
            },
            bad,
            Sm::Sm80,
            None
        )
        .is_err()
    );
    // An empty product reads nothing.
    let g = gemm_sp_tiled(
        &mut m,
        "e",
        &SpGemmSpec {
            m: 0,
            k: 64,
            lda: 64,
            ..s
        },
        t,
        Sm::Sm80,
        None,
    )
    .unwrap();
    assert_eq!(g.grid, [1, 1, 1]);
    // Every default tile fits 99 KiB (sm_86); the candidates fit Hopper,
    // and the 4-stage 128×128×64 one only Hopper.
    for t in SpTile::ALL {
        t.check(Sm::Sm86).unwrap();
    }
    for t in SpTile::CANDIDATES {
        t.check(Sm::Sm90a).unwrap();
    }
    assert!(SpTile::CANDIDATES[1].check(Sm::Sm86).unwrap_err().contains("99 KiB on sm_86"));
}

/// The packed weight: a weight with three non-zeros in a group is not
/// 2:4; fewer than two keep ascending indices; padding is zeros and the
/// empty pattern.
#[test]
fn gemm_sp_pack_weight_layout() {
    let t = SpTile::ALL[2];
    assert!(pack_weight(1, 32, &t, |_, kk| if kk < 3 { 0x3c00 } else { 0 }).is_none());
    let p = pack_weight(
        1,
        32,
        &t,
        |_, kk| if kk == 3 || kk == 4 { 0x3c00 } else { 0 },
    )
    .unwrap();
    assert_eq!(p.values.len(), 64 * 32);
    assert_eq!(p.meta.len(), 4 * 2 * 16);
    // Group 0 keeps (2, 3), group 1 keeps (0, 1): values [0, 1.0, 1.0, 0].
    assert_eq!(&p.values[..4], &[0, 0x3c00, 0x3c00, 0]);
    // Feature 0 (q = 0) words 0 (p = 0) and 1: low half its indices,
    // high half feature 8's (empty).
    let w0 = 0x4444_4444u32 & !0xff | 0b0100_1110;
    assert_eq!(p.meta[0], (w0 & 0xffff) | 0x4444 << 16);
    assert_eq!(p.meta[1], (w0 >> 16) | 0x4444 << 16);
    assert!(p.meta[2..].iter().all(|&w| w == 0x4444_4444));
}

/// The tiled kernel on the host with `mma.sp`, `ldmatrix` and `cp.async`
/// emulated, exactly against the dense product: every tile, ragged edges,
/// k tails, pitches, bias and relu, several k-tiles through the ring.
#[test]
fn gemm_sp_tiled_runs_on_the_host_to_the_dense_product() {
    let s = |m, n, k, bias, relu| SpGemmSpec { m, n, k, lda: k, ldc: n, bias, relu };
    let pitched = SpGemmSpec { lda: 104, ldc: 50, ..s(37, 45, 96, true, false) };
    host::check_tiled(s(64, 64, 64, false, false), SpTile::ALL[2], 1, false);
    host::check_tiled(pitched, SpTile::ALL[2], 2, false);
    host::check_tiled(s(70, 33, 288, true, true), SpTile::ALL[1], 3, false);
    host::check_tiled(s(130, 140, 256, false, false), SpTile::ALL[0], 4, false);
    // A fused epilogue (a residual add and relu, as the translation fuses
    // a following pointwise step), after the bias, at output pitch 50.
    host::check_tiled(pitched, SpTile::ALL[2], 5, true);
}
