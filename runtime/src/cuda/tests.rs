//! GPU tests: they run where a driver and a GPU exist and print why they
//! skip elsewhere (CI has no GPU; `make gpu-test` runs them on one).

use super::*;
use cudarc::driver::{LaunchConfig, PushKernelArg};

/// `y[i] = a[i] * 2 + b[i]` for i < n, written by hand in PTX 7.0 (sm_70+).
const SAXPY: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry twice_plus(.param .u64 a, .param .u64 b, .param .u64 y, .param .u32 n) {
  .reg .pred %p;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %d<8>;
  ld.param.u64 %d1, [a];
  ld.param.u64 %d2, [b];
  ld.param.u64 %d3, [y];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p, %r5, %r1;
  @%p bra DONE;
  cvta.to.global.u64 %d1, %d1;
  cvta.to.global.u64 %d2, %d2;
  cvta.to.global.u64 %d3, %d3;
  mul.wide.u32 %d4, %r5, 4;
  add.s64 %d5, %d1, %d4;
  add.s64 %d6, %d2, %d4;
  add.s64 %d7, %d3, %d4;
  ld.global.f32 %f1, [%d5];
  ld.global.f32 %f2, [%d6];
  fma.rn.f32 %f3, %f1, 0f40000000, %f2;
  st.global.f32 [%d7], %f3;
DONE:
  ret;
}
"#;

fn gpu() -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) => {
            println!("skipped: {e}");
            None
        }
    }
}

#[test]
fn targets_name_their_sm() {
    assert_eq!(sm_of_target("sm_86"), Some(86));
    assert_eq!(sm_of_target("sm_90a"), Some(90));
    assert_eq!(sm_of_target("x86-64"), None);
}

#[test]
fn loads_ptx_and_launches_a_kernel() {
    let Some(g) = gpu() else { return };
    println!("GPU: {} (sm_{})", g.name(), g.sm());
    let m = g.load_ptx(SAXPY).expect("the driver JIT-compiles sm_70 PTX");
    let f = g.function(&m, "twice_plus").expect("the kernel exists");
    let n = 1000u32;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let s = g.stream();
    let da = s.clone_htod(&a).unwrap();
    let db = s.clone_htod(&b).unwrap();
    let mut dy = s.alloc_zeros::<f32>(n as usize).unwrap();
    let cfg = LaunchConfig { grid_dim: (n.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut launch = s.launch_builder(&f);
    launch.arg(&da).arg(&db).arg(&mut dy).arg(&n);
    // SAFETY: the kernel reads n floats of a and b and writes n of y.
    unsafe { launch.launch(cfg) }.unwrap();
    let y = s.clone_dtoh(&dy).unwrap();
    for i in 0..n as usize {
        assert_eq!(y[i], a[i] * 2.0 + b[i], "element {i}");
    }
    assert!(g.function(&m, "missing").is_err());
    assert!(g.load_ptx(".version 7.0\n.target sm_70\nnot ptx").is_err());
}

#[test]
fn newer_targets_are_refused() {
    let Some(g) = gpu() else { return };
    assert!(g.check_target(&format!("sm_{}", g.sm())).is_ok());
    let err = g.check_target("sm_120").unwrap_err();
    assert!(err.message().contains("newer than this GPU"), "{err}");
    if g.sm() != 90 {
        assert!(g.check_target("sm_90a").is_err());
    }
}
