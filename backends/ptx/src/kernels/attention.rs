//! Fused scaled dot-product attention (`Step::Attention`): per batch index
//! `b < batch` and head `h < heads`,
//! `s[i][j] = scale · Σ_{f<d} Q[b,h,i,f]·K[b,h,j,f] (+ mask[b,h,i,j])`,
//! `p[i] = softmax_j(s[i])`, `Y[b,h,i,f] = Σ_{j<sk} p[i][j]·V[b,h,j,f]`,
//! where `X[b,h,r,f]` is element `b·X0 + h·X1 + r·X2 + f·X3` of its f32
//! buffer (strides in elements, any value, 0 broadcasts). The score matrix
//! never reaches global memory: a block owns a tile of query rows of one
//! `(b, h)`, walks the keys in tiles staged in shared memory, and keeps the
//! running row maximum, the running sum and the output rows on chip
//! (online softmax), rescaling them when the maximum grows; `Y` is written
//! once.
//!
//! Kernel ABI: parameters `q, k, v, [mask], y` (global f32 pointers; `mask`
//! only when `spec.mask` is `Some`). Launch: grid `[batch·heads·⌈sq/R⌉, 1,
//! 1]` (block `x` is query tile `x % ⌈sq/R⌉` of problem `x / ⌈sq/R⌉ =
//! b·heads + h`), block `[128, 1, 1]`, dynamic shared memory as the
//! returned [`Geometry`] says (at most 52 KiB). `R` is 32 for
//! [`AttnPrecision::F32`] and 64 for the tensor-core precisions. An empty
//! problem (`batch`, `heads`, `sq` or `dv` zero) gives a kernel that
//! returns at once, grid `[1, 1, 1]`. An operand of q, k, v given a
//! dequantization ([`attention_bytes`]) is passed as 8-bit integers at the
//! f32 operand's element offsets (4-byte loads where the f32 form loads 16
//! bytes), each dequantized to the f32 value as it is staged: the kernel
//! computes what it would on the dequantized f32 tensor, from a quarter of
//! the bytes.
//!
//! - [`AttnPrecision::F32`] (`simt`, every architecture): CUDA cores, key
//!   tiles of 32, fp32 throughout; the exponential is `pointwise::math`'s
//!   `@aoc.exp` (as the CPU's, a few ulp).
//! - [`AttnPrecision::F16`] / [`AttnPrecision::Bf16`] (`tc`, sm_80 and
//!   newer): Q, K and V are rounded to the half type as they are staged
//!   into shared memory, `S = Q·Kᵀ` and `P·V` run on `mma.sync` m16n8k16
//!   with f32 accumulators, P is rounded to the half type in registers (the
//!   C fragments of two n8 tiles are the A fragment of the next product),
//!   V fragments come from `ldmatrix.trans`; the exponential is
//!   `ex2.approx` (its error is far below the half rounding of P).
//!
//! Numerics, as the CPU softmax (`aoc_runtime::kernels::norm`): the row
//! maximum ignores NaN (`maxnum`), a NaN score makes the row NaN through
//! the sum; a row whose scores are all `-inf` (fully masked) gives NaN, as
//! `exp(-inf − -inf)` does on the CPU; `sk == 0` gives `Y = 0`. While a
//! row's running maximum is still `-inf` the exponentials are taken
//! against 0 instead (they are all 0 then), so a leading masked tile does
//! not poison the row; the final `0 / 0` of a fully masked row is the NaN.
//!
//! Invariants:
//! - `d, dv ≤` [`MAX_HEAD_DIM`]; every extent is below 2^30 and every
//!   operand's largest offset fits an i64 (checked, else `Err`), so row
//!   and key indices are i32 and offsets i64.
//! - Loads are 16 bytes where the feature stride is 1, the feature count a
//!   multiple of 4 and the other strides multiples of 4 (or over extents
//!   of 1); element loads otherwise. Loads outside an operand (rows past
//!   `sq`/`sk`, features past `d`) read its first element of the problem
//!   and are replaced by 0; missing keys score `-inf`.
//! - Loop-carried values live in allocas of the entry block with constant
//!   indices, which the optimizer promotes to registers.

mod simt;
mod tc;

