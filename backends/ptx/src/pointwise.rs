//! GPU code for a [`PointwiseKernel`]: LLVM IR text, then PTX.
//!
//! Kernel ABI (what the CUDA launcher passes, in this order):
//! `(ptr operand_0, …, ptr operand_{n-1}, ptr out, i64 n_elements)`, each
//! pointer a global-memory address, `n_elements` the output's element count
//! (the kernel computes the elements `0..min(n_elements, Π dims)`). Any
//! one-dimensional grid and block work: each thread walks a grid-stride
//! loop over *work items*, [`work_items`] of them.
//!
//! Code shape: the flat item index is split into the output's multi-index by
//! constant division (the outermost non-unit dimension needs none), dotted
//! with each operand's strides; index arithmetic is 32-bit when every
//! offset fits, 64-bit otherwise.
//! - Vector form ([`is_vectorized`]): when the output and every operand the
//!   expression reads are f32, each such operand's last-dimension stride is 0
//!   (a splat) or 1 (its other strides then multiples of 4), and the last
//!   dimension is a multiple of 4, one work item is four consecutive
//!   elements of one row: 16-byte loads and stores (`ld.global.v4.f32`),
//!   the expression evaluated per lane. Buffers must then be 16-byte
//!   aligned (the runtime's arena is).
//! - Scalar form otherwise: one element per work item, any strides and
//!   element types.
//!
//! Invariants:
//! - Only expressions the result depends on are emitted, and only operands
//!   they load are read (an unused operand's pointer may be anything).
//! - Semantics follow `aoc_passes::kernel_expr` and the x86 backend (see
//!   `emit.rs` for conversions and NaN rules, `math.rs` for the accuracy of
//!   exp/log/tanh/erf/pow). Without fast-math flags LLVM writes every f32
//!   operation with an explicit `.rn` rounding, which also keeps `ptxas`
//!   from contracting `a * b + c` into a fused multiply-add: each operation
//!   rounds as it does on the CPU.

use crate::expr::{Expr, PointwiseKernel};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::llvm::ir_to_ptx;
use crate::target::Sm;

mod emit;
pub(crate) mod math;
mod requant;

use emit::Elem;

/// The LLVM IR (text) of a module holding `k` as its only kernel.
pub fn pointwise_llvm(k: &PointwiseKernel, sm: Sm) -> Result<String, String> {
    module_llvm(std::slice::from_ref(k), sm)
}

/// One PTX module with one `.entry` per kernel, named by `PointwiseKernel::name`.
pub fn compile_ptx(kernels: &[PointwiseKernel], sm: Sm) -> Result<String, String> {
    let ir = module_llvm(kernels, sm)?;
    ir_to_ptx(&ir, sm)
}

/// The LLVM IR (text) of a module holding `kernels`. (The IR does not
/// depend on `sm` today; the target is applied when lowering to PTX.)
pub fn module_llvm(kernels: &[PointwiseKernel], _sm: Sm) -> Result<String, String> {
    let mut m = ModuleText::new();
    let mut names = std::collections::HashSet::new();
    for k in kernels {
        check_entry_name(&k.name)?;
        if !names.insert(k.name.as_str()) {
            return Err(format!("two kernels are named `{}`", k.name));
        }
        let f = kernel_function(k, &mut m).map_err(|e| format!("kernel {}: {e}", k.name))?;
        m.func(f);
    }
    Ok(m.finish())
}

/// Adds `k` as one kernel of `m` (its name must be a C identifier).
pub fn add_to_module(k: &PointwiseKernel, m: &mut ModuleText) -> Result<(), String> {
    check_entry_name(&k.name)?;
    let f = kernel_function(k, m).map_err(|e| format!("kernel {}: {e}", k.name))?;
    m.func(f);
    Ok(())
}

