//! `gemm_sp::wgmma`: the sm_90a 2:4 sparse GEMM on `wgmma.mma_async.sp`.
//! Checks that every tile gives PTX that ptxas assembles for sm_90a
//! without spills and without serializing the `wgmma` pipeline, with the
//! instruction mix the module doc promises (four `wgmma.sp` m64n{bn}k32
//! per k-tile of 128, `cp.async` into the ring, the async-proxy fence),
//! the launch geometry, and the refusals; runs the kernel on the host with
//! `wgmma` emulated (`wgmma_host.rs`) against the dense product, exactly
//! (the emulation assumes the metadata layout the kernel assumes: only a
//! GPU confirms it; and it runs the IR, whose values are never
//! overwritten, so it cannot see a register of a running `wgmma.sp`
//! being reused; the loop's two-tile body is checked here in the PTX,
//! and that ptxas then gives the two tiles' metadata distinct registers
//! was read in the SASS, by hand, on 2026-12-04). `AOC_PTX_DUMP_DIR=dir` writes the module and a manifest
//! (`gemm_sp_wgmma_sm_90a.{ptx,txt}`) for `tests/gpu_checks/gemm_sp.py`,
//! which runs every kernel on an H200 against NumPy; the module also holds
//! aoc's dense `gemm_wgmma` kernel for each benchmark shape (listed in
//! `gemm_sp_wgmma_dense_sm_90a.txt`), which the script times in the same
//! run.

use aoc_backend_ptx::kernels::gemm_sp::{SpGemmSpec, SpWgTile, choose_sp_wg_tile, gemm_sp_wgmma};
use aoc_backend_ptx::kernels::gemm_wgmma::{WgPrecision, choose_wg_tile, gemm_wgmma};
use aoc_backend_ptx::kernels::{AMode, GemmSpec, HalfCopy};
use aoc_backend_ptx::{ModuleText, Sm, ir_to_ptx};
use aoc_ir::Scalar;