use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::kernels::{GemmEpilogue, Geometry, HalfCopy, gemm_epilogue};
use crate::pointwise::define_epilogue_of;
use crate::target::Sm;

/// The largest `d` and `dv` the kernels handle.
pub const MAX_HEAD_DIM: u64 = 128;

/// One attention problem set (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionSpec {
    pub batch: u64,
    pub heads: u64,
    pub sq: u64,
    pub sk: u64,
    pub d: u64,
    pub dv: u64,
    /// Strides `[b, h, row, feature]` in elements.
    pub q: [u64; 4],
    pub k: [u64; 4],
    pub v: [u64; 4],
    pub y: [u64; 4],
    /// Strides `[b, h, i, j]` of the additive mask, when one is passed.
    pub mask: Option<[u64; 4]>,
    pub scale: f32,
    /// Every pointer passed is 16-byte aligned (a buffer may start inside a
    /// tensor): without it, no 16-byte loads.
    pub aligned16: bool,
}

/// The arithmetic of the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttnPrecision {
    F32,
    F16,
    Bf16,
}

/// Threads per block of both kernels.
const THREADS: u32 = 128;
const MAX_EXTENT: u64 = 1 << 30;

/// Writes kernel `name` computing `spec` (see the module doc).
pub fn attention(
    m: &mut ModuleText,
    name: &str,
    spec: &AttentionSpec,
    precision: AttnPrecision,
    sm: Sm,
) -> Result<Geometry, String> {
    attention_impl(m, name, spec, precision, sm, [None, None, None], None)
}

/// [`attention`] that also writes a [`HalfCopy`] of y through one more
/// parameter after the others, when `half` asks for it.
pub fn attention_with(
    m: &mut ModuleText,
    name: &str,
    spec: &AttentionSpec,
    precision: AttnPrecision,
    sm: Sm,
    half: Option<HalfCopy>,
) -> Result<Geometry, String> {
    attention_impl(m, name, spec, precision, sm, [None, None, None], half.map(Second::Half))
}

/// [`attention`] followed by a quantization of y: `epi` (a pointwise
/// kernel of y alone, as a GEMM epilogue: operand 0 the f32 value, no
/// other operand, an 8-bit result) stores its byte at each element of y's
/// layout through one more parameter after y; y itself is stored only
/// with `keep_f32` (a later step reads it). One launch instead of the
/// attention and a quantize reading its f32 output again.
pub fn attention_quant(
    m: &mut ModuleText,
    name: &str,
    spec: &AttentionSpec,
    precision: AttnPrecision,
    sm: Sm,
    epi: &GemmEpilogue,
    keep_f32: bool,
) -> Result<Geometry, String> {
    attention_bytes(m, name, spec, precision, sm, [None, None, None], Some((epi, keep_f32)))
}

/// The general form: operand `i` of q, k, v given `Some(dq)` in `inputs`
/// is passed as 8-bit integers (at the f32 operand's element offsets and
/// strides) and dequantized by `dq` (a pointwise kernel of the byte alone
/// giving f32, as a GEMM epilogue without other operands) as the kernel
/// stages it, the value the f32 operand would have held: a quarter of the
/// bytes read. With `quant`, y's quantization as in [`attention_quant`].
pub fn attention_bytes(
    m: &mut ModuleText,
    name: &str,
    spec: &AttentionSpec,
    precision: AttnPrecision,
    sm: Sm,
    inputs: [Option<&GemmEpilogue>; 3],
    quant: Option<(&GemmEpilogue, bool)>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let mut loads: [Option<(String, bool)>; 3] = [None, None, None];
    for (i, dq) in inputs.into_iter().enumerate() {
        let Some(dq) = dq else { continue };
        let signed = gemm_epilogue::check_dequantization(dq, &format!("attention operand {}", ["q", "k", "v"][i]))?;
        let f = format!("{name}_dq{i}");
        define_epilogue_of(m, &f, dq)?;
        loads[i] = Some((f, signed));
    }
    let second = match quant {
        Some((epi, keep_f32)) => {
            gemm_epilogue::check_quantization(epi, "an attention")?;
            let f = format!("{name}_q");
            define_epilogue_of(m, &f, epi)?;
            Some(Second::Quant(f, keep_f32))
        }
        None => None,
    };
    attention_impl(m, name, spec, precision, sm, loads, second)
}