/// Defines `define internal T @{name}(float %v, ptr addrspace(1) %a1,
/// i64 %o1, …)`: `e.kernel`'s expression for one element, operand 0 being
/// `%v` (the GEMM's result in a register, or an integer GEMM's requantized
/// 8-bit value as f32, as the pointwise kernel would load it) and operand
/// `k ≥ 1` the element at offset `%ok` (elements) of `%ak`, converted from
/// its type as the pointwise kernel would. The GEMM generators call it
/// before each store of C; the optimizer inlines it. The result is the
/// kernel's output type `T`, converted as the pointwise kernel's store
/// converts. This entry is the float GEMMs': operand 0 and the result are
/// f32 (they store f32); [`define_epilogue_of`] takes the others.
pub fn define_epilogue(m: &mut ModuleText, name: &str, e: &crate::kernels::GemmEpilogue) -> Result<(), String> {
    use aoc_ir::types::Scalar;
    let k = &e.kernel;
    if k.out_dtype != Scalar::F32 {
        return Err(format!("a GEMM epilogue must produce f32, found {}", k.out_dtype.name()));
    }
    if k.operands.is_empty() || k.operands[0].dtype != Scalar::F32 {
        return Err("a GEMM epilogue's operand 0 is the f32 GEMM result".to_string());
    }
    define_epilogue_of(m, name, e)
}

/// [`define_epilogue`] for any operand-0 and output types the pointwise
/// kernel has (the int8 convolution's epilogue reads its 8-bit result and
/// stores 8-bit integers or f32; its generator checks which).
pub fn define_epilogue_of(m: &mut ModuleText, name: &str, e: &crate::kernels::GemmEpilogue) -> Result<(), String> {
    define_epilogue_helper(m, name, e, false)
}

/// The LLVM type and byte size of each operand after the first of the
/// GEMM epilogue `e`: what [`define_epilogue_vals`]'s helper takes.
pub fn epilogue_operand_types(e: &crate::kernels::GemmEpilogue) -> Result<Vec<(&'static str, u64)>, String> {
    e.kernel.operands.iter().skip(1).map(|op| Elem::of(op.dtype).map(|el| (el.ll(), el.size()))).collect()
}

/// [`define_epilogue_of`] whose helper takes the other operands' stored
/// elements as values, `@name(float %v, T1 %x1, …)` with the types of
/// [`epilogue_operand_types`], instead of loading them: the caller loads
/// them (as vectors, early) and the computation is the same. Without other
/// operands the two helpers are the same function.
pub fn define_epilogue_vals(m: &mut ModuleText, name: &str, e: &crate::kernels::GemmEpilogue) -> Result<(), String> {
    define_epilogue_helper(m, name, e, true)
}