#[test]
fn gemm_sp_wgmma_assembles_without_spills() {
    let sm = Sm::Sm90a;
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(std::path::PathBuf::from);
    let mut m = ModuleText::new();
    let mut manifest = vec![];
    let mut names = vec![];
    for (what, s) in super::tiled_specs() {
        let first = choose_sp_wg_tile(&s);
        let mut tiles = vec![first];
        if what == "square" || what.starts_with("bench") {
            tiles.extend(SpWgTile::CANDIDATES.iter().copied().filter(|t| *t != first));
        }
        for (ti, t) in tiles.into_iter().enumerate() {
            let name = format!("spwg_{what}_{ti}");
            let g = gemm_sp_wgmma(&mut m, &name, &s, t, sm, None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(g.block, [256, 1, 1], "{name}");
            assert_eq!(
                g.grid,
                [(s.n.div_ceil(128) * s.m.div_ceil(t.bn as u64)) as u32, 1, 1],
                "{name}"
            );
            assert_eq!(g.smem, t.smem_bytes(), "{name}");
            manifest.push(format!(
                "name={name} m={} n={} k={} lda={} ldc={} bias={} relu={} bm=128 bn={} bk=128 stages={} staged={} minblocks=1 grid={} block={} smem={}",
                s.m, s.n, s.k, s.lda, s.ldc, s.bias as u8, s.relu as u8, t.bn, t.stages, t.staged as u8, g.grid[0], g.block[0], g.smem
            ));
            names.push((name, t, s.k));
        }
    }
    // A fused epilogue (not in the manifest: the GPU check passes no
    // epilogue operands).
    let (_, ffn) = super::tiled_specs()
        .into_iter()
        .find(|(w, _)| *w == "ffn")
        .unwrap();
    let t = choose_sp_wg_tile(&ffn);
    gemm_sp_wgmma(
        &mut m,
        "spwg_epi_0",
        &ffn,
        t,
        sm,
        Some(&super::host::residual_relu(&ffn)),
    )
    .unwrap();
    names.push(("spwg_epi_0".to_string(), t, ffn.k));
    // aoc's dense wgmma kernel of each benchmark shape (no bias), the
    // tile the compiler would choose: `y = x · b`, b packed by `pack_b`.
    let mut dense = vec![];
    for (what, s) in super::tiled_specs().into_iter().filter(|(w, _)| w.starts_with("bench")) {
        let g = GemmSpec {
            batch: 1,
            m: s.m,
            n: s.n,
            k: s.k,
            a: AMode::Strided { batch: 0, row: s.lda, col: 1 },
            b_strides: [0, s.n, 1],
            c_strides: [0, s.ldc, 1],
            bias: None,
            relu: false,
            aligned16: true,
        };
        let t = choose_wg_tile(&g);
        let name = format!("wgdense_{what}");
        let geo = gemm_wgmma(&mut m, &name, &g, WgPrecision::F16, None, sm).unwrap();
        dense.push(format!(
            "name={name} m={} n={} k={} bn={} stages={} grid={} block={} smem={}",
            s.m, s.n, s.k, t.bn, t.stages, geo.grid[0], geo.block[0], geo.smem
        ));
    }
    let ptx = ir_to_ptx(&m.finish(), sm).unwrap_or_else(|e| panic!("{sm}: {e}"));
    if let Some(dir) = &dump {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("gemm_sp_wgmma_sm_90a.ptx"), &ptx).unwrap();
        std::fs::write(dir.join("gemm_sp_wgmma_sm_90a.txt"), manifest.join("\n") + "\n").unwrap();
        std::fs::write(dir.join("gemm_sp_wgmma_dense_sm_90a.txt"), dense.join("\n") + "\n").unwrap();
    }
    for (name, t, k) in &names {
        let body = super::super::entry(&ptx, name);
        let sp = format!(
            "wgmma.mma_async.sp.sync.aligned.m64n{}k32.f32.f16.f16",
            t.bn
        );
        let n = body.matches(&sp).count();
        assert!(n >= 4 && n % 4 == 0, "{name}: {n} × {sp}");
        // Past one k-tile, the loop body is two k-tiles, each retired by
        // a wait_group 1 (LLVM may unroll a short loop further).
        if *k > 128 {
            let waits = body.matches("wgmma.wait_group.sync.aligned 1;").count();
            assert!(waits >= 2 && waits % 2 == 0 && n == 4 * waits, "{name}: {waits} waits, {n} × {sp}");
        }
        for ins in [
            "wgmma.fence.sync.aligned;",
            "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 1;",
            "wgmma.wait_group.sync.aligned 0;",
            "fence.proxy.async.shared::cta;",
            "cp.async.cg.shared.global",
            "bar.sync",
            // Descriptor bits: 128-byte swizzle, stride 1024 B, leading 16 B.
            "4611686293305360384",
        ] {
            assert!(body.contains(ins), "{name}: no {ins}");
        }
        let wait = format!("cp.async.wait_group \t{};", t.stages - 3);
        assert!(body.contains(&wait), "{name}: no {wait}");
    }
    let Ok(x) = super::super::find_ptxas() else {
        println!("skipping the ptxas part: no ptxas");
        return;
    };
    let report = super::super::assemble(&x, &ptx, sm, "gemm_sp_wgmma");
    let mut current = String::new();
    for line in report.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + 26..];
            current = rest[..rest.find('\'').unwrap()].to_string();
        }
        assert!(!line.contains("serialized"), "{current}: {line}");
        if line.contains("spill stores") {
            assert!(
                line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                "{current}: {line}"
            );
        }
        if let Some(i) = line.find("Used ") {
            println!("{current}: {}", &line[i..]);
        }
    }
    assert_eq!(
        report.matches("spill stores").count(),
        names.len() + dense.len(),
        "{report}"
    );
}

