//! Expression and element emission for GPU pointwise kernels: the loads
//! that convert an operand's element type to f32, the stores that convert
//! f32 to the output type, and the expressions of one element. The kernel
//! skeleton is in the parent module.
//!
//! The conversions and the NaN rules match the x86 backend
//! (`aoc-backend-x86`'s `pointwise/emit.rs`): integers truncate toward zero
//! and saturate on store (NaN becomes 0), bf16 rounds to nearest even and
//! keeps NaN quiet, bool stores `x != 0` (NaN is true); `max`/`min` let NaN
//! from either side win and return the first argument on ties; `relu`
//! passes NaN and -0.0 through.

use aoc_ir::types::Scalar;

use super::Gen;
use super::math::{self, MathFn};
use super::requant;
use crate::expr::{Binary, Compute, Expr, Unary};
use crate::irtext::f32_lit;

/// An element type a kernel can load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Elem {
    F32,
    F64,
    F16,
    Bf16,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    /// fp8 e4m3 (OCP E4M3FN) bytes: loads convert exactly, stores round
    /// to nearest even and saturate (`cvt` with `.satfinite`; NaN stays
    /// NaN), which needs sm_89 (the lowering makes such kernels only for
    /// those targets).
    E4M3,
}

impl Elem {
    pub(super) fn of(s: Scalar) -> Result<Elem, String> {
        Ok(match s {
            Scalar::F32 => Elem::F32,
            Scalar::F64 => Elem::F64,
            Scalar::F16 => Elem::F16,
            Scalar::BF16 => Elem::Bf16,
            Scalar::I8 => Elem::I8,
            Scalar::U8 => Elem::U8,
            Scalar::I16 => Elem::I16,
            Scalar::U16 => Elem::U16,
            Scalar::I32 => Elem::I32,
            Scalar::U32 => Elem::U32,
            Scalar::I64 => Elem::I64,
            Scalar::U64 => Elem::U64,
            Scalar::I1 => Elem::Bool,
            Scalar::F8E4M3FN => Elem::E4M3,
            Scalar::F8E5M2 => {
                return Err(format!(
                    "element type {} is not supported by generated gpu kernels",
                    s.name()
                ));
            }
        })
    }

    /// The LLVM type of one element in memory.
    pub(super) fn ll(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::F64 => "double",
            Elem::F16 => "half",
            Elem::Bf16 | Elem::I16 | Elem::U16 => "i16",
            Elem::I8 | Elem::U8 | Elem::Bool | Elem::E4M3 => "i8",
            Elem::I32 | Elem::U32 => "i32",
            Elem::I64 | Elem::U64 => "i64",
        }
    }

    pub(super) fn size(self) -> u64 {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool | Elem::E4M3 => 1,
            Elem::F16 | Elem::Bf16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }
}

