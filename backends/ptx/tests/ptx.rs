//! The PTX backend's tests (one file: every test binary links LLVM, which
//! is slow). They check the generated LLVM IR and PTX text, and, where a
//! `ptxas` is found (`AOC_PTXAS`, `PATH`, or the `nvidia-cuda-nvcc` wheel
//! in the workspace's `.venv` or `AOC_PYTHON`'s site-packages), that every
//! module assembles for sm_80 … sm_90a; without one they print why and skip
//! that part. Running the kernels needs a GPU and is the CUDA runtime's
//! test. `AOC_PTX_DUMP_DIR=dir` writes the modules there (for a manual run
//! on a GPU machine).

#[path = "ptx/host_sim.rs"]
mod host_sim;
#[path = "ptx/kernels_attention.rs"]
mod kernels_attention;
#[path = "ptx/kernels_gemm_fp8.rs"]
mod kernels_gemm_fp8;
#[path = "ptx/kernels_gemm_s8.rs"]
mod kernels_gemm_s8;
#[path = "ptx/kernels_gemm_sp.rs"]
mod kernels_gemm_sp;
#[path = "ptx/kernels_gemm_simt.rs"]
mod kernels_gemm_simt;
#[path = "ptx/kernels_gemm_tc.rs"]
mod kernels_gemm_tc;
#[path = "ptx/kernels_gemm_wgmma.rs"]
mod kernels_gemm_wgmma;
#[path = "ptx/kernels_index.rs"]
mod kernels_index;
#[path = "ptx/kernels_rows.rs"]
mod kernels_rows;

use std::path::{Path, PathBuf};
use std::process::Command;

use aoc_backend_ptx::expr::{Binary, Expr, Operand, PointwiseKernel, Unary};
use aoc_backend_ptx::pointwise::{is_vectorized, work_items};
use aoc_backend_ptx::pointwise_llvm;
use aoc_backend_ptx::{GemmOut, GemmTile, Sm, compile_ptx, gemm_f16_llvm, gemm_f16_ptx};
use aoc_ir::types::Scalar;

fn kernel(
    name: &str,
    dims: &[u64],
    operands: &[(Scalar, &[u64])],
    exprs: &[Expr],
    out: Scalar,
) -> PointwiseKernel {
    PointwiseKernel {
        name: name.to_string(),
        dims: dims.to_vec(),
        operands: operands
            .iter()
            .map(|(dtype, strides)| Operand {
                dtype: *dtype,
                strides: strides.to_vec(),
            })
            .collect(),
        exprs: exprs.to_vec(),
        result: exprs.len() - 1,
        out_dtype: out,
        compute: aoc_backend_ptx::expr::Compute::F32,
    }
}

/// `out[r, c] = x[r, c] + bias[c]` over 8×64 f32: the vector form.
fn add_bias() -> PointwiseKernel {
    kernel(
        "pw_add_bias",
        &[8, 64],
        &[(Scalar::F32, &[64, 1]), (Scalar::F32, &[0, 1])],
        &[Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Add, 0, 1)],
        Scalar::F32,
    )
}

/// `out[r, c] = x[r, c] * s[r]` over 4×6: rows of 6 are not a multiple of 4,
/// so the scalar form.
fn scale_rows() -> PointwiseKernel {
    kernel(
        "pw_scale_rows",
        &[4, 6],
        &[(Scalar::F32, &[6, 1]), (Scalar::F32, &[1, 0])],
        &[Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Mul, 0, 1)],
        Scalar::F32,
    )
}

/// Every unary and binary operation and `Select`, over transposed f16 and
/// broadcast bf16 inputs, stored as bf16.
fn all_ops() -> PointwiseKernel {
    let mut k = kernel(
        "pw_all_ops",
        &[3, 5, 7],
        &[(Scalar::F16, &[1, 21, 3]), (Scalar::BF16, &[7, 0, 1])],
        &[Expr::Load(0), Expr::Load(1)],
        Scalar::BF16,
    );
    let mut acc = k.push(Expr::Const(0.5));
    for u in UNARY {
        let x = k.push(Expr::Unary(u, 0));
        acc = k.push(Expr::Binary(Binary::Add, acc, x));
    }
    for b in BINARY {
        let x = k.push(Expr::Binary(b, 0, 1));
        acc = k.push(Expr::Binary(Binary::Add, acc, x));
    }
    let sel = k.push(Expr::Select(acc, 0, 1));
    k.result = sel;
    k
}

