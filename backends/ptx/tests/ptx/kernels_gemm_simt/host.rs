//! `gemm_simt` kernels *run* on the host: there is no GPU here, so the
//! generated LLVM IR is compiled for the host by LLVM's JIT, with the
//! special registers and the barrier replaced by host functions and
//! dynamic shared memory by a global, and every block is executed with its
//! threads as OS threads (so shared memory and barriers behave as on the
//! GPU). Results, with and without pointwise epilogues, are compared with
//! a naive product of the `GemmSpec`'s semantics, for every candidate tile
//! (16-byte and scalar paths, edge guards, k-split reduction, grid.z).
//! Buffers sit between guard bytes: an out-of-bounds write changes them,
//! an out-of-bounds read brings their pattern into the result.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Barrier, Once};

use aoc_backend_ptx::ModuleText;
use aoc_backend_ptx::kernels::gemm_simt::{SimtTile, gemm_f32_with, pick_tile};
use aoc_backend_ptx::kernels::{AMode, GemmEpilogue, GemmSpec, Geometry};
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};

use super::{cases, conv, dense, geom, residual_relu, scale_cols_add_i8};

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
    static CTAID: Cell<[u32; 2]> = const { Cell::new([0, 0]) };
    static BARRIER: RefCell<Option<Arc<Barrier>>> = const { RefCell::new(None) };
}

extern "C" fn sim_tid() -> u32 {
    TID.with(|t| t.get())
}

extern "C" fn sim_ctaid_x() -> u32 {
    CTAID.with(|t| t.get()[0])
}

extern "C" fn sim_ctaid_z() -> u32 {
    CTAID.with(|t| t.get()[1])
}

extern "C" fn sim_fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

extern "C" fn sim_barrier(_: i32) {
    let b = BARRIER.with(|b| b.borrow().clone());
    b.expect("a barrier outside a block run").wait();
}

