//! Generated kernels *run* on the host, the one harness the kernel tests
//! share: there is no GPU in CI, so a module's LLVM IR is compiled for the
//! host by LLVM's JIT, with the special registers, the barrier and `fma`
//! replaced by host functions and shared memory by globals, and every block
//! of the launch geometry is executed (a block's threads as OS threads when
//! the kernel has barriers, so shared memory and barriers behave as on the
//! GPU; one after another otherwise). Buffers sit between guard bytes: an
//! out-of-bounds write changes them (the runner asserts they are intact),
//! an out-of-bounds read brings their pattern into the result.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Barrier, Once};

use aoc_backend_ptx::kernels::Geometry;
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
    static CTAID: Cell<[u32; 2]> = const { Cell::new([0, 0]) };
    /// The launch's block size and grid size (x).
    static NTID: Cell<[u32; 2]> = const { Cell::new([0, 0]) };
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

extern "C" fn sim_ntid_x() -> u32 {
    NTID.with(|t| t.get()[0])
}

extern "C" fn sim_nctaid_x() -> u32 {
    NTID.with(|t| t.get()[1])
}

extern "C" fn sim_fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// `cvt.rni.s32.f32` and `cvt.rzi.s32.f32` (inline PTX in the kernels):
/// rounded to nearest even or toward zero, saturating, NaN to 0, as
/// Rust's `as` converts.
extern "C" fn sim_cvt_rni(x: f32) -> i32 {
    x.round_ties_even() as i32
}

extern "C" fn sim_cvt_rzi(x: f32) -> i32 {
    x as i32
}

extern "C" fn sim_barrier(_: i32) {
    let b = BARRIER.with(|b| b.borrow().clone());
    b.expect("a barrier outside a block run").wait();
}

/// The calling thread's index in its block (for host functions that
/// emulate collective instructions, given with [`with_jit_hooks`]).
pub fn thread_index() -> u32 {
    sim_tid()
}

/// The block barrier, for host functions that emulate collective
/// instructions.
pub fn block_barrier() {
    sim_barrier(0)
}