/// One load-and-store kernel per element type: loads `from`, stores `to`.
fn casts() -> Vec<PointwiseKernel> {
    let types = [
        Scalar::F64,
        Scalar::F32,
        Scalar::F16,
        Scalar::BF16,
        Scalar::I64,
        Scalar::I32,
        Scalar::I16,
        Scalar::I8,
        Scalar::U64,
        Scalar::U32,
        Scalar::U16,
        Scalar::U8,
        Scalar::I1,
    ];
    types
        .iter()
        .zip(types.iter().cycle().skip(1))
        .map(|(&from, &to)| {
            kernel(
                &format!("cast_{}_{}", from.name(), to.name()),
                &[10],
                &[(from, &[1])],
                &[Expr::Load(0), Expr::Unary(Unary::Neg, 0)],
                to,
            )
        })
        .collect()
}

/// 70000×40000 elements: more than 2^31, so 64-bit offsets.
fn huge() -> PointwiseKernel {
    kernel(
        "pw_huge",
        &[70000, 40000],
        &[(Scalar::F32, &[1, 70000])],
        &[Expr::Load(0), Expr::Unary(Unary::Relu, 0)],
        Scalar::F32,
    )
}

fn empty() -> PointwiseKernel {
    kernel(
        "pw_empty",
        &[0, 4],
        &[(Scalar::F32, &[4, 1])],
        &[Expr::Load(0)],
        Scalar::F32,
    )
}

const UNARY: [Unary; 17] = [
    Unary::Neg,
    Unary::Abs,
    Unary::Exp,
    Unary::Log,
    Unary::Sqrt,
    Unary::Rsqrt,
    Unary::Reciprocal,
    Unary::Erf,
    Unary::Tanh,
    Unary::Sigmoid,
    Unary::Floor,
    Unary::Ceil,
    Unary::Trunc,
    Unary::RoundEven,
    Unary::Relu,
    Unary::Sin,
    Unary::Cos,
];

const BINARY: [Binary; 10] = [
    Binary::Add,
    Binary::Sub,
    Binary::Mul,
    Binary::Div,
    Binary::Max,
    Binary::Min,
    Binary::Pow,
    Binary::Equal,
    Binary::Less,
    Binary::Greater,
];

/// One f32 kernel per operation over 4096 elements (`un_exp`, `bin_pow`,
/// …): what a GPU run measures the math against.
fn per_op() -> Vec<PointwiseKernel> {
    let un = UNARY.iter().map(|&u| {
        kernel(
            &format!("un_{}", format!("{u:?}").to_lowercase()),
            &[4096],
            &[(Scalar::F32, &[1])],
            &[Expr::Load(0), Expr::Unary(u, 0)],
            Scalar::F32,
        )
    });
    let bin = BINARY.iter().map(|&b| {
        kernel(
            &format!("bin_{}", format!("{b:?}").to_lowercase()),
            &[4096],
            &[(Scalar::F32, &[1]), (Scalar::F32, &[1])],
            &[Expr::Load(0), Expr::Load(1), Expr::Binary(b, 0, 1)],
            Scalar::F32,
        )
    });
    un.chain(bin).collect()
}

fn all_pointwise() -> Vec<PointwiseKernel> {
    let mut ks = vec![add_bias(), scale_rows(), all_ops(), huge(), empty()];
    ks.extend(casts());
    ks.extend(per_op());
    ks
}

/// The text of `.entry name(` up to the next entry (or the end).
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let head = format!(".entry {name}(");
    let start = ptx
        .find(&head)
        .unwrap_or_else(|| panic!("no `{head}` in the ptx"));
    let rest = &ptx[start + head.len()..];
    let end = rest.find(".entry ").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn sm_names_and_features() {
    for sm in Sm::ALL {
        assert_eq!(Sm::parse(sm.name()), Ok(sm));
    }
    assert_eq!(Sm::parse("sm_90a"), Ok(Sm::Sm90a));
    let err = Sm::parse("sm_100").unwrap_err();
    assert!(err.contains("unknown gpu target `sm_100`"), "{err}");
    assert!(
        err.contains("sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, sm_90a"),
        "{err}"
    );
    assert_eq!(Sm::Sm86.ptx_feature(), "+ptx71");
    assert_eq!(Sm::Sm90a.ptx_feature(), "+ptx84");
    assert!(Sm::Sm80.has_mma_f16() && Sm::Sm80.has_cp_async());
    assert!(!Sm::Sm75.has_mma_f16() && !Sm::Sm75.has_cp_async());
    assert!(Sm::Sm75.has_ldmatrix() && !Sm::Sm70.has_ldmatrix());
    assert_eq!(Sm::Sm90.to_string(), "sm_90");
}