/// The module rewritten for the host (generic address spaces, host hooks,
/// shared memory as an external-linkage global so that the optimizer keeps
/// its accesses on their side of the opaque barrier calls; the register
/// pin's constraint for an SSE register), plus `@{name}.host(ptr args)`
/// per kernel, which calls it with the pointers in `args`.
fn host_ir(ir: &str) -> String {
    let mut text = ir
        .lines()
        .filter(|l| !l.starts_with("target triple"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "@aoc_smem = external addrspace(3) global [0 x i8]",
            "@aoc_smem = global [49152 x i8] zeroinitializer",
        )
        .replace("ptx_kernel ", "")
        .replace("ptr addrspace(1)", "ptr")
        .replace("ptr addrspace(3)", "ptr")
        .replace("\"=f,0\"", "\"=x,0\"")
        .replace("@llvm.nvvm.read.ptx.sreg.", "@sim.")
        .replace("@llvm.nvvm.barrier.cta.sync.aligned.all", "@sim.barrier")
        .replace("@llvm.fma.f32", "@sim.fma");
    let mut wrappers = String::new();
    for def in text.split("\ndefine void @").skip(1) {
        let name = &def[..def.find('(').unwrap()];
        let params = def[..def.find('\n').unwrap()].matches("ptr ").count();
        wrappers.push_str(&format!("\ndefine void @{name}.host(ptr %args) {{\n"));
        for i in 0..params {
            wrappers.push_str(&format!(
                "  %g{i} = getelementptr ptr, ptr %args, i64 {i}\n  %p{i} = load ptr, ptr %g{i}\n"
            ));
        }
        let args: Vec<String> = (0..params).map(|i| format!("ptr %p{i}")).collect();
        wrappers.push_str(&format!(
            "  call void @{name}({})\n  ret void\n}}\n",
            args.join(", ")
        ));
    }
    text.push_str(&wrappers);
    text
}

/// A buffer of `len` bytes, 16-byte aligned, between guard bytes.
struct Mem {
    raw: Vec<u128>,
    len: usize,
}

const GUARD: usize = 64;
const POISON: u8 = 0xEE;

impl Mem {
    fn new(data: &[u8]) -> Mem {
        let words = (2 * GUARD + data.len()).div_ceil(16);
        let mut m = Mem {
            raw: vec![u128::from_le_bytes([POISON; 16]); words],
            len: data.len(),
        };
        m.all_mut()[GUARD..GUARD + data.len()].copy_from_slice(data);
        m
    }

    fn f32s(x: &[f32]) -> Mem {
        Mem::new(&x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    fn all(&self) -> &[u8] {
        // SAFETY: the Vec's storage is plain bytes of this length.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr() as *const u8, self.raw.len() * 16) }
    }

    fn all_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `all`.
        unsafe {
            std::slice::from_raw_parts_mut(self.raw.as_mut_ptr() as *mut u8, self.raw.len() * 16)
        }
    }

    fn ptr(&mut self) -> usize {
        self.all_mut()[GUARD..].as_mut_ptr() as usize
    }

    fn bytes(&self) -> &[u8] {
        &self.all()[GUARD..GUARD + self.len]
    }

    fn to_f32s(&self) -> Vec<f32> {
        self.bytes()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn guards_intact(&self) -> bool {
        let all = self.all();
        all[..GUARD]
            .iter()
            .chain(&all[GUARD + self.len..])
            .all(|&b| b == POISON)
    }
}

/// Pseudo-random values in [-1, 1) (an LCG), seeded.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// JIT-compiles `ir` for the host and hands `f` a runner of its kernels:
/// `run(name, geometry, buffers)` executes every thread of every block.
fn with_jit(ir: &str, f: impl FnOnce(&dyn Fn(&str, Geometry, &mut [&mut Mem]))) {
    static NATIVE: Once = Once::new();
    NATIVE.call_once(|| Target::initialize_native(&InitializationConfig::default()).unwrap());
    let context = Context::create();
    let text = host_ir(ir);
    let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "sim");
    let module = context
        .create_module_from_ir(buf)
        .unwrap_or_else(|e| panic!("host ir does not parse: {}", e.to_string_lossy()));
    module
        .verify()
        .unwrap_or_else(|e| panic!("{}", e.to_string_lossy()));
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).unwrap();
    let tm = target
        .create_target_machine(
            &triple,
            "x86-64",
            "",
            OptimizationLevel::Default,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .unwrap();
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    // Optimized as on the GPU path, so that what the optimizer may assume
    // (`noalias`, `inbounds`) is exercised too.
    module
        .run_passes("default<O2>", &tm, PassBuilderOptions::create())
        .unwrap();
    let ee = module
        .create_jit_execution_engine(OptimizationLevel::Default)
        .unwrap();
    let hooks: [(&str, usize); 5] = [
        ("sim.fma", sim_fma as *const () as usize),
        ("sim.tid.x", sim_tid as *const () as usize),
        ("sim.ctaid.x", sim_ctaid_x as *const () as usize),
        ("sim.ctaid.z", sim_ctaid_z as *const () as usize),
        ("sim.barrier", sim_barrier as *const () as usize),
    ];
    for (name, addr) in hooks {
        if let Some(func) = module.get_function(name) {
            ee.add_global_mapping(&func, addr);
        }
    }
    let run = |name: &str, g: Geometry, bufs: &mut [&mut Mem]| {
        assert_eq!((g.grid[1], g.block[1], g.block[2]), (1, 1, 1), "{name}");
        let addr = ee.get_function_address(&format!("{name}.host")).unwrap();
        let ptrs: Vec<usize> = bufs.iter_mut().map(|b| b.ptr()).collect();
        let call = move |tid: u32, ctaid: [u32; 2]| {
            TID.with(|t| t.set(tid));
            CTAID.with(|t| t.set(ctaid));
            // SAFETY: the wrapper reads one pointer per kernel parameter
            // from `ptrs`, which the caller sized to the kernel's ABI.
            unsafe {
                std::mem::transmute::<usize, extern "C" fn(*const usize)>(addr)(ptrs.as_ptr())
            }
        };
        for z in 0..g.grid[2] {
            for x in 0..g.grid[0] {
                let bar = Arc::new(Barrier::new(g.block[0] as usize));
                std::thread::scope(|s| {
                    for tid in 0..g.block[0] {
                        let (bar, call) = (bar.clone(), call.clone());
                        std::thread::Builder::new()
                            .stack_size(256 << 10)
                            .spawn_scoped(s, move || {
                                BARRIER.with(|b| *b.borrow_mut() = Some(bar));
                                call(tid, [x, z]);
                            })
                            .unwrap();
                    }
                });
            }
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.guards_intact(),
                "{name}: buffer {i} written out of bounds"
            );
        }
    };
    f(&run);
}

/// Elements a strided operand spans.
fn span(strides: [u64; 3], extents: [u64; 3]) -> usize {
    (0..3)
        .map(|d| strides[d] * extents[d].saturating_sub(1))
        .sum::<u64>() as usize
        + 1
}

/// `A_b[i][kk]` as `AMode` defines it.
fn a_elem(s: &GemmSpec, a: &[f32], b: u64, i: u64, kk: u64) -> f32 {
    match s.a {
        AMode::Strided { batch, row, col } => a[(b * batch + i * row + kk * col) as usize],
        AMode::Conv(g) => {
            let cg = g.c / g.group;
            let (img, oy, ox) = (i / (g.oh * g.ow), i / g.ow % g.oh, i % g.ow);
            let (ky, kx, ci) = (kk / cg / g.kw, kk / cg % g.kw, kk % cg);
            let y = (oy * g.stride[0] + ky * g.dilation[0]) as i64 - g.pads[0] as i64;
            let x = (ox * g.stride[1] + kx * g.dilation[1]) as i64 - g.pads[1] as i64;
            if y < 0 || x < 0 || y >= g.h as i64 || x >= g.w as i64 {
                return 0.0;
            }
            a[(((img * g.h + y as u64) * g.w + x as u64) * g.c + b * cg + ci) as usize]
        }
    }
}

/// One product to run: the spec, its epilogue with its operands' bytes,
/// and the epilogue's meaning for the reference, `f(x, b, i, j)`.
struct Case {
    name: &'static str,
    spec: GemmSpec,
    epi: Option<(GemmEpilogue, Vec<Vec<u8>>)>,
    f: Box<dyn Fn(f32, u64, u64, u64) -> f32>,
}

/// Runs `case` with every candidate tile and compares C with the naive
/// product: every element of the view within fp32 rounding, every other
/// element of C's buffer untouched.
fn check(case: &Case) {
    let s = &case.spec;
    let a_len = match s.a {
        AMode::Strided { batch, row, col } => span([batch, row, col], [s.batch, s.m, s.k]),
        AMode::Conv(g) => (g.n * g.h * g.w * g.c) as usize,
    };
    let a = values(a_len, 1);
    let b = values(span(s.b_strides, [s.batch, s.k, s.n]), 2);
    let bias = s
        .bias
        .map(|st| values(span([st, 0, 1], [s.batch, 1, s.n]), 3));
    let c_len = span(s.c_strides, [s.batch, s.m, s.n]);
    let mut want = vec![f32::from_bits(0x7fc0_1234); c_len];
    for bt in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = bias
                    .as_ref()
                    .map_or(0.0, |v| f64::from(v[(bt * s.bias.unwrap() + j) as usize]));
                for kk in 0..s.k {
                    let bv = b
                        [(bt * s.b_strides[0] + kk * s.b_strides[1] + j * s.b_strides[2]) as usize];
                    acc += f64::from(a_elem(s, &a, bt, i, kk)) * f64::from(bv);
                }
                let mut x = acc as f32;
                if s.relu {
                    x = x.max(0.0);
                }
                let [c0, c1, c2] = s.c_strides;
                want[(bt * c0 + i * c1 + j * c2) as usize] = (case.f)(x, bt, i, j);
            }
        }
    }
    let mut m = ModuleText::new();
    let tiles: Vec<SimtTile> = SimtTile::CANDIDATES.to_vec();
    assert!(tiles.contains(&pick_tile(s)));
    let mut geoms = Vec::new();
    for (ti, t) in tiles.iter().enumerate() {
        let name = format!("{}_t{ti}", case.name);
        let epi = case.epi.as_ref().map(|e| &e.0);
        geoms.push((
            name.clone(),
            gemm_f32_with(&mut m, &name, s, *t, epi).unwrap(),
        ));
    }
    with_jit(&m.finish(), |run| {
        for (name, g) in &geoms {
            let mut bufs = vec![Mem::f32s(&a), Mem::f32s(&b)];
            bufs.extend(bias.as_deref().map(Mem::f32s));
            bufs.push(Mem::f32s(&vec![f32::from_bits(0x7fc0_1234); c_len]));
            let ci = bufs.len() - 1;
            for x in case.epi.iter().flat_map(|e| &e.1) {
                bufs.push(Mem::new(x));
            }
            let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
            run(name, *g, &mut refs);
            let got = bufs[ci].to_f32s();
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_nan() {
                    g.to_bits() == w.to_bits()
                } else {
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs())
                };
                assert!(ok, "{name}: C[{o}] = {g}, want {w}");
            }
            for (i, x) in case.epi.iter().flat_map(|e| &e.1).enumerate() {
                assert_eq!(bufs[ci + 1 + i].bytes(), &x[..], "{name}: operand changed");
            }
        }
    });
}

fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn gemm_simt_kernels_run_like_the_spec() {
    // Dense, aligned (16-byte paths), bias and relu, then relu(x + r).
    let s = GemmSpec {
        bias: Some(0),
        relu: true,
        ..dense(70, 68, 40)
    };
    let r = values(70 * 68, 10);
    let rr = r.clone();
    check(&Case {
        name: "dense_res",
        spec: s,
        epi: Some((residual_relu([0, 68, 1]), vec![f32_bytes(&r)])),
        f: Box::new(move |x, _, i, j| (x + rr[(i * 68 + j) as usize]).max(0.0)),
    });
    // Batched, unaligned, strided: x · s[b][j] + q[b][j][i] (an i8 tensor
    // transposed against C).
    let s = cases()
        .into_iter()
        .find(|c| c.0 == "unaligned_strided")
        .unwrap()
        .1;
    let (bt, m, n) = (s.batch, s.m, s.n);
    let sc = values((bt * n) as usize, 11);
    let q: Vec<u8> = values((bt * n * m) as usize, 12)
        .iter()
        .map(|v| ((v * 100.0) as i8) as u8)
        .collect();
    let mut e = scale_cols_add_i8([n * m, 1, m]);
    e.strides[0] = [n, 0, 1];
    let (sc2, q2) = (sc.clone(), q.clone());
    check(&Case {
        name: "unaligned_scale_i8",
        spec: s,
        epi: Some((e, vec![f32_bytes(&sc), q])),
        f: Box::new(move |x, b, i, j| {
            x * sc2[(b * n + j) as usize] + f32::from(q2[(b * n * m + j * m + i) as usize] as i8)
        }),
    });
    // Grouped convolution (grid.z = 2) with an NHWC residual laid out as C.
    let s = conv(geom(2, 7, 8, 16, 3, 1, 1, 2), true, false);
    let r = values(span(s.c_strides, [s.batch, s.m, s.n]), 13);
    let (rr, c) = (r.clone(), s.c_strides);
    check(&Case {
        name: "conv_res",
        spec: s,
        epi: Some((residual_relu(c), vec![f32_bytes(&r)])),
        f: Box::new(move |x, b, i, j| (x + rr[(b * c[0] + i * c[1] + j * c[2]) as usize]).max(0.0)),
    });
    // Without an epilogue: three batches on grid.z, A broadcast.
    let s = cases()
        .into_iter()
        .find(|c| c.0 == "batch_broadcast")
        .unwrap()
        .1;
    check(&Case {
        name: "batch_plain",
        spec: s,
        epi: None,
        f: Box::new(|x, _, _, _| x),
    });
}