/// The helper of [`define_epilogue_of`] (`by_value` false: operand `i` as
/// `ptr addrspace(1) %a{i}, i64 %o{i}`, loaded here) or of
/// [`define_epilogue_vals`] (`by_value`: its stored element `%x{i}`).
fn define_epilogue_helper(m: &mut ModuleText, name: &str, e: &crate::kernels::GemmEpilogue, by_value: bool) -> Result<(), String> {
    let k = &e.kernel;
    if k.operands.is_empty() {
        return Err("a GEMM epilogue's operand 0 is the GEMM result".to_string());
    }
    if e.strides.len() + 1 != k.operands.len() {
        return Err(format!(
            "a GEMM epilogue with {} operands needs {} stride triples, found {}",
            k.operands.len(),
            k.operands.len() - 1,
            e.strides.len()
        ));
    }
    // Stored elements convert to f32 as the f32 compute kinds load them.
    if by_value && k.compute == crate::expr::Compute::I64 {
        return Err("a GEMM epilogue taking its operands as values computes in f32".to_string());
    }
    let elems = k
        .operands
        .iter()
        .enumerate()
        .map(|(i, op)| Elem::of(op.dtype).map_err(|e| format!("operand {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let live = k.live_exprs()?;
    let used = used_operands(k, &live);
    let mut g = Gen {
        b: Body::new(),
        m,
        k,
        live,
        used,
        elems: elems.clone(),
        out: Elem::of(k.out_dtype)?,
        idx: "i64",
    };
    let mut vals = vec![None; k.operands.len()];
    vals[0] = Some("%v".to_string());
    for i in 1..k.operands.len() {
        if !g.used[i] {
            continue;
        }
        let el = elems[i];
        vals[i] = Some(if by_value {
            g.raw_to_f32(el, &format!("%x{i}"))
        } else {
            let p = g.elem_ptr(el.ll(), &format!("%a{i}"), &Some(format!("%o{i}")));
            g.load(el, &p)
        });
    }
    let out = g.out;
    let y = g.stored(&vals);
    g.b.ins(format!("ret {} {y}", out.ll()));
    let params: Vec<String> = std::iter::once("float %v".to_string())
        .chain((1..k.operands.len()).map(|i| {
            if by_value {
                format!("{} %x{i}", elems[i].ll())
            } else {
                format!("ptr addrspace(1) %a{i}, i64 %o{i}")
            }
        }))
        .collect();
    let text = format!(
        "define internal {} @{name}({}) alwaysinline {{\nentry:\n{}}}\n",
        out.ll(),
        params.join(", "),
        g.b.into_text()
    );
    m.helper(name, text);
    Ok(())
}

/// Whether `k` compiles to the vector form (four f32 elements per work
/// item); `k` must be valid.
pub fn is_vectorized(k: &PointwiseKernel) -> bool {
    let Ok(live) = k.live_exprs() else {
        return false;
    };
    vector_ok(k, &used_operands(k, &live))
}

/// How many work items the launcher must cover with threads (the grid-stride
/// loop covers any shortfall, at the cost of parallelism): the element count,
/// or a quarter of it in the vector form.
pub fn work_items(k: &PointwiseKernel) -> u64 {
    let total: u64 = k.dims.iter().product();
    if is_vectorized(k) { total / 4 } else { total }
}


fn used_operands(k: &PointwiseKernel, live: &[bool]) -> Vec<bool> {
    let mut used = vec![false; k.operands.len()];
    for (e, _) in k.exprs.iter().zip(live).filter(|(_, l)| **l) {
        if let Expr::Load(op) = e {
            used[*op] = true;
        }
    }
    used
}

/// The vector-form condition (see the module doc).
fn vector_ok(k: &PointwiseKernel, used: &[bool]) -> bool {
    let Some(&cols) = k.dims.last() else {
        return false;
    };
    let last = k.dims.len() - 1;
    k.out_dtype == aoc_ir::types::Scalar::F32
        && cols % 4 == 0
        && cols > 0
        && k.operands.iter().zip(used).all(|(op, &u)| {
            !u || (op.dtype == aoc_ir::types::Scalar::F32
                && op.strides.len() == k.dims.len()
                && match op.strides[last] {
                    0 => true,
                    1 => op.strides[..last].iter().all(|s| s % 4 == 0),
                    _ => false,
                })
        })
}

/// The generator of one kernel function.
struct Gen<'a> {
    b: Body,
    m: &'a mut ModuleText,
    k: &'a PointwiseKernel,
    live: Vec<bool>,
    used: Vec<bool>,
    elems: Vec<Elem>,
    out: Elem,
    /// `i32` or `i64`: the type of element offsets.
    idx: &'static str,
}

/// Checks `k` and writes its kernel function into `m`'s declarations and
/// returns the definition's text.
fn kernel_function(k: &PointwiseKernel, m: &mut ModuleText) -> Result<String, String> {
    if k.dims.is_empty() {
        return Err("kernel output must have at least one dimension".to_string());
    }
    let mut elems = Vec::with_capacity(k.operands.len());
    for (i, op) in k.operands.iter().enumerate() {
        if op.strides.len() != k.dims.len() {
            return Err(format!(
                "operand {i} must have {} strides, found {}",
                k.dims.len(),
                op.strides.len()
            ));
        }
        elems.push(Elem::of(op.dtype).map_err(|e| format!("operand {i}: {e}"))?);
    }
    let out = Elem::of(k.out_dtype).map_err(|e| format!("output: {e}"))?;
    let live = k.live_exprs()?;
    let used = used_operands(k, &live);

    // 32-bit offsets when the element count and every used operand's
    // largest offset fit in i32 (GEP sign-extends its index).
    let total: u128 = k.dims.iter().map(|&d| d as u128).product();
    let fits = |x: u128| x <= i32::MAX as u128;
    let idx = if fits(total)
        && k.operands.iter().zip(&used).all(|(op, &u)| {
            !u || fits(
                k.dims
                    .iter()
                    .zip(&op.strides)
                    .map(|(&d, &s)| (d.saturating_sub(1) as u128) * s as u128)
                    .sum(),
            )
        }) {
        "i32"
    } else {
        "i64"
    };
    if total > u64::MAX as u128 / 4 {
        return Err(format!("kernel has too many elements ({total})"));
    }

    let mut g = Gen {
        b: Body::new(),
        m,
        k,
        live,
        used,
        elems,
        out,
        idx,
    };
    let params: Vec<String> = (0..k.operands.len())
        .map(|i| format!("ptr addrspace(1) %a{i}"))
        .chain(["ptr addrspace(1) %out".to_string(), "i64 %n".to_string()])
        .collect();
    g.build(total as u64);
    Ok(format!(
        "define ptx_kernel void @{}({}) {{\nentry:\n{}}}\n",
        k.name,
        params.join(", "),
        g.b.into_text()
    ))
}

impl Gen<'_> {
    /// The grid-stride loop around one work item.
    fn build(&mut self, total: u64) {
        if total == 0 {
            self.b.ins("ret void");
            return;
        }
        let vector = vector_ok(self.k, &self.used);
        for r in ["tid", "ctaid", "ntid", "nctaid"] {
            self.m
                .declare(&format!("declare i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"));
        }
        self.m.declare("declare i64 @llvm.umin.i64(i64, i64)");
        let sreg = |g: &mut Self, r: &str| {
            let x = g.b.v(format!("call i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"));
            g.b.v(format!("zext i32 {x} to i64"))
        };
        let tid = sreg(self, "tid");
        let ctaid = sreg(self, "ctaid");
        let ntid = sreg(self, "ntid");
        let nctaid = sreg(self, "nctaid");
        let limit = self
            .b
            .v(format!("call i64 @llvm.umin.i64(i64 %n, i64 {total})"));
        let items = if vector {
            let l3 = self.b.v(format!("add i64 {limit}, 3"));
            self.b.v(format!("lshr i64 {l3}, 2"))
        } else {
            limit
        };
        let base = self.b.v(format!("mul i64 {ctaid}, {ntid}"));
        let start = self.b.v(format!("add i64 {base}, {tid}"));
        let step = self.b.v(format!("mul i64 {ntid}, {nctaid}"));
        let any = self.b.v(format!("icmp ult i64 {start}, {items}"));
        self.b.cond_br(&any, "loop", "exit");

        self.b.place("loop");
        let phi = self
            .b
            .v(format!("phi i64 [ {start}, %entry ], [ %next, %loop ]"));
        let i = if self.idx == "i32" {
            self.b.v(format!("trunc i64 {phi} to i32"))
        } else {
            phi.clone()
        };
        if vector {
            self.vector_item(&i);
        } else {
            self.scalar_item(&i);
        }
        // `%next` is named by hand: the phi above refers to it.
        self.b.ins(format!("%next = add i64 {phi}, {step}"));
        let more = self.b.v(format!("icmp ult i64 %next, {items}"));
        self.b.cond_br(&more, "loop", "exit");
        self.b.place("exit");
        self.b.ins("ret void");
    }

    /// Element offsets of the element with flat output index `e`, per used
    /// operand (`None`: offset 0).
    fn offsets(&mut self, e: &str) -> Vec<Option<String>> {
        let k = self.k;
        let ty = self.idx;
        let mut offs: Vec<Option<String>> = vec![None; k.operands.len()];
        let outer = k.dims.iter().position(|&d| d > 1);
        let mut rem = e.to_string();
        for d in (0..k.dims.len()).rev() {
            let dim = k.dims[d];
            if dim == 1 {
                continue;
            }
            let needed = k
                .operands
                .iter()
                .enumerate()
                .any(|(i, op)| self.used[i] && op.strides[d] != 0);
            let idx = if Some(d) == outer {
                rem.clone()
            } else {
                let idx = if needed {
                    Some(self.b.v(format!("urem {ty} {rem}, {dim}")))
                } else {
                    None
                };
                rem = self.b.v(format!("udiv {ty} {rem}, {dim}"));
                match idx {
                    Some(i) => i,
                    None => continue,
                }
            };
            for (i, op) in k.operands.iter().enumerate() {
                let s = op.strides[d];
                if s == 0 || !self.used[i] {
                    continue;
                }
                let t = if s == 1 {
                    idx.clone()
                } else {
                    self.b.v(format!("mul {ty} {idx}, {s}"))
                };
                offs[i] = Some(match &offs[i] {
                    None => t,
                    Some(o) => self.b.v(format!("add {ty} {o}, {t}")),
                });
            }
        }
        offs
    }

    /// `getelementptr` of element `off` of argument `arg`.
    fn elem_ptr(&mut self, ty: &str, arg: &str, off: &Option<String>) -> String {
        match off {
            None => arg.to_string(),
            Some(o) => self.b.v(format!(
                "getelementptr inbounds {ty}, ptr addrspace(1) {arg}, {} {o}",
                self.idx
            )),
        }
    }

    /// One element: load the used operands, evaluate, store.
    fn scalar_item(&mut self, e: &str) {
        let offs = self.offsets(e);
        let mut vals = vec![None; self.k.operands.len()];
        for i in 0..self.k.operands.len() {
            if !self.used[i] {
                continue;
            }
            let el = self.elems[i];
            let p = self.elem_ptr(el.ll(), &format!("%a{i}"), &offs[i]);
            vals[i] = Some(self.load(el, &p));
        }
        let y = self.stored(&vals);
        let p = self.elem_ptr(self.out.ll(), "%out", &Some(e.to_string()));
        self.store(self.out, &y, &p);
    }

    /// Four f32 elements `4w..4w+4` of one row.
    fn vector_item(&mut self, w: &str) {
        let ty = self.idx;
        let e = self.b.v(format!("shl {ty} {w}, 2"));
        let offs = self.offsets(&e);
        let last = self.k.dims.len() - 1;
        let n = self.k.operands.len();
        let mut lanes: Vec<Vec<Option<String>>> = vec![vec![None; n]; 4];
        for i in 0..n {
            if !self.used[i] {
                continue;
            }
            let p = self.elem_ptr("float", &format!("%a{i}"), &offs[i]);
            if self.k.operands[i].strides[last] == 0 {
                let x = self
                    .b
                    .v(format!("load float, ptr addrspace(1) {p}, align 4"));
                for lane in lanes.iter_mut() {
                    lane[i] = Some(x.clone());
                }
            } else {
                let v = self
                    .b
                    .v(format!("load <4 x float>, ptr addrspace(1) {p}, align 16"));
                for (l, lane) in lanes.iter_mut().enumerate() {
                    lane[i] = Some(self.b.v(format!("extractelement <4 x float> {v}, i32 {l}")));
                }
            }
        }
        let mut acc = "poison".to_string();
        for (l, vals) in lanes.iter().enumerate() {
            let y = self.exprs(vals);
            acc = self.b.v(format!(
                "insertelement <4 x float> {acc}, float {y}, i32 {l}"
            ));
        }
        let p = self.elem_ptr("float", "%out", &Some(e));
        self.b.ins(format!(
            "store <4 x float> {acc}, ptr addrspace(1) {p}, align 16"
        ));
    }
}