#[test]
fn pointwise_llvm_has_the_kernel_abi() {
    let ir = pointwise_llvm(&add_bias(), Sm::Sm86).unwrap();
    assert!(
        ir.contains(
            "define ptx_kernel void @pw_add_bias(ptr addrspace(1) %a0, ptr addrspace(1) %a1, ptr addrspace(1) %out, i64 %n)"
        ),
        "{ir}"
    );
    assert!(ir.contains("load <4 x float>"), "{ir}");
    assert!(ir.contains("store <4 x float>"), "{ir}");
    // 8×64 fits 32-bit offsets; 70000×40000 does not.
    assert!(ir.contains("urem i32"), "{ir}");
    let big = pointwise_llvm(&huge(), Sm::Sm86).unwrap();
    assert!(big.contains("urem i64 %"), "{big}");
    assert!(!big.contains("urem i32"), "{big}");
}

#[test]
fn pointwise_forms_and_work_items() {
    assert!(is_vectorized(&add_bias()));
    assert_eq!(work_items(&add_bias()), 8 * 64 / 4);
    assert!(!is_vectorized(&scale_rows()));
    assert_eq!(work_items(&scale_rows()), 24);
    assert!(!is_vectorized(&all_ops()));
    // A row stride that is not a multiple of 4 would misalign the vectors.
    let mut k = add_bias();
    k.operands[0].strides = vec![66, 1];
    assert!(!is_vectorized(&k));
    // An unused operand does not block the vector form.
    let mut k = add_bias();
    k.operands.push(Operand {
        dtype: Scalar::I8,
        strides: vec![3, 7],
    });
    assert!(is_vectorized(&k));
}

#[test]
fn pointwise_ptx_has_entries_and_vector_accesses() {
    let ks = all_pointwise();
    let ptx = compile_ptx(&ks, Sm::Sm86).unwrap();
    assert!(ptx.contains(".version 7.1"), "{ptx}");
    assert!(ptx.contains(".target sm_86"), "{ptx}");
    assert_eq!(ptx.matches(".visible .entry ").count(), ks.len());
    for k in &ks {
        let body = entry(&ptx, &k.name);
        // n operands, the output, n_elements.
        assert_eq!(
            body.matches(".param .u64").count(),
            k.operands.len() + 2,
            "{}: {body}",
            k.name
        );
    }
    let vec = entry(&ptx, "pw_add_bias");
    assert!(vec.contains("ld.global.v4"), "{vec}");
    assert!(vec.contains("st.global.v4"), "{vec}");
    let scalar = entry(&ptx, "pw_scale_rows");
    assert!(!scalar.contains(".v4"), "{scalar}");
    let ops = entry(&ptx, "pw_all_ops");
    assert!(ops.contains("ex2.approx"), "{ops}");
    assert!(
        ops.contains("ld.global.b16") || ops.contains("ld.global.u16"),
        "{ops}"
    );
    // The math helpers are inlined: no calls, no device functions.
    assert!(!ptx.contains("call"), "{ptx}");
    assert!(!ptx.contains(".func"), "{ptx}");
    // sm_90 gets its own ISA version.
    let ptx90 = compile_ptx(&[add_bias()], Sm::Sm90a).unwrap();
    assert!(ptx90.contains(".version 8.4"), "{ptx90}");
    assert!(ptx90.contains(".target sm_90a"), "{ptx90}");
}

#[test]
fn pointwise_rejects_bad_kernels() {
    let err = |k: PointwiseKernel| compile_ptx(&[k], Sm::Sm86).unwrap_err();
    let mut k = add_bias();
    k.name = "pw-0".into();
    assert!(err(k).contains("kernel name must be a C identifier"));
    let mut k = add_bias();
    k.operands[1].strides = vec![1];
    let e = err(k);
    assert_eq!(
        e,
        "kernel pw_add_bias: operand 1 must have 2 strides, found 1"
    );
    let mut k = add_bias();
    k.exprs[2] = Expr::Binary(Binary::Add, 0, 2);
    assert!(err(k).contains("expression 2 uses expression 2, which is not earlier"));
    let mut k = add_bias();
    k.exprs[1] = Expr::Load(5);
    assert!(err(k).contains("expression 1 loads operand 5, but there are 2"));
    let mut k = add_bias();
    k.operands[0].dtype = Scalar::F8E5M2;
    assert!(err(k).contains("operand 0: element type f8E5M2 is not supported"));
    let dup = compile_ptx(&[add_bias(), add_bias()], Sm::Sm86).unwrap_err();
    assert_eq!(dup, "two kernels are named `pw_add_bias`");
}