impl Gen<'_> {
    fn declare(&mut self, line: &str) {
        self.m.declare(line);
    }

    /// Loads one element at `p` (a `ptr addrspace(1)`) as f32, or as i64
    /// in an integer kernel.
    pub(super) fn load(&mut self, e: Elem, p: &str) -> String {
        if self.k.compute == Compute::I64 {
            return self.load_int(e, p);
        }
        let ty = e.ll();
        let x = self.b.v(format!(
            "load {ty}, ptr addrspace(1) {p}, align {}",
            e.size()
        ));
        self.raw_to_f32(e, &x)
    }

    /// A loaded element `x` (of LLVM type `e.ll()`) as f32, as [`Gen::load`]
    /// converts it (the f32 compute kinds).
    pub(super) fn raw_to_f32(&mut self, e: Elem, x: &str) -> String {
        let (ty, x) = (e.ll(), x.to_string());
        match e {
            Elem::F32 => x,
            Elem::F64 => self.b.v(format!("fptrunc double {x} to float")),
            Elem::F16 => self.b.v(format!("fpext half {x} to float")),
            Elem::Bf16 => {
                // bf16 is the top half of an f32.
                let w = self.b.v(format!("zext i16 {x} to i32"));
                let w = self.b.v(format!("shl i32 {w}, 16"));
                self.b.v(format!("bitcast i32 {w} to float"))
            }
            Elem::I8 | Elem::I16 | Elem::I32 | Elem::I64 => {
                self.b.v(format!("sitofp {ty} {x} to float"))
            }
            Elem::U8 | Elem::U16 | Elem::U32 | Elem::U64 => {
                self.b.v(format!("uitofp {ty} {x} to float"))
            }
            Elem::Bool => {
                let nz = self.b.v(format!("icmp ne i8 {x}, 0"));
                self.b.v(format!("select i1 {nz}, float 1.0, float 0.0"))
            }
            Elem::E4M3 => crate::irtext::e4m3_to_f32(&mut self.b, &x),
        }
    }

    /// Stores `v`, a value of `e`'s LLVM type ([`Gen::stored`]), at `p`.
    pub(super) fn store(&mut self, e: Elem, v: &str, p: &str) {
        self.b.ins(format!(
            "store {} {v}, ptr addrspace(1) {p}, align {}",
            e.ll(),
            e.size()
        ));
    }

    /// One element's result as the output type stores it: the live
    /// expressions then the store's conversion, or, for a quantize over an
    /// affine sum of the loads ([`requant::fold`]), that sum as `fma`s,
    /// one rounding conversion and an integer clamp.
    pub(super) fn stored(&mut self, vals: &[Option<String>]) -> String {
        if self.k.compute == Compute::F32
            && let Some(t) = requant::fold(self.k, self.out)
        {
            let i = self.folded(&t, vals);
            return self.b.v(format!("trunc i32 {i} to {}", self.out.ll()));
        }
        let y = self.exprs(vals);
        self.convert(self.out, &y)
    }

    /// The folded quantize `t` (module `requant`) as an i32.
    fn folded(&mut self, t: &requant::QuantTail, vals: &[Option<String>]) -> String {
        self.declare("declare float @llvm.fma.f32(float, float, float)");
        self.declare("declare i32 @llvm.smax.i32(i32, i32)");
        self.declare("declare i32 @llvm.smin.i32(i32, i32)");
        let mut acc = f32_lit(t.sum.constant as f32);
        for &(op, c) in &t.sum.terms {
            let x = vals[op].clone().expect("the loads of live expressions are loaded");
            acc = self.b.v(format!("call float @llvm.fma.f32(float {x}, float {}, float {acc})", f32_lit(c as f32)));
        }
        let i = crate::irtext::f32_to_i32_sat(&mut self.b, &acc, true);
        let i = self.b.v(format!("call i32 @llvm.smax.i32(i32 {i}, i32 {})", t.lo));
        let i = self.b.v(format!("call i32 @llvm.smin.i32(i32 {i}, i32 {})", t.hi));
        if !t.zero_outside {
            return i;
        }
        // NaN stores (and reloads as) 0 even outside the clamp.
        let nan = self.b.v(format!("fcmp uno float {acc}, 0.0"));
        self.b.v(format!("select i1 {nan}, i32 0, i32 {i}"))
    }

    /// f32 `x` (i64 in an integer kernel) as a value of `e`'s LLVM type,
    /// converted as a store does.
    pub(super) fn convert(&mut self, e: Elem, x: &str) -> String {
        if self.k.compute == Compute::I64 {
            return self.convert_int(e, x);
        }
        match e {
            Elem::F32 => x.to_string(),
            Elem::F64 => self.b.v(format!("fpext float {x} to double")),
            Elem::F16 => self.b.v(format!("fptrunc float {x} to half")),
            Elem::Bf16 => crate::irtext::bf16_bits(&mut self.b, x),
            Elem::I8 => self.narrow(x, "i8", -128, 127),
            Elem::U8 => self.narrow(x, "i8", 0, 255),
            Elem::I16 => self.narrow(x, "i16", -32768, 32767),
            Elem::U16 => self.narrow(x, "i16", 0, 65535),
            Elem::I32 => crate::irtext::f32_to_i32_sat(&mut self.b, x, false),
            Elem::U32 | Elem::I64 | Elem::U64 => {
                let (op, ty) = match e {
                    Elem::U32 => ("fptoui", "i32"),
                    Elem::I64 => ("fptosi", "i64"),
                    _ => ("fptoui", "i64"),
                };
                let f = format!("@llvm.{op}.sat.{ty}.f32");
                self.declare(&format!("declare {ty} {f}(float)"));
                self.b.v(format!("call {ty} {f}(float {x})"))
            }
            Elem::E4M3 => crate::irtext::f32_to_e4m3(&mut self.b, x),
            Elem::Bool => {
                // NaN is true, as C and numpy convert it.
                let nz = self.b.v(format!("fcmp une float {x}, 0.0"));
                self.b.v(format!("zext i1 {nz} to i8"))
            }
        }
    }

    /// An integer kernel's load: i64, signed integers sign-extended,
    /// unsigned ones and bool zero-extended. (Floats never reach an integer
    /// kernel, `live_exprs` checks; they would truncate.)
    fn load_int(&mut self, e: Elem, p: &str) -> String {
        let ty = e.ll();
        let x = self.b.v(format!("load {ty}, ptr addrspace(1) {p}, align {}", e.size()));
        match e {
            Elem::I8 | Elem::I16 | Elem::I32 => self.b.v(format!("sext {ty} {x} to i64")),
            Elem::U8 | Elem::U16 | Elem::U32 => self.b.v(format!("zext {ty} {x} to i64")),
            Elem::I64 | Elem::U64 => x,
            Elem::Bool => {
                let nz = self.b.v(format!("icmp ne i8 {x}, 0"));
                self.b.v(format!("zext i1 {nz} to i64"))
            }
            Elem::F32 | Elem::F64 | Elem::F16 | Elem::Bf16 | Elem::E4M3 => {
                let f = match e {
                    Elem::F32 => x,
                    Elem::F64 => self.b.v(format!("fptrunc double {x} to float")),
                    Elem::F16 => self.b.v(format!("fpext half {x} to float")),
                    Elem::E4M3 => crate::irtext::e4m3_to_f32(&mut self.b, &x),
                    _ => {
                        let w = self.b.v(format!("zext i16 {x} to i32"));
                        let w = self.b.v(format!("shl i32 {w}, 16"));
                        self.b.v(format!("bitcast i32 {w} to float"))
                    }
                };
                self.declare("declare i64 @llvm.fptosi.sat.i64.f32(float)");
                self.b.v(format!("call i64 @llvm.fptosi.sat.i64.f32(float {f})"))
            }
        }
    }

    /// An integer kernel's store conversion of i64 `x`: integers keep their
    /// low bits, bool is `x != 0`.
    fn convert_int(&mut self, e: Elem, x: &str) -> String {
        match e {
            Elem::I8 | Elem::U8 | Elem::I16 | Elem::U16 | Elem::I32 | Elem::U32 => {
                self.b.v(format!("trunc i64 {x} to {}", e.ll()))
            }
            Elem::I64 | Elem::U64 => x.to_string(),
            Elem::Bool => {
                let nz = self.b.v(format!("icmp ne i64 {x}, 0"));
                self.b.v(format!("zext i1 {nz} to i8"))
            }
            Elem::F32 | Elem::F64 | Elem::F16 | Elem::Bf16 | Elem::E4M3 => {
                let f = self.b.v(format!("sitofp i64 {x} to float"));
                match e {
                    Elem::F32 => f,
                    Elem::F64 => self.b.v(format!("fpext float {f} to double")),
                    Elem::F16 => self.b.v(format!("fptrunc float {f} to half")),
                    Elem::E4M3 => crate::irtext::f32_to_e4m3(&mut self.b, &f),
                    _ => crate::irtext::bf16_bits(&mut self.b, &f),
                }
            }
        }
    }

    /// The live expressions of an integer kernel for one element; `vals[i]`
    /// is operand `i`'s value (i64).
    fn exprs_int(&mut self, vals: &[Option<String>]) -> String {
        let k = self.k;
        let mut v: Vec<Option<String>> = vec![None; k.exprs.len()];
        for (i, e) in k.exprs.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            let get = |j: usize| v[j].clone().expect("live arguments are emitted before their users");
            let r = match *e {
                Expr::Load(op) => vals[op].clone().expect("used operands are loaded"),
                Expr::Int(c) => c.to_string(),
                // `live_exprs` refuses float constants in integer kernels.
                Expr::Const(c) => (c as i64).to_string(),
                Expr::Unary(op, a) => {
                    let a = get(a);
                    let n = self.b.v(format!("sub i64 0, {a}"));
                    match op {
                        Unary::Abs => {
                            let neg = self.b.v(format!("icmp slt i64 {a}, 0"));
                            self.b.v(format!("select i1 {neg}, i64 {n}, i64 {a}"))
                        }
                        _ => n,
                    }
                }
                Expr::Binary(op, a, b) => {
                    let (a, b) = (get(a), get(b));
                    self.binary_int(op, &a, &b)
                }
                Expr::Select(c, a, b) => {
                    let (c, a, b) = (get(c), get(a), get(b));
                    let m = self.b.v(format!("icmp ne i64 {c}, 0"));
                    self.b.v(format!("select i1 {m}, i64 {a}, i64 {b}"))
                }
            };
            v[i] = Some(r);
        }
        v[k.result].clone().expect("the result is live")
    }

    fn binary_int(&mut self, op: Binary, a: &str, b: &str) -> String {
        let arith = |g: &mut Self, ins: &str| g.b.v(format!("{ins} i64 {a}, {b}"));
        let cmp = |g: &mut Self, cc: &str| {
            let m = g.b.v(format!("icmp {cc} i64 {a}, {b}"));
            g.b.v(format!("zext i1 {m} to i64"))
        };
        let pick = |g: &mut Self, cc: &str| {
            let m = g.b.v(format!("icmp {cc} i64 {a}, {b}"));
            g.b.v(format!("select i1 {m}, i64 {a}, i64 {b}"))
        };
        match op {
            Binary::Add => arith(self, "add"),
            Binary::Sub => arith(self, "sub"),
            Binary::Mul => arith(self, "mul"),
            Binary::Div => {
                // `sdiv` is undefined on 0 and on MIN / -1: divide by 1
                // there, then give 0 and the wrapped negation (as on the CPU).
                let by_zero = self.b.v(format!("icmp eq i64 {b}, 0"));
                let by_minus = self.b.v(format!("icmp eq i64 {b}, -1"));
                let special = self.b.v(format!("or i1 {by_zero}, {by_minus}"));
                let d = self.b.v(format!("select i1 {special}, i64 1, i64 {b}"));
                let q = self.b.v(format!("sdiv i64 {a}, {d}"));
                let neg = self.b.v(format!("sub i64 0, {a}"));
                let q = self.b.v(format!("select i1 {by_minus}, i64 {neg}, i64 {q}"));
                self.b.v(format!("select i1 {by_zero}, i64 0, i64 {q}"))
            }
            Binary::Max => pick(self, "sge"),
            Binary::Min => pick(self, "sle"),
            Binary::Equal => cmp(self, "eq"),
            Binary::Less => cmp(self, "slt"),
            Binary::Greater => cmp(self, "sgt"),
            // Refused by `live_exprs` in integer kernels.
            Binary::Pow => a.to_string(),
        }
    }

    /// Truncates `x` to an integer clamped to `lo..=hi`, as type `ty`.
    fn narrow(&mut self, x: &str, ty: &str, lo: i32, hi: i32) -> String {
        self.declare("declare i32 @llvm.smax.i32(i32, i32)");
        self.declare("declare i32 @llvm.smin.i32(i32, i32)");
        let t = crate::irtext::f32_to_i32_sat(&mut self.b, x, false);
        let t = self
            .b
            .v(format!("call i32 @llvm.smax.i32(i32 {t}, i32 {lo})"));
        let t = self
            .b
            .v(format!("call i32 @llvm.smin.i32(i32 {t}, i32 {hi})"));
        self.b.v(format!("trunc i32 {t} to {ty}"))
    }

    /// Emits the live expressions for one element; `vals[i]` is operand
    /// `i`'s value (f32). Returns the result's value.
    pub(super) fn exprs(&mut self, vals: &[Option<String>]) -> String {
        if self.k.compute == Compute::I64 {
            return self.exprs_int(vals);
        }
        let k = self.k;
        let mut v: Vec<Option<String>> = vec![None; k.exprs.len()];
        for (i, e) in k.exprs.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            let get = |j: usize| {
                v[j].clone()
                    .expect("live arguments are emitted before their users")
            };
            // A merged chain's reload of a quantized intermediate, folded
            // (its quantize's own expressions are then dead code).
            if let Some(t) = requant::reload(k, i) {
                let q = self.folded(&t, vals);
                v[i] = Some(self.b.v(format!("sitofp i32 {q} to float")));
                continue;
            }
            let r = match *e {
                Expr::Load(op) => vals[op].clone().expect("used operands are loaded"),
                Expr::Const(c) => f32_lit(c),
                Expr::Int(c) => f32_lit(c as f32),
                Expr::Unary(op, a) => {
                    let a = get(a);
                    self.unary(op, &a)
                }
                Expr::Binary(op, a, b) => {
                    let (a, b) = (get(a), get(b));
                    self.binary(op, &a, &b)
                }
                Expr::Select(c, a, b) => {
                    let (c, a, b) = (get(c), get(a), get(b));
                    let m = self.b.v(format!("fcmp une float {c}, 0.0"));
                    self.b.v(format!("select i1 {m}, float {a}, float {b}"))
                }
            };
            v[i] = Some(r);
        }
        v[k.result].clone().expect("the result is live")
    }

    /// `call float @llvm.NAME.f32(float x)`, declaring it.
    fn intrinsic(&mut self, name: &str, x: &str) -> String {
        self.declare(&format!("declare float @llvm.{name}.f32(float)"));
        self.b.v(format!("call float @llvm.{name}.f32(float {x})"))
    }

    fn math(&mut self, f: MathFn, args: &[&str]) -> String {
        math::define(self.m, f);
        let args: Vec<String> = args.iter().map(|a| format!("float {a}")).collect();
        self.b
            .v(format!("call float {}({})", f.symbol(), args.join(", ")))
    }

    fn unary(&mut self, op: Unary, x: &str) -> String {
        match op {
            Unary::Neg => self.b.v(format!("fneg float {x}")),
            Unary::Abs => self.intrinsic("fabs", x),
            Unary::Sqrt => self.intrinsic("sqrt", x),
            Unary::Rsqrt => {
                let s = self.intrinsic("sqrt", x);
                self.b.v(format!("fdiv float 1.0, {s}"))
            }
            Unary::Reciprocal => self.b.v(format!("fdiv float 1.0, {x}")),
            Unary::Exp => self.math(MathFn::Exp, &[x]),
            Unary::Log => self.math(MathFn::Log, &[x]),
            Unary::Tanh => self.math(MathFn::Tanh, &[x]),
            Unary::Erf => self.math(MathFn::Erf, &[x]),
            Unary::Sin => self.math(MathFn::Sin, &[x]),
            Unary::Cos => self.math(MathFn::Cos, &[x]),
            Unary::Sigmoid => {
                // 1/(1 + e^-x) for x >= 0 and e^x/(1 + e^x) below, so that
                // e^-|x| never overflows and tiny results keep their
                // subnormal value instead of becoming 0. NaN takes the
                // second form and stays NaN.
                let ax = self.intrinsic("fabs", x);
                let nax = self.b.v(format!("fneg float {ax}"));
                let e = self.math(MathFn::Exp, &[&nax]);
                let d = self.b.v(format!("fadd float 1.0, {e}"));
                let pos = self.b.v(format!("fcmp oge float {x}, 0.0"));
                let num = self.b.v(format!("select i1 {pos}, float 1.0, float {e}"));
                self.b.v(format!("fdiv float {num}, {d}"))
            }
            Unary::Floor => self.intrinsic("floor", x),
            Unary::Ceil => self.intrinsic("ceil", x),
            Unary::Trunc => self.intrinsic("trunc", x),
            Unary::RoundEven => self.intrinsic("roundeven", x),
            Unary::Relu => {
                // NaN and -0.0 pass through, as max(x, 0) in the reference.
                let neg = self.b.v(format!("fcmp olt float {x}, 0.0"));
                self.b.v(format!("select i1 {neg}, float 0.0, float {x}"))
            }
        }
    }

    fn binary(&mut self, op: Binary, a: &str, b: &str) -> String {
        let arith = |g: &mut Self, ins: &str| g.b.v(format!("{ins} float {a}, {b}"));
        match op {
            Binary::Add => arith(self, "fadd"),
            Binary::Sub => arith(self, "fsub"),
            Binary::Mul => arith(self, "fmul"),
            Binary::Div => arith(self, "fdiv"),
            Binary::Max | Binary::Min => {
                // numpy's maximum/minimum: NaN from either side wins, a tie
                // returns `a`. (An ordered compare is false when `b` is NaN,
                // which then wins through the first select.)
                let cc = if op == Binary::Max { "oge" } else { "ole" };
                let keep_a = self.b.v(format!("fcmp {cc} float {a}, {b}"));
                let t = self
                    .b
                    .v(format!("select i1 {keep_a}, float {a}, float {b}"));
                let a_nan = self.b.v(format!("fcmp uno float {a}, 0.0"));
                self.b.v(format!("select i1 {a_nan}, float {a}, float {t}"))
            }
            Binary::Pow => self.math(MathFn::Pow, &[a, b]),
            Binary::Equal | Binary::Less | Binary::Greater => {
                let cc = match op {
                    Binary::Equal => "oeq",
                    Binary::Less => "olt",
                    _ => "ogt",
                };
                let m = self.b.v(format!("fcmp {cc} float {a}, {b}"));
                self.b.v(format!("select i1 {m}, float 1.0, float 0.0"))
            }
        }
    }
}