/// The module rewritten for the host: no target triple, generic address
/// spaces, host hooks for the GPU's registers, barrier, `fma` and the
/// inline `cvt` to i32; shared
/// memory (static arrays, and the dynamic `@aoc_smem`) as external-linkage
/// globals, so that the optimizer keeps their accesses on their side of the
/// opaque barrier calls; the register pin's constraint for an SSE register.
/// Plus `@{name}.host(ptr args)` per kernel, which calls it with the
/// pointers in `args` (any parameter count; a pointwise kernel's element
/// limit `i64 %n` is passed as "all").
fn host_ir(ir: &str) -> String {
    let mut text = ir
        .lines()
        .filter(|l| !l.starts_with("target triple"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "@aoc_smem = external addrspace(3) global [0 x i8]",
            "@aoc_smem = global [131072 x i8] zeroinitializer",
        )
        .replace("ptx_kernel ", "")
        .replace("internal addrspace(3) global", "global")
        .replace("addrspace(1)", "addrspace(0)")
        .replace("addrspace(3)", "addrspace(0)")
        .replace("\"=f,0\"", "\"=x,0\"")
        .replace("@llvm.nvvm.read.ptx.sreg.", "@sim.")
        .replace("@llvm.nvvm.barrier.cta.sync.aligned.all", "@sim.barrier")
        .replace("@llvm.fma.f32", "@sim.fma");
    for mode in ["rni", "rzi"] {
        let asm = format!("call i32 asm \"cvt.{mode}.s32.f32 $0, $1;\", \"=r,f\"(");
        if text.contains(&asm) {
            text = text.replace(&asm, &format!("call i32 @sim.cvt.{mode}("));
            text.push_str(&format!("\ndeclare i32 @sim.cvt.{mode}(float)\n"));
        }
    }
    let mut wrappers = String::new();
    for def in text.split("\ndefine void @").skip(1) {
        let name = &def[..def.find('(').unwrap()];
        let params = def[..def.find('\n').unwrap()].matches("ptr ").count();
        // A pointwise kernel's trailing `i64 %n` (its element limit) is
        // passed as all of them.
        let count = def[..def.find('\n').unwrap()].contains("i64 %n)");
        wrappers.push_str(&format!("\ndefine void @{name}.host(ptr %args) {{\n"));
        for i in 0..params {
            wrappers.push_str(&format!(
                "  %g{i} = getelementptr ptr, ptr %args, i64 {i}\n  %p{i} = load ptr, ptr %g{i}\n"
            ));
        }
        let mut args: Vec<String> = (0..params).map(|i| format!("ptr %p{i}")).collect();
        if count {
            args.push("i64 -1".to_string());
        }
        wrappers.push_str(&format!(
            "  call void @{name}({})\n  ret void\n}}\n",
            args.join(", ")
        ));
    }
    text.push_str(&wrappers);
    text
}

/// A device buffer: `len` bytes at `misalign` bytes past a 16-byte
/// boundary, between guard bytes.
pub struct Mem {
    raw: Vec<u128>,
    start: usize,
    len: usize,
}

const GUARD: usize = 64;
const POISON: u8 = 0xEE;

impl Mem {
    pub fn new(data: &[u8], misalign: usize) -> Mem {
        let start = GUARD + misalign;
        let total = start + data.len() + GUARD;
        let mut m = Mem {
            raw: vec![u128::from_le_bytes([POISON; 16]); total.div_ceil(16)],
            start,
            len: data.len(),
        };
        m.bytes_mut().copy_from_slice(data);
        m
    }

    /// 16-byte aligned f32 values.
    pub fn from_f32s(x: &[f32]) -> Mem {
        Mem::new(&f32_bytes(x), 0)
    }

    fn all(&self) -> &[u8] {
        // SAFETY: the Vec's storage is plain bytes of this length.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr() as *const u8, self.raw.len() * 16) }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.all()[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let (s, n) = (self.start, self.len);
        // SAFETY: as in `all`.
        let all = unsafe {
            std::slice::from_raw_parts_mut(self.raw.as_mut_ptr() as *mut u8, self.raw.len() * 16)
        };
        &mut all[s..s + n]
    }

    fn ptr(&mut self) -> usize {
        self.bytes_mut().as_mut_ptr() as usize
    }

    fn guards_intact(&self) -> bool {
        let all = self.all();
        all[..self.start]
            .iter()
            .chain(&all[self.start + self.len..])
            .all(|&b| b == POISON)
    }

    pub fn to_f32s(&self) -> Vec<f32> {
        self.bytes()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

pub fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// JIT-compiles `ir` (a whole module) for the host and hands `f` a runner
/// of its kernels: `run(name, geometry, buffers)` executes every thread of
/// every block (grid x and z; y and the block's y/z must be 1) and asserts
/// that no buffer was written out of bounds.
pub fn with_jit(ir: &str, f: impl FnOnce(&dyn Fn(&str, Geometry, &mut [&mut Mem]))) {
    with_jit_hooks(ir, &[], f)
}

/// [`with_jit`] with more host functions: `(name, address)` of an
/// `extern "C"` function each, bound to the module's declaration of
/// `name` (an emulated instruction too large to write in IR).
pub fn with_jit_hooks(ir: &str, extra: &[(&str, usize)], f: impl FnOnce(&dyn Fn(&str, Geometry, &mut [&mut Mem]))) {
    static NATIVE: Once = Once::new();
    NATIVE.call_once(|| Target::initialize_native(&InitializationConfig::default()).unwrap());
    let context = Context::create();
    let text = host_ir(ir);
    let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "sim");
    let module = context
        .create_module_from_ir(buf)
        .unwrap_or_else(|e| panic!("host ir does not parse: {}\n{text}", e.to_string_lossy()));
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
    let hooks: [(&str, usize); 9] = [
        ("sim.fma", sim_fma as *const () as usize),
        ("sim.cvt.rni", sim_cvt_rni as *const () as usize),
        ("sim.cvt.rzi", sim_cvt_rzi as *const () as usize),
        ("sim.tid.x", sim_tid as *const () as usize),
        ("sim.ctaid.x", sim_ctaid_x as *const () as usize),
        ("sim.ctaid.z", sim_ctaid_z as *const () as usize),
        ("sim.ntid.x", sim_ntid_x as *const () as usize),
        ("sim.nctaid.x", sim_nctaid_x as *const () as usize),
        ("sim.barrier", sim_barrier as *const () as usize),
    ];
    for &(name, addr) in hooks.iter().chain(extra) {
        if let Some(func) = module.get_function(name) {
            ee.add_global_mapping(&func, addr);
        }
    }
    let run = |name: &str, g: Geometry, bufs: &mut [&mut Mem]| {
        let def = text
            .find(&format!(" @{name}("))
            .expect("the kernel is defined");
        let body = &text[def..][..text[def..].find("\n}").unwrap_or(0)];
        let barriers = body.contains("@sim.barrier(");
        assert!(
            g.grid[0] >= 1 && g.grid[2] >= 1 && g.block[0] >= 1 && g.block[0] <= 1024,
            "{name}: {g:?}"
        );
        assert_eq!((g.grid[1], g.block[1], g.block[2]), (1, 1, 1), "{name}");
        let addr = ee.get_function_address(&format!("{name}.host")).unwrap();
        let ptrs: Vec<usize> = bufs.iter_mut().map(|b| b.ptr()).collect();
        let call = move |tid: u32, ctaid: [u32; 2]| {
            TID.with(|t| t.set(tid));
            CTAID.with(|t| t.set(ctaid));
            NTID.with(|t| t.set([g.block[0], g.grid[0]]));
            // SAFETY: the wrapper reads one pointer per kernel parameter
            // from `ptrs`, which the caller sized to the kernel's ABI.
            unsafe {
                std::mem::transmute::<usize, extern "C" fn(*const usize)>(addr)(ptrs.as_ptr())
            }
        };
        for z in 0..g.grid[2] {
            for x in 0..g.grid[0] {
                if !barriers {
                    for tid in 0..g.block[0] {
                        call(tid, [x, z]);
                    }
                    continue;
                }
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