/// A second output of y, through one more parameter after y.
#[derive(Clone)]
enum Second {
    Half(HalfCopy),
    /// Bytes of the quantizing function named, at y's element offsets;
    /// whether y's f32 stores stay.
    Quant(String, bool),
}

impl Second {
    fn keep_f32(&self) -> bool {
        match self {
            Second::Half(h) => h.keep_f32,
            Second::Quant(_, keep) => *keep,
        }
    }
}

fn attention_impl(
    m: &mut ModuleText,
    name: &str,
    spec: &AttentionSpec,
    precision: AttnPrecision,
    sm: Sm,
    loads: [Option<(String, bool)>; 3],
    second: Option<Second>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    check(spec)?;
    let rows = match precision {
        AttnPrecision::F32 => simt::ROWS,
        AttnPrecision::F16 | AttnPrecision::Bf16 => {
            if !sm.has_mma_f16() {
                return Err(format!(
                    "tensor-core attention needs sm_80 or newer (mma.sync m16n8k16), target is {sm}"
                ));
            }
            tc::ROWS
        }
    };
    let s = spec;
    let tiles = s.sq.div_ceil(rows);
    let blocks = s.batch * s.heads * tiles;
    if blocks > i32::MAX as u64 {
        return Err(format!(
            "attention needs {blocks} blocks, more than a grid holds"
        ));
    }
    let params = 4 + usize::from(s.mask.is_some()) + usize::from(second.is_some());
    if blocks == 0 || s.dv == 0 {
        let mut e = Emit::new();
        e.second = second.map(|h| (h, format!("%p{}", params - 1)));
        e.ins("ret void");
        m.func(e.finish(name, params));
        return Ok(Geometry {
            grid: [1, 1, 1],
            block: [THREADS, 1, 1],
            smem: 0,
        });
    }
    let mut e = Emit::new();
    e.second = second.map(|h| (h, format!("%p{}", params - 1)));
    e.loads = loads;
    let smem = match precision {
        AttnPrecision::F32 => simt::emit(m, &mut e, s, tiles),
        AttnPrecision::F16 => tc::emit(m, &mut e, s, tiles, false),
        AttnPrecision::Bf16 => tc::emit(m, &mut e, s, tiles, true),
    };
    e.ins("ret void");
    m.func(e.finish(name, params));
    Ok(Geometry {
        grid: [blocks as u32, 1, 1],
        block: [THREADS, 1, 1],
        smem,
    })
}

/// Rejects specs the kernels cannot index.
fn check(s: &AttentionSpec) -> Result<(), String> {
    if s.d > MAX_HEAD_DIM || s.dv > MAX_HEAD_DIM {
        return Err(format!(
            "attention head dimensions d = {}, dv = {} exceed {MAX_HEAD_DIM}",
            s.d, s.dv
        ));
    }
    if [s.batch, s.heads, s.sq, s.sk]
        .iter()
        .any(|&x| x >= MAX_EXTENT)
    {
        return Err(format!(
            "attention {}x{}x{}x{} is too large for one kernel",
            s.batch, s.heads, s.sq, s.sk
        ));
    }
    let ops = [
        ("q", Some(s.q), [s.batch, s.heads, s.sq, s.d]),
        ("k", Some(s.k), [s.batch, s.heads, s.sk, s.d]),
        ("v", Some(s.v), [s.batch, s.heads, s.sk, s.dv]),
        ("mask", s.mask, [s.batch, s.heads, s.sq, s.sk]),
        ("y", Some(s.y), [s.batch, s.heads, s.sq, s.dv]),
    ];
    for (what, st, ext) in ops {
        let Some(st) = st else { continue };
        let most = (0..4).try_fold(0u64, |acc, i| {
            acc.checked_add(ext[i].saturating_sub(1).checked_mul(st[i])?)
        });
        if most.is_none_or(|x| x > i64::MAX as u64) {
            return Err(format!(
                "attention operand {what}: strides {st:?} overflow a 64-bit offset"
            ));
        }
    }
    Ok(())
}