/// The kernel on the host with `wgmma` emulated (`wgmma_host.rs`),
/// exactly against the dense product: ragged edges and strides, a k tail
/// past whole k-tiles, several blocks, every tile width, a ring that
/// wraps, bias, relu and a residual epilogue; the staged epilogue (with
/// and without vector stores: `n` and `ldc` multiples of 4 or not) and
/// the fragment one. One test: the emulation's metadata exchange is one
/// static.
#[test]
fn gemm_sp_wgmma_runs_on_the_host_to_the_dense_product() {
    let s = |m, n, k, lda, ldc, bias, relu| SpGemmSpec { m, n, k, lda, ldc, bias, relu };
    let t = |bn, stages| SpWgTile { bn, stages, staged: true };
    let f = |bn, stages| SpWgTile { bn, stages, staged: false };
    let cases = [
        (s(37, 45, 96, 104, 50, true, false), t(64, 6), false),
        (s(150, 200, 288, 288, 200, true, true), t(128, 4), false),
        (s(70, 130, 160, 168, 131, false, false), t(192, 3), true),
        (s(200, 132, 96, 96, 136, true, false), t(192, 3), true),
        (s(64, 128, 1024, 1024, 128, false, false), t(128, 3), false),
        (s(300, 64, 64, 64, 64, false, true), t(64, 3), false),
        (s(150, 200, 288, 288, 200, true, true), f(128, 4), false),
        (s(70, 130, 160, 168, 131, false, false), f(192, 3), true),
    ];
    for (i, (spec, tile, residual)) in cases.into_iter().enumerate() {
        super::wgmma_host::check_wgmma(spec, tile, 40 + i as u64, residual.then_some(Scalar::F32), None);
    }
    // The residual read from a half copy (f16), both epilogues.
    let from_half = [
        (s(150, 200, 288, 288, 200, true, false), t(128, 4)),
        (s(70, 130, 160, 168, 131, false, false), f(192, 3)),
    ];
    for (i, (spec, tile)) in from_half.into_iter().enumerate() {
        super::wgmma_host::check_wgmma(spec, tile, 50 + i as u64, Some(Scalar::F16), None);
    }
    // The half copy (ldc = n), beside f32 y or alone, both epilogues.
    let keep = |bf16, keep_f32| Some(HalfCopy { bf16, keep_f32 });
    let halves = [
        (s(150, 200, 288, 288, 200, true, false), t(128, 4), false, keep(false, true)),
        (s(70, 130, 160, 160, 130, false, false), t(192, 3), true, keep(true, false)),
        (s(70, 132, 160, 160, 132, true, true), t(64, 6), true, keep(false, false)),
        (s(150, 200, 288, 288, 200, true, false), f(128, 4), true, keep(false, false)),
    ];
    for (i, (spec, tile, residual, half)) in halves.into_iter().enumerate() {
        super::wgmma_host::check_wgmma(spec, tile, 60 + i as u64, residual.then_some(Scalar::F32), half);
    }
}

#[test]
fn gemm_sp_wgmma_refuses_what_it_cannot_run() {
    let s = SpGemmSpec {
        m: 64,
        n: 64,
        k: 64,
        lda: 64,
        ldc: 64,
        bias: false,
        relu: false,
    };
    let t = SpWgTile::WIDE;
    let mut m = ModuleText::new();
    let e = gemm_sp_wgmma(&mut m, "a", &s, t, Sm::Sm90, None).unwrap_err();
    assert!(e.contains("sm_90a"), "{e}");
    let e = gemm_sp_wgmma(
        &mut m,
        "b",
        &SpGemmSpec {
            k: 48,
            lda: 48,
            ..s
        },
        t,
        Sm::Sm90a,
        None,
    )
    .unwrap_err();
    assert!(e.contains("multiple of 32"), "{e}");
    let e = gemm_sp_wgmma(
        &mut m,
        "c",
        &SpGemmSpec { lda: 60, ..s },
        t,
        Sm::Sm90a,
        None,
    )
    .unwrap_err();
    assert!(e.contains("unsupported sparse product"), "{e}");
    for bad in [
        SpWgTile { bn: 96, stages: 4, staged: true },
        SpWgTile { bn: 128, stages: 2, staged: true },
        SpWgTile { bn: 256, stages: 4, staged: false },
    ] {
        assert!(
            gemm_sp_wgmma(&mut m, "d", &s, bad, Sm::Sm90a, None).is_err(),
            "{bad:?}"
        );
    }
    // An empty product: a kernel that returns at once.
    let g = gemm_sp_wgmma(&mut m, "e", &SpGemmSpec { m: 0, ..s }, t, Sm::Sm90a, None).unwrap();
    assert_eq!((g.grid, g.smem), ([1, 1, 1], 0));
}

#[test]
fn gemm_sp_wgmma_tiles() {
    let s = |m, n| SpGemmSpec {
        m,
        n,
        k: 1024,
        lda: 1024,
        ldc: n,
        bias: false,
        relu: false,
    };
    assert_eq!(choose_sp_wg_tile(&s(8192, 8192)), SpWgTile::WIDE);
    assert_eq!(choose_sp_wg_tile(&s(128, 768)), SpWgTile::NARROW);
    for t in SpWgTile::CANDIDATES {
        t.check().unwrap();
        assert!(t.smem_bytes() <= 227 * 1024, "{t:?}");
    }
    // The padding is the tile's: 128 features, 128 of k.
    assert_eq!(
        (SpWgTile::WIDE.n_pad(130), SpWgTile::WIDE.k_pad(96)),
        (256, 128)
    );
}