fn small_tile() -> GemmTile {
    GemmTile {
        bm: 64,
        bn: 64,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 2,
    }
}

#[test]
fn gemm_tile_geometry() {
    let t = GemmTile::default();
    assert_eq!(t.threads(), 128);
    // 3 stages of a 128×(32+8) A tile and a 32×(128+8) B tile, in halves.
    assert_eq!(t.smem_bytes(), 3 * (128 * 40 + 32 * 136) * 2);
    assert_eq!(t.grid(1000, 300, 2), [3, 8, 2]);
    assert_eq!(
        t.entry_name(GemmOut::F16, true),
        "gemm_f16_128x128x32_w2x2_s3_f16_relu"
    );
}

#[test]
fn gemm_ptx_uses_tensor_cores() {
    let t = GemmTile::default();
    let ir = gemm_f16_llvm(Sm::Sm86, t).unwrap();
    assert!(ir.contains("\"nvvm.maxntid\"=\"128\""), "{ir}");
    let ptx = gemm_f16_ptx(Sm::Sm86, t).unwrap();
    assert!(ptx.contains(".target sm_86"));
    for out in GemmOut::ALL {
        for relu in [false, true] {
            let name = t.entry_name(out, relu);
            let body = entry(&ptx, &name);
            // A warp's 64×64 tile is 4×8 m16n8 fragments, over bk/16 = 2
            // k steps: 64 mma per k tile, all unrolled, in each of the two
            // pipelines (16-byte and guarded loads).
            assert_eq!(
                body.matches("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
                    .count(),
                128,
                "{name}"
            );
            assert!(body.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
            assert!(body.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
            assert!(body.contains("cp.async.cg.shared.global"));
            assert!(
                body.contains("cp.async.wait_group 1") || body.contains("cp.async.wait_group \t1")
            );
            assert!(body.contains(".maxntid 128"));
            // 13 parameters.
            assert_eq!(body.matches(".param ").count(), 13, "{name}");
            let f16_store = body.contains("st.global.b16") || body.contains("st.global.u16");
            assert_eq!(f16_store, out == GemmOut::F16, "{name}");
        }
    }
    assert!(ptx.contains(".extern .shared .align 16 .b8 aoc_smem[]"));
}

#[test]
fn gemm_rejects_bad_tiles() {
    let t = GemmTile::default();
    let e = gemm_f16_ptx(Sm::Sm75, t).unwrap_err();
    assert!(e.contains("needs sm_80 or newer"), "{e}");
    let e = gemm_f16_ptx(Sm::Sm86, GemmTile { bm: 100, ..t }).unwrap_err();
    assert_eq!(
        e,
        "bm must be a positive multiple of 16 * warps_m = 32, found 100"
    );
    let e = gemm_f16_ptx(Sm::Sm86, GemmTile { bk: 24, ..t }).unwrap_err();
    assert_eq!(e, "bk must be a positive multiple of 16, found 24");
    let e = gemm_f16_ptx(Sm::Sm86, GemmTile { stages: 1, ..t }).unwrap_err();
    assert_eq!(e, "stages must be 2 to 8, found 1");
    let e = gemm_f16_ptx(
        Sm::Sm86,
        GemmTile {
            warps_m: 1,
            warps_n: 1,
            ..t
        },
    )
    .unwrap_err();
    assert!(e.contains("needs 512 accumulators per thread"), "{e}");
    // 6 stages of 128×128×64: 6 · (128·72 + 64·136) · 2 = 215040 bytes; sm_86
    // has 99 KiB, sm_90 227 KiB.
    let big = GemmTile {
        bk: 64,
        stages: 6,
        ..t
    };
    let e = gemm_f16_ptx(Sm::Sm86, big).unwrap_err();
    assert_eq!(
        e,
        "the tile needs 215040 bytes of shared memory, sm_86 allows 101376"
    );
    assert!(big.check(Sm::Sm90).is_ok());
}

/// A `ptxas` to assemble with, or why there is none.
fn find_ptxas() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("AOC_PTXAS") {
        return Ok(PathBuf::from(p));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("ptxas");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut pythons: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("AOC_PYTHON") {
        pythons.push(p.into());
    }
    pythons.push(root.join(".venv/bin/python3"));
    pythons.push("python3".into());
    for py in &pythons {
        let Ok(out) = Command::new(py)
            .args([
                "-c",
                "import site, sysconfig; print(sysconfig.get_paths()['purelib']); print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))",
            ])
            .output()
        else {
            continue;
        };
        for dir in String::from_utf8_lossy(&out.stdout).lines() {
            for sub in ["nvidia/cu13/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas"] {
                let p = Path::new(dir).join(sub);
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
    }
    Err(
        "no ptxas (set AOC_PTXAS, put ptxas on PATH, or `pip install nvidia-cuda-nvcc==13.0.88` into .venv)"
            .to_string(),
    )
}

/// Assembles `ptx` for `sm`; returns ptxas's `-v` report.
fn assemble(ptxas: &Path, ptx: &str, sm: Sm, what: &str) -> String {
    let dir = std::env::temp_dir().join(format!("aoc-ptx-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{what}-{}.ptx", sm.name()));
    std::fs::write(&src, ptx).unwrap();
    let out = Command::new(ptxas)
        .arg(format!("-arch={}", sm.name()))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(dir.join(format!("{what}-{}.cubin", sm.name())))
        .output()
        .expect("ptxas runs");
    let report = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "ptxas -arch={} rejected {what}:\n{report}",
        sm.name()
    );
    report
}

#[test]
fn ptxas_accepts_every_module() {
    let wide = GemmTile {
        bn: 256,
        warps_n: 4,
        ..GemmTile::default()
    };
    let gemm_tiles = [GemmTile::default(), small_tile(), wide];
    let dump = std::env::var_os("AOC_PTX_DUMP_DIR").map(PathBuf::from);
    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!("skipping the ptxas part: {why}");
    }
    // CUDA 13's ptxas no longer targets sm_70; the text is still generated.
    for sm in [Sm::Sm75, Sm::Sm80, Sm::Sm86, Sm::Sm89, Sm::Sm90, Sm::Sm90a] {
        let mut modules = vec![(
            "pointwise".to_string(),
            compile_ptx(&all_pointwise(), sm).unwrap(),
        )];
        if sm.has_mma_f16() {
            // The 8-warp tile only where the GPU runs are measured.
            let n = if sm == Sm::Sm86 || sm == Sm::Sm90 {
                3
            } else {
                2
            };
            for t in &gemm_tiles[..n] {
                let name = format!(
                    "gemm_{}x{}x{}_w{}x{}_s{}",
                    t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages
                );
                modules.push((name, gemm_f16_ptx(sm, *t).unwrap()));
            }
        }
        for (what, ptx) in &modules {
            assert!(ptx.contains(&format!(".target {}", sm.name())));
            if let Some(dir) = &dump {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("{what}-{}.ptx", sm.name())), ptx).unwrap();
            }
            if let Ok(p) = &ptxas {
                let report = assemble(p, ptx, sm, what);
                if what.starts_with("gemm") && (sm == Sm::Sm86 || sm == Sm::Sm90) {
                    println!("ptxas -arch={} {what}:\n{report}", sm.name());
                }
            }
        }
    }
    let _ = compile_ptx(&all_pointwise(), Sm::Sm70).unwrap();
}

#[test]
fn pointwise_offsets_as_matrix_strides() {
    use aoc_backend_ptx::translate::affine_over;
    // A flat contiguous operand over a 6 × 4 matrix.
    assert_eq!(affine_over(&[24], &[1], 6, 4), Some([4, 1]));
    // A per-column broadcast (bias): rows stride 0.
    assert_eq!(affine_over(&[6, 4], &[0, 1], 6, 4), Some([0, 1]));
    // NHWC [2, 3, 4] (n, hw, c) as a 6 × 4 matrix, contiguous.
    assert_eq!(affine_over(&[2, 3, 4], &[12, 4, 1], 6, 4), Some([4, 1]));
    // A per-image broadcast over rows is not affine in the row index.
    assert_eq!(affine_over(&[2, 3, 4], &[4, 0, 1], 6, 4), None);
    // The column split inside one dimension: [12] as 4 × 3.
    assert_eq!(affine_over(&[12], &[2], 4, 3), Some([6, 2]));
    // Shapes that do not multiply out.
    assert_eq!(affine_over(&[5], &[1], 2, 3), None);
    // Dims collapsed for the vector width across row boundaries (BERT's
    // residual add: [24, 4096] over a 128 × 768 output) are merged first.
    assert_eq!(affine_over(&[24, 4096], &[4096, 1], 128, 768), Some([768, 1]));
    // Two broadcast dims merge too; a per-column operand still needs its split.
    assert_eq!(affine_over(&[2, 3, 4], &[0, 0, 1], 6, 4), Some([0, 1]));
}

/// `clamp(round_even(x / s) + z, lo, hi)` appended to `k`, as the lowering
/// writes `quant.quantize` (`x` is `k`'s last expression); `k` stores it.
fn quantize_tail(k: &mut PointwiseKernel, s: Expr, z: f32, lo: f32, hi: f32) {
    let x = k.exprs.len() - 1;
    let s = k.push(s);
    let q = k.push(Expr::Binary(Binary::Div, x, s));
    let r = k.push(Expr::Unary(Unary::RoundEven, q));
    let z = k.push(Expr::Const(z));
    let t = k.push(Expr::Binary(Binary::Add, r, z));
    let lo = k.push(Expr::Const(lo));
    let t = k.push(Expr::Binary(Binary::Max, t, lo));
    let hi = k.push(Expr::Const(hi));
    k.result = k.push(Expr::Binary(Binary::Min, t, hi));
}

/// `k`'s result for one element, operation by operation in f32 as the
/// kernel-expression semantics define it (the interpreter's quantize), as
/// the store converts it (to f32, i8 or u8): the oracle of the folded form.
fn reference_element(k: &PointwiseKernel, loads: &[f32]) -> f64 {
    let mut v: Vec<f32> = Vec::new();
    for e in &k.exprs {
        let x = match *e {
            Expr::Load(op) => loads[op],
            Expr::Const(c) => c,
            Expr::Int(c) => c as f32,
            Expr::Unary(Unary::RoundEven, a) => v[a].round_ties_even(),
            Expr::Unary(Unary::Trunc, a) => v[a].trunc(),
            Expr::Select(c, a, b) => if v[c] != 0.0 { v[a] } else { v[b] },
            Expr::Binary(op, a, b) => {
                let (a, b) = (v[a], v[b]);
                match op {
                    Binary::Add => a + b,
                    Binary::Sub => a - b,
                    Binary::Mul => a * b,
                    Binary::Div => a / b,
                    Binary::Equal => f32::from(u8::from(a == b)),
                    // numpy's: NaN from either side wins.
                    Binary::Max if a.is_nan() || b.is_nan() => f32::NAN,
                    Binary::Min if a.is_nan() || b.is_nan() => f32::NAN,
                    Binary::Max => a.max(b),
                    Binary::Min => a.min(b),
                    _ => unreachable!("{op:?}"),
                }
            }
            _ => unreachable!("{e:?}"),
        };
        v.push(x);
    }
    // The store: toward zero, saturating, NaN to 0, then the type's range.
    match k.out_dtype {
        Scalar::F32 => v[k.result] as f64,
        Scalar::I8 => (v[k.result] as i32).clamp(-128, 127) as f64,
        _ => (v[k.result] as i32).clamp(0, 255) as f64,
    }
}

/// Appends what `translate::merge` writes to rebuild an intermediate
/// stored as u8 (`q == q ? clamp(trunc(q), 0, 255) : 0`), then its
/// dequantization `(· − z)·s`, the kernel's f32 result.
fn reload_and_dequantize(k: &mut PointwiseKernel, z: f32, s: f32) {
    let q = k.result;
    let t = k.push(Expr::Unary(Unary::Trunc, q));
    let lo = k.push(Expr::Const(0.0));
    let hi = k.push(Expr::Const(255.0));
    let t = k.push(Expr::Binary(Binary::Max, t, lo));
    let t = k.push(Expr::Binary(Binary::Min, t, hi));
    let is_num = k.push(Expr::Binary(Binary::Equal, q, q));
    let zero = k.push(Expr::Const(0.0));
    let r = k.push(Expr::Select(is_num, t, zero));
    let z = k.push(Expr::Const(z));
    let d = k.push(Expr::Binary(Binary::Sub, r, z));
    let s = k.push(Expr::Const(s));
    k.result = k.push(Expr::Binary(Binary::Mul, d, s));
    k.out_dtype = Scalar::F32;
}

/// The quantize that ends a kernel folds into one affine sum (`fma`s, one
/// `cvt.rni`, an integer clamp; no division): a quantized residual add
/// over every pair of bytes, a requantization over every byte, and an
/// input quantize over special and random floats store what the
/// operation-by-operation reference stores or one unit away, NaN and ±∞
/// exactly as it does, and the far larger part exactly. A divisor loaded
/// per element (a per-channel scale) does not fold and stays exact.
#[test]
fn quantize_tails_fold_within_one_unit() {
    use host_sim::{Mem, with_jit};
    let deq = |op: usize, z: f32, s: f32, at: usize| {
        [Expr::Load(op), Expr::Const(z), Expr::Binary(Binary::Sub, at, at + 1), Expr::Const(s), Expr::Binary(Binary::Mul, at + 2, at + 3)]
    };
    // u8 a and i8 b over all 256 × 256 pairs, their sum quantized to u8.
    let mut add = kernel("q_add", &[256, 256], &[(Scalar::U8, &[1, 0]), (Scalar::I8, &[0, 1])], &deq(0, 119.0, 0.043625, 0), Scalar::U8);
    add.exprs.extend(deq(1, -3.0, 0.157034, 5));
    add.push(Expr::Binary(Binary::Add, 4, 9));
    quantize_tail(&mut add, Expr::Const(0.0835015), 7.0, 0.0, 255.0);
    // An i8 byte requantized to i8 at another scale, relu'd by the clamp.
    let mut requant = kernel("q_requant", &[256], &[(Scalar::I8, &[1])], &deq(0, 5.0, 0.0371, 0), Scalar::I8);
    quantize_tail(&mut requant, Expr::Const(0.0213), -20.0, -20.0, 127.0);
    // f32 input, u8 with zero point 128.
    let n = 4096;
    let mut input = kernel("q_input", &[n as u64], &[(Scalar::F32, &[1])], &[Expr::Load(0)], Scalar::U8);
    quantize_tail(&mut input, Expr::Const(0.0123457), 128.0, 0.0, 255.0);
    // The input quantize with a relu clip above its zero point, merged
    // with its reload and a dequantize (an int8 layer's chain into an f32
    // consumer): NaN must still reload as 0.
    let mut chain = kernel("q_chain", &[n as u64], &[(Scalar::F32, &[1])], &[Expr::Load(0)], Scalar::U8);
    quantize_tail(&mut chain, Expr::Const(0.0123457), 3.0, 10.0, 255.0);
    reload_and_dequantize(&mut chain, 3.0, 0.0123457);
    // The scale loaded per element: written as is.
    let mut per_channel = kernel("q_axis", &[n as u64], &[(Scalar::F32, &[1]), (Scalar::F32, &[0])], &[Expr::Load(0)], Scalar::U8);
    quantize_tail(&mut per_channel, Expr::Load(1), 128.0, 0.0, 255.0);
    let kernels = [add, requant, input, chain, per_channel];
    let ir = aoc_backend_ptx::pointwise::module_llvm(&kernels, Sm::Sm90a).unwrap();
    let ptx = compile_ptx(&kernels, Sm::Sm90a).unwrap();
    for k in &kernels {
        let body = entry(&ptx, &k.name);
        let folded = k.name != "q_axis";
        assert_eq!(!body.contains("div.rn.f32"), folded, "{}: division", k.name);
        assert_eq!(body.contains("cvt.rni.s32.f32"), folded, "{}: rounding conversion", k.name);
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut floats: Vec<f32> = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e30, -1e30, 3e38, 1e-40]
        .into_iter()
        .chain((-40..40).map(|i| (i as f32 + 0.5) * 0.0123457))
        .collect();
    while floats.len() < n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        floats.push(((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0);
    }
    let scales: Vec<f32> = (0..n).map(|i| 0.01 + (i % 7) as f32 * 0.003).collect();
    let bytes: Vec<u8> = (0..=255).collect();
    with_jit(&ir, |run| {
        let geo = |items: usize| aoc_backend_ptx::kernels::Geometry { grid: [items.div_ceil(256) as u32, 1, 1], block: [256, 1, 1], smem: 0 };
        let cases: [(&PointwiseKernel, Vec<Mem>, usize); 5] = [
            (&kernels[0], vec![Mem::new(&bytes, 0), Mem::new(&bytes, 0)], 65536),
            (&kernels[1], vec![Mem::new(&bytes, 0)], 256),
            (&kernels[2], vec![Mem::from_f32s(&floats)], n),
            (&kernels[3], vec![Mem::from_f32s(&floats)], n),
            (&kernels[4], vec![Mem::from_f32s(&floats), Mem::from_f32s(&scales)], n),
        ];
        for (k, mut ins, len) in cases {
            let f32_out = k.out_dtype == Scalar::F32;
            let mut out = Mem::new(&vec![0xAB; if f32_out { 4 * len } else { len }], 0);
            let mut bufs: Vec<&mut Mem> = ins.iter_mut().collect();
            bufs.push(&mut out);
            run(&k.name, geo(len), &mut bufs);
            let got: Vec<f64> = match k.out_dtype {
                Scalar::F32 => out.to_f32s().iter().map(|&x| x as f64).collect(),
                Scalar::I8 => out.bytes().iter().map(|&b| b as i8 as f64).collect(),
                _ => out.bytes().iter().map(|&b| b as f64).collect(),
            };
            // One unit of the stored integer (of the chain's quantized step).
            let unit = if f32_out { 0.0123457 * 1.0001 } else { 1.0 };
            let mut exact = 0;
            for (i, &got) in got.iter().enumerate() {
                let loads: Vec<f32> = match k.name.as_str() {
                    "q_add" => vec![(i / 256) as f32, (i % 256) as u8 as i8 as f32],
                    "q_requant" => vec![i as u8 as i8 as f32],
                    "q_axis" => vec![floats[i], scales[0]],
                    _ => vec![floats[i]],
                };
                let want = reference_element(k, &loads);
                let special = loads.iter().any(|x| !x.is_finite());
                assert!((got - want).abs() <= if special { 0.0 } else { unit }, "{}: element {i} ({loads:?}) stores {got}, the reference {want}", k.name);
                exact += usize::from(got == want);
            }
            println!("{}: {exact} of {len} exact, the rest one unit away", k.name);
            // Off by one only near a tie: the 80 inputs made to be ties,
            // and a few of the rest.
            assert!(len - exact <= 80 + len / 200, "{}: only {exact} of {len} exact", k.name);
            if k.name == "q_axis" {
                assert_eq!(exact, len, "the unfolded kernel is exact");
            }
        }
    });
}

/// A module split for parallel code generation lowers to one PTX module
/// with every kernel once, one header, the shared-memory `.extern`s once,
/// and the same kernel bodies as the whole module lowered at once; the
/// split depends only on the module. Parts that both define a
/// module-level symbol are not joined.
#[test]
fn split_code_generation_matches_the_whole_module() {
    use aoc_backend_ptx::kernels::{attention, rows};
    use aoc_backend_ptx::{ModuleText, ir_parts_to_ptx, ir_to_ptx, join_ptx};
    let mut m = ModuleText::new();
    for (i, cols) in [64u64, 768, 3000].into_iter().enumerate() {
        rows::layer_norm(&mut m, &format!("ln{i}"), 128, cols, 1e-5, true, true).unwrap();
        rows::softmax(&mut m, &format!("sm{i}"), 64, cols, false).unwrap();
    }
    let spec = attention::AttentionSpec {
        batch: 2,
        heads: 2,
        sq: 70,
        sk: 70,
        d: 64,
        dv: 64,
        q: [8960, 4480, 64, 1],
        k: [8960, 4480, 64, 1],
        v: [8960, 4480, 64, 1],
        y: [8960, 4480, 64, 1],
        mask: None,
        scale: 0.125,
        aligned16: true,
    };
    attention::attention(&mut m, "attn", &spec, attention::AttnPrecision::F16, Sm::Sm86).unwrap();
    let parts = m.split(4);
    assert_eq!(parts, m.split(4), "the split is deterministic");
    assert_eq!(parts.len(), 4);
    let whole = m.finish();
    let joined = ir_parts_to_ptx(&whole, &parts, Sm::Sm86).unwrap();
    let alone = ir_to_ptx(&whole, Sm::Sm86).unwrap();
    assert_eq!(joined.matches(".target sm_86").count(), 1);
    assert_eq!(joined.matches(".extern .shared .align 16 .b8 aoc_smem[];").count(), 1);
    let names = ["ln0", "ln1", "ln2", "sm0", "sm1", "sm2", "attn"];
    for name in names {
        assert_eq!(joined.matches(&format!(".entry {name}(")).count(), 1, "{name}");
        // The text after the body names the next kernel, and block labels
        // carry the function's index in its module (`$L__BB4_2`): both
        // differ.
        let body = |ptx| {
            let e: &str = entry(ptx, name);
            let mut out = String::new();
            for (i, piece) in e[..e.rfind("\n}\n").expect("a body")].split("$L__BB").enumerate() {
                out.push_str(if i == 0 { piece } else { piece.trim_start_matches(|c: char| c.is_ascii_digit()) });
            }
            out
        };
        assert_eq!(body(&joined), body(&alone), "{name}");
    }
    if let Ok(p) = find_ptxas() {
        let report = assemble(&p, &joined, Sm::Sm86, "split");
        assert_eq!(report.matches("Compiling entry function").count(), names.len(), "{report}");
    }
    let dup = "//\n.version 8.6\n.target sm_86\n.address_size 64\n\n.global .align 4 .b8 table[4];\n".to_string();
    assert!(join_ptx(&[dup.clone(), dup]).is_none());
}