/// Whether an operand of `rows × feats` with `strides` may be read in
/// 16-byte chunks of 4 features (see the module doc).
fn vec4(st: [u64; 4], ext: [u64; 4]) -> bool {
    let keeps = |i: usize| st[i].is_multiple_of(4) || ext[i] <= 1;
    (st[3] == 1 || ext[3] <= 1) && ext[3].is_multiple_of(4) && keeps(0) && keeps(1) && keeps(2)
}

/// A kernel body being written: SSA text plus the entry block's allocas.
pub(super) struct Emit {
    b: Body,
    allocas: String,
    next_alloca: u32,
    /// Extra function attributes (text after `nvvm.maxntid`).
    attrs: String,
    /// Stores of y also write a half copy or bytes through this parameter.
    second: Option<(Second, String)>,
    /// Per q, k, v: read as bytes (signed or not) and dequantized by the
    /// helper named as they are staged.
    loads: [Option<(String, bool)>; 3],
}

impl Emit {
    fn new() -> Emit {
        Emit {
            b: Body::new(),
            allocas: String::new(),
            next_alloca: 0,
            attrs: String::new(),
            second: None,
            loads: [None, None, None],
        }
    }

    /// Stores f32 `y` at element `off` of y (parameter `yp`), and of the
    /// half copy or the quantized bytes when the kernel writes them.
    fn store_y(&mut self, y: &str, yp: usize, off: &str) {
        if self.second.as_ref().is_none_or(|(h, _)| h.keep_f32()) {
            let p = self.gptr(yp, off);
            self.ins(format!("store float {y}, ptr addrspace(1) {p}, align 4"));
        }
        match self.second.clone() {
            Some((Second::Half(h), hp)) => h.store(&mut self.b, y, &hp, off),
            Some((Second::Quant(f, _), qp)) => {
                let b = self.v(format!("call i8 @{f}(float {y})"));
                let p = self.v(format!("getelementptr inbounds i8, ptr addrspace(1) {qp}, i64 {off}"));
                self.ins(format!("store i8 {b}, ptr addrspace(1) {p}, align 1"));
            }
            None => {}
        }
    }

    fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    /// An entry-block alloca of type `ty` (uninitialized); its name.
    fn alloca(&mut self, ty: &str) -> String {
        let a = format!("%a{}", self.next_alloca);
        self.next_alloca += 1;
        self.allocas
            .push_str(&format!("  {a} = alloca {ty}, align 16\n"));
        a
    }

    /// Element `i` of the alloca `a` of `[n x ty]`.
    fn slot(&mut self, a: &str, n: usize, ty: &str, i: usize) -> String {
        self.v(format!(
            "getelementptr inbounds [{n} x {ty}], ptr {a}, i32 0, i32 {i}"
        ))
    }

    fn ld(&mut self, ty: &str, p: &str) -> String {
        self.v(format!("load {ty}, ptr {p}, align 4"))
    }

    fn st(&mut self, ty: &str, x: &str, p: &str) {
        self.ins(format!("store {ty} {x}, ptr {p}, align 4"));
    }

    /// `for (i = 0; i < n; i++) body(i)` with an i32 counter (`n > 0`).
    fn repeat(&mut self, n: &str, body: impl FnOnce(&mut Self, &str)) {
        let ctr = self.alloca("i32");
        self.st("i32", "0", &ctr);
        let (head, done) = (self.b.label("loop"), self.b.label("done"));
        self.b.br(&head);
        self.b.place(&head);
        let i = self.ld("i32", &ctr);
        body(self, &i);
        let n1 = self.v(format!("add i32 {i}, 1"));
        self.st("i32", &n1, &ctr);
        let more = self.v(format!("icmp ult i32 {n1}, {n}"));
        self.b.cond_br(&more, &head, &done);
        self.b.place(&done);
    }

    /// Runs `body` only where `c` holds.
    fn when(&mut self, c: &str, body: impl FnOnce(&mut Self)) {
        let (t, j) = (self.b.label("then"), self.b.label("join"));
        self.b.cond_br(c, &t, &j);
        self.b.place(&t);
        body(self);
        self.b.br(&j);
        self.b.place(&j);
    }

    /// A pointer `bytes` (i32) into the dynamic shared memory.
    fn smem(&mut self, bytes: &str) -> String {
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {bytes}"
        ))
    }

    fn barrier(&mut self) {
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    }

    fn call2(&mut self, f: &str, a: &str, b: &str) -> String {
        self.v(format!("call float @llvm.{f}.f32(float {a}, float {b})"))
    }

    /// `%p{param} + off` (i64 elements) as a global f32 pointer.
    fn gptr(&mut self, param: usize, off: &str) -> String {
        self.v(format!(
            "getelementptr inbounds float, ptr addrspace(1) %p{param}, i64 {off}"
        ))
    }

    fn finish(self, name: &str, params: usize) -> String {
        // The outputs are last: y, then the half copy or the bytes.
        let inputs = params - 1 - usize::from(self.second.is_some());
        let ps: Vec<String> = (0..params)
            .map(|i| {
                let ro = if i < inputs { " readonly" } else { "" };
                format!("ptr addrspace(1) noalias{ro} %p{i}")
            })
            .collect();
        format!(
            "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{THREADS}\"{} {{\nentry:\n{}{}}}\n",
            ps.join(", "),
            self.attrs,
            self.allocas,
            self.b.into_text()
        )
    }
}

/// Declarations both kernels use.
fn declare_common(m: &mut ModuleText) {
    for d in [
        "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        "declare float @llvm.maxnum.f32(float, float)",
        "declare float @llvm.fma.f32(float, float, float)",
        "declare i32 @llvm.umin.i32(i32, i32)",
    ] {
        m.declare(d);
    }
}

/// The block's problem: `(tid, row0, base offsets)` where `row0` is the
/// first query row (i32) and `bases[k]` is `b·X0 + h·X1` (i64) of operand
/// `k` in parameter order (q, k, v, [mask], y).
struct Block {
    tid: String,
    row0: String,
    bases: Vec<String>,
}

fn block(e: &mut Emit, s: &AttentionSpec, tiles: u64, rows: u64) -> Block {
    let tid = e.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
    let bx = e.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
    let bh = e.v(format!("udiv i32 {bx}, {tiles}"));
    let tile = e.v(format!("urem i32 {bx}, {tiles}"));
    let row0 = e.v(format!("mul i32 {tile}, {rows}"));
    let b = e.v(format!("udiv i32 {bh}, {}", s.heads));
    let h = e.v(format!("urem i32 {bh}, {}", s.heads));
    let b = e.v(format!("zext i32 {b} to i64"));
    let h = e.v(format!("zext i32 {h} to i64"));
    let mut strides = vec![s.q, s.k, s.v];
    strides.extend(s.mask);
    strides.push(s.y);
    // Strides as i64 bit patterns: one past i64 only multiplies an index
    // that is always 0 (`check`).
    let bases = strides
        .iter()
        .map(|st| {
            let x = e.v(format!("mul i64 {b}, {}", st[0] as i64));
            let y = e.v(format!("mul i64 {h}, {}", st[1] as i64));
            e.v(format!("add i64 {x}, {y}"))
        })
        .collect();
    Block { tid, row0, bases }
}

/// The offset of `(row, feat)` (i32 values) past `base` for strides `st`,
/// or `base` where `ok` is false (so that the load stays inside).
fn offset(e: &mut Emit, base: &str, st: [u64; 4], row: &str, feat: &str, ok: &str) -> String {
    let r = e.v(format!("zext i32 {row} to i64"));
    let f = e.v(format!("zext i32 {feat} to i64"));
    let r = e.v(format!("mul i64 {r}, {}", st[2] as i64));
    let f = e.v(format!("mul i64 {f}, {}", st[3] as i64));
    let o = e.v(format!("add i64 {r}, {f}"));
    let o = e.v(format!("add i64 {o}, {base}"));
    e.v(format!("select i1 {ok}, i64 {o}, i64 {base}"))
}

/// The mask element for query `row` and key `key` (i32), 0 where either
/// is past its extent; `None` without a mask. The mask is parameter 3.
fn mask_value(
    e: &mut Emit,
    s: &AttentionSpec,
    base: Option<&String>,
    row: &str,
    key: &str,
) -> Option<String> {
    let (st, base) = (s.mask?, base?);
    let rok = e.v(format!("icmp ult i32 {row}, {}", s.sq));
    let kok = e.v(format!("icmp ult i32 {key}, {}", s.sk));
    let ok = e.v(format!("and i1 {rok}, {kok}"));
    let o = offset(e, base, st, row, key, &ok);
    let p = e.gptr(3, &o);
    let x = e.v(format!("load float, ptr addrspace(1) {p}, align 4"));
    Some(e.v(format!("select i1 {ok}, float {x}, float 0.0")))
}

/// One operand tile to stage: `rows` rows from query/key row `row0` (i32)
/// of an operand with `nrows` rows and `nfeat` features, features
/// `0..cols` (`cols ≥ nfeat` pads with zeros), read in 16-byte chunks when
/// `vec`.
struct Tile<'a> {
    param: usize,
    base: &'a str,
    st: [u64; 4],
    vec: bool,
    rows: u64,
    cols: u64,
    row0: &'a str,
    nrows: u64,
    nfeat: u64,
}

/// Loads this thread's chunks of tile `t` (chunk `tid + 128·k`, row-major
/// over `rows × cols / w` chunks of `w` = 4 or 1 features) and hands each
/// to `put(e, r, f0, values)` (tile row and first feature as i32, `w`
/// floats, 0 outside the operand).
fn stage(e: &mut Emit, tid: &str, t: &Tile, mut put: impl FnMut(&mut Emit, &str, &str, &[String])) {
    let w = if t.vec { 4 } else { 1 };
    let per_row = t.cols / w;
    let total = t.rows * per_row;
    let th = THREADS as u64;
    for k in 0..total.div_ceil(th) {
        let idx = e.v(format!("add i32 {tid}, {}", k * th));
        let mut chunk = |e: &mut Emit| {
            let r = e.v(format!("udiv i32 {idx}, {per_row}"));
            let c = e.v(format!("urem i32 {idx}, {per_row}"));
            let f0 = e.v(format!("mul i32 {c}, {w}"));
            let row = e.v(format!("add i32 {}, {r}", t.row0));
            let mut ok = e.v(format!("icmp ult i32 {row}, {}", t.nrows));
            if t.cols > t.nfeat {
                let fok = e.v(format!("icmp ult i32 {f0}, {}", t.nfeat));
                ok = e.v(format!("and i1 {ok}, {fok}"));
            }
            let o = offset(e, t.base, t.st, &row, &f0, &ok);
            let vals: Vec<String> = match e.loads.get(t.param).cloned().flatten() {
                // Bytes at the f32 operand's element offsets, dequantized.
                Some((f, signed)) => {
                    let p = e.v(format!("getelementptr inbounds i8, ptr addrspace(1) %p{}, i64 {o}", t.param));
                    let raw: Vec<String> = if t.vec {
                        let x = e.v(format!("load <4 x i8>, ptr addrspace(1) {p}, align 4"));
                        (0..4).map(|i| e.v(format!("extractelement <4 x i8> {x}, i32 {i}"))).collect()
                    } else {
                        vec![e.v(format!("load i8, ptr addrspace(1) {p}, align 1"))]
                    };
                    let conv = if signed { "sitofp" } else { "uitofp" };
                    raw.iter()
                        .map(|b| {
                            let x = e.v(format!("{conv} i8 {b} to float"));
                            let x = e.v(format!("call float @{f}(float {x})"));
                            e.v(format!("select i1 {ok}, float {x}, float 0.0"))
                        })
                        .collect()
                }
                None if t.vec => {
                    let p = e.gptr(t.param, &o);
                    let x = e.v(format!("load <4 x float>, ptr addrspace(1) {p}, align 16"));
                    let x = e.v(format!(
                        "select i1 {ok}, <4 x float> {x}, <4 x float> zeroinitializer"
                    ));
                    (0..4)
                        .map(|i| e.v(format!("extractelement <4 x float> {x}, i32 {i}")))
                        .collect()
                }
                None => {
                    let p = e.gptr(t.param, &o);
                    let x = e.v(format!("load float, ptr addrspace(1) {p}, align 4"));
                    vec![e.v(format!("select i1 {ok}, float {x}, float 0.0"))]
                }
            };
            put(e, &r, &f0, &vals);
        };
        if (k + 1) * th > total {
            let c = e.v(format!("icmp ult i32 {idx}, {total}"));
            e.when(&c, |e| chunk(e));
        } else {
            chunk(e);
        }
    }
}
