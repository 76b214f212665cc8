//! Expression and element emission for pointwise kernels: one routine emits
//! the kernel's expressions for either a scalar (`f32`) or a vector
//! (`f32x4`) lane type, plus the loads and stores that convert between an
//! operand's element type and f32. The loop skeleton is in the parent module.

use aoc_ir::types::Scalar;
use cranelift::codegen::ir::Endianness;
use cranelift::prelude::*;
use types::{F32, F64, I8, I16, I32, I64};

use super::{Gen, MathFn, mem};
use crate::expr::{Binary, Expr, Unary};

/// An element type a kernel can load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Elem {
    F32,
    F64,
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
    /// fp8 e4m3 (`f8E4M3FN`): one byte, converted exactly on load and
    /// rounded to nearest even, saturating, on store.
    E4m3,
}

impl Elem {
    pub(super) fn of(s: Scalar) -> Result<Elem, String> {
        Ok(match s {
            Scalar::F32 => Elem::F32,
            Scalar::F64 => Elem::F64,
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
            Scalar::F8E4M3FN => Elem::E4m3,
            Scalar::F16 | Scalar::F8E5M2 => {
                return Err(format!(
                    "element type {} is not supported by generated kernels",
                    s.name()
                ));
            }
        })
    }

    pub(super) fn size(self) -> i64 {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool | Elem::E4m3 => 1,
            Elem::Bf16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }
}

/// The Cranelift integer type of an integer element in memory.
fn int_type(e: Elem) -> Type {
    match e {
        Elem::I8 | Elem::U8 | Elem::Bool | Elem::E4m3 => I8,
        Elem::I16 | Elem::U16 | Elem::Bf16 => I16,
        Elem::I32 | Elem::U32 | Elem::F32 => I32,
        Elem::I64 | Elem::U64 | Elem::F64 => I64,
    }
}

impl Gen<'_, '_> {
    /// Loads one element at `p` as f32.
    pub(super) fn load(&mut self, e: Elem, p: Value) -> Value {
        let ins = |g: &mut Self, ty| g.b.ins().load(ty, mem(), p, 0);
        match e {
            Elem::F32 => ins(self, F32),
            Elem::F64 => {
                let x = ins(self, F64);
                self.b.ins().fdemote(F32, x)
            }
            Elem::Bf16 => {
                // bf16 is the top half of an f32.
                let h = ins(self, I16);
                let w = self.b.ins().uextend(I32, h);
                let w = self.b.ins().ishl_imm_u(w, 16);
                self.b.ins().bitcast(F32, MemFlagsData::new(), w)
            }
            Elem::I8 | Elem::I16 => {
                let x = ins(self, if e == Elem::I8 { I8 } else { I16 });
                let x = self.b.ins().sextend(I32, x);
                self.b.ins().fcvt_from_sint(F32, x)
            }
            Elem::U8 | Elem::U16 => {
                let x = ins(self, if e == Elem::U8 { I8 } else { I16 });
                let x = self.b.ins().uextend(I32, x);
                self.b.ins().fcvt_from_sint(F32, x)
            }
            Elem::I32 => {
                let x = ins(self, I32);
                self.b.ins().fcvt_from_sint(F32, x)
            }
            Elem::U32 => {
                let x = ins(self, I32);
                let x = self.b.ins().uextend(I64, x);
                self.b.ins().fcvt_from_sint(F32, x)
            }
            Elem::I64 => {
                let x = ins(self, I64);
                self.b.ins().fcvt_from_sint(F32, x)
            }
            Elem::U64 => {
                let x = ins(self, I64);
                self.b.ins().fcvt_from_uint(F32, x)
            }
            Elem::Bool => {
                let x = ins(self, I8);
                let nz = self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0);
                let one = self.b.ins().f32const(1.0);
                let zero = self.b.ins().f32const(0.0);
                self.b.ins().select(nz, one, zero)
            }
            Elem::E4m3 => {
                let x = ins(self, I8);
                self.e4m3_to_f32(x)
            }
        }
    }

    /// The value of e4m3 byte `x` (i8) as f32, exactly: sign, 4 exponent
    /// bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (`m ·
    /// 2^-9`); `S.1111.111` is NaN (there are no infinities).
    fn e4m3_to_f32(&mut self, x: Value) -> Value {
        let w = self.b.ins().uextend(I32, x);
        let sign = self.b.ins().band_imm_u(w, 0x80);
        let sign = self.b.ins().ishl_imm_u(sign, 24);
        let mag = self.b.ins().band_imm_u(w, 0x7f);
        // A normal value: exponent + 120 (the bias 127 − 7), mantissa in
        // the top 3 of f32's 23 bits.
        let normal = self.b.ins().iadd_imm_s(mag, 120 << 3);
        let normal = self.b.ins().ishl_imm_u(normal, 20);
        let normal = self.b.ins().bitcast(F32, MemFlagsData::new(), normal);
        // A subnormal one: m · 2^-9 (exact).
        let m = self.b.ins().band_imm_u(w, 7);
        let sub = self.b.ins().fcvt_from_sint(F32, m);
        let step = self.b.ins().f32const(2f32.powi(-9));
        let sub = self.b.ins().fmul(sub, step);
        let e = self.b.ins().ushr_imm_u(mag, 3);
        let is_sub = self.b.ins().icmp_imm_u(IntCC::Equal, e, 0);
        let v = self.b.ins().select(is_sub, sub, normal);
        let nan = self.b.ins().f32const(f32::NAN);
        let is_nan = self.b.ins().icmp_imm_u(IntCC::Equal, mag, 0x7f);
        let v = self.b.ins().select(is_nan, nan, v);
        let bits = self.b.ins().bitcast(I32, MemFlagsData::new(), v);
        let bits = self.b.ins().bor(bits, sign);
        self.b.ins().bitcast(F32, MemFlagsData::new(), bits)
    }

    /// f32 `x` as the nearest e4m3 byte (ties to even), saturating to
    /// ±448 (infinities too); NaN is `0x7f`. As `aoc_ir`'s `round_f8`
    /// with `saturate` and `f64_to_f8`, and as `cvt.rn.satfinite`.
    fn f32_to_e4m3(&mut self, x: Value) -> Value {
        let bits = self.b.ins().bitcast(I32, MemFlagsData::new(), x);
        let sign = self.b.ins().ushr_imm_u(bits, 24);
        let sign = self.b.ins().band_imm_u(sign, 0x80);
        let a = self.b.ins().band_imm_u(bits, 0x7fff_ffff);
        // Normal in e4m3 (|x| ≥ 2^-6, f32 exponent field ≥ 121): round
        // the mantissa to 3 bits on the bits (a carry moves into the
        // exponent, as it should), then rebias the exponent (− 120).
        let lsb = self.b.ins().ushr_imm_u(a, 20);
        let lsb = self.b.ins().band_imm_u(lsb, 1);
        let r = self.b.ins().iadd_imm_s(a, 0x7ffff);
        let r = self.b.ins().iadd(r, lsb);
        let r = self.b.ins().ushr_imm_u(r, 20);
        let normal = self.b.ins().iadd_imm_s(r, -(120 << 3));
        // Past 448 (code 0x7e), infinities included: saturate.
        let over = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, normal, 0x7e);
        let max = self.b.ins().iconst(I32, 0x7e);
        let normal = self.b.ins().select(over, max, normal);
        // Subnormal (and zero): round(|x| · 2^9) steps of 2^-9, 0 … 8 (8 is
        // the smallest normal, code 0x08).
        let ax = self.b.ins().bitcast(F32, MemFlagsData::new(), a);
        let scale = self.b.ins().f32const(512.0);
        let q = self.b.ins().fmul(ax, scale);
        let q = self.round(F32, Unary::RoundEven, q);
        let sub = self.b.ins().fcvt_to_sint_sat(I32, q);
        let is_normal = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, a, 121 << 23);
        let code = self.b.ins().select(is_normal, normal, sub);
        let code = self.b.ins().bor(code, sign);
        let is_nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, a, 0x7f80_0000);
        let nan = self.b.ins().iconst(I32, 0x7f);
        let code = self.b.ins().select(is_nan, nan, code);
        self.b.ins().ireduce(I8, code)
    }

    /// Stores f32 `x` at `p` as `e`: floats round to nearest, integers
    /// truncate toward zero and saturate, bool is `x != 0`.
    pub(super) fn store(&mut self, e: Elem, x: Value, p: Value) {
        let v = match e {
            Elem::F32 => x,
            Elem::F64 => self.b.ins().fpromote(F64, x),
            Elem::Bf16 => {
                // Round to nearest even on the bits; NaN stays a (quiet) NaN.
                let bits = self.b.ins().bitcast(I32, MemFlagsData::new(), x);
                let hi = self.b.ins().ushr_imm_u(bits, 16);
                let lsb = self.b.ins().band_imm_u(hi, 1);
                let bias = self.b.ins().iadd_imm_s(lsb, 0x7fff);
                let rounded = self.b.ins().iadd(bits, bias);
                let rounded = self.b.ins().ushr_imm_u(rounded, 16);
                let quiet = self.b.ins().bor_imm_u(hi, 0x40);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                let h = self.b.ins().select(nan, quiet, rounded);
                self.b.ins().ireduce(I16, h)
            }
            Elem::I8 => self.narrow(x, I8, -128, 127),
            Elem::U8 => self.narrow(x, I8, 0, 255),
            Elem::I16 => self.narrow(x, I16, -32768, 32767),
            Elem::U16 => self.narrow(x, I16, 0, 65535),
            Elem::I32 => self.b.ins().fcvt_to_sint_sat(I32, x),
            Elem::U32 => self.b.ins().fcvt_to_uint_sat(I32, x),
            Elem::I64 => self.b.ins().fcvt_to_sint_sat(I64, x),
            Elem::U64 => self.b.ins().fcvt_to_uint_sat(I64, x),
            Elem::Bool => {
                let zero = self.b.ins().f32const(0.0);
                // NaN is true, as C and numpy convert it.
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            Elem::E4m3 => self.f32_to_e4m3(x),
        };
        self.b.ins().store(mem(), v, p, 0);
    }

    /// Loads one element at `p` as i64 (an integer kernel's value): signed
    /// integers sign-extend, unsigned ones and bool zero-extend. (Floats
    /// never reach an integer kernel, `live_exprs` checks; they would
    /// truncate.)
    pub(super) fn load_int(&mut self, e: Elem, p: Value) -> Value {
        let ins = |g: &mut Self, ty| g.b.ins().load(ty, mem(), p, 0);
        match e {
            Elem::I8 | Elem::I16 | Elem::I32 => {
                let x = ins(self, int_type(e));
                self.b.ins().sextend(I64, x)
            }
            Elem::U8 | Elem::U16 | Elem::U32 => {
                let x = ins(self, int_type(e));
                self.b.ins().uextend(I64, x)
            }
            Elem::I64 | Elem::U64 => ins(self, I64),
            Elem::Bool => {
                let x = ins(self, I8);
                let nz = self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0);
                self.b.ins().uextend(I64, nz)
            }
            Elem::F32 | Elem::F64 | Elem::Bf16 | Elem::E4m3 => {
                let x = self.load(e, p);
                self.b.ins().fcvt_to_sint_sat(I64, x)
            }
        }
    }

    /// Stores i64 `x` at `p` as `e`: integers keep their low bits, bool is
    /// `x != 0`.
    pub(super) fn store_int(&mut self, e: Elem, x: Value, p: Value) {
        let v = match e {
            Elem::I8 | Elem::U8 | Elem::I16 | Elem::U16 | Elem::I32 | Elem::U32 => {
                self.b.ins().ireduce(int_type(e), x)
            }
            Elem::I64 | Elem::U64 => x,
            Elem::Bool => self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0),
            Elem::F32 | Elem::F64 | Elem::Bf16 | Elem::E4m3 => {
                let f = self.b.ins().fcvt_from_sint(F32, x);
                return self.store(e, f, p);
            }
        };
        self.b.ins().store(mem(), v, p, 0);
    }

    /// Emits the live expressions of an integer kernel for one element;
    /// `vals[i]` is operand `i`'s value as i64.
    pub(super) fn exprs_int(&mut self, vals: &[Option<Value>]) -> Value {
        let k = self.k;
        let mut v: Vec<Option<Value>> = vec![None; k.exprs.len()];
        let get = |v: &[Option<Value>], i: usize| v[i].expect("live arguments are emitted first");
        for (i, e) in k.exprs.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            v[i] = Some(match *e {
                Expr::Load(op) => vals[op].expect("used operands are loaded"),
                Expr::Int(c) => self.b.ins().iconst(I64, c),
                // `live_exprs` refuses the rest in integer kernels; a float
                // constant would truncate.
                Expr::Const(c) => self.b.ins().iconst(I64, c as i64),
                Expr::Unary(op, a) => {
                    let a = get(&v, a);
                    match op {
                        Unary::Abs => self.b.ins().iabs(a),
                        _ => self.b.ins().ineg(a),
                    }
                }
                Expr::Binary(op, a, b) => self.binary_int(op, get(&v, a), get(&v, b)),
                Expr::Select(c, a, b) => {
                    let m = self.b.ins().icmp_imm_u(IntCC::NotEqual, get(&v, c), 0);
                    self.b.ins().select(m, get(&v, a), get(&v, b))
                }
            });
        }
        get(&v, k.result)
    }

    fn binary_int(&mut self, op: Binary, a: Value, b: Value) -> Value {
        let cmp = |g: &mut Self, cc| {
            let m = g.b.ins().icmp(cc, a, b);
            g.b.ins().uextend(I64, m)
        };
        match op {
            Binary::Add => self.b.ins().iadd(a, b),
            Binary::Sub => self.b.ins().isub(a, b),
            Binary::Mul => self.b.ins().imul(a, b),
            Binary::Div => {
                // `sdiv` traps on 0 and on MIN / -1: divide by 1 there, then
                // give 0 and the wrapped negation.
                let one = self.b.ins().iconst(I64, 1);
                let zero = self.b.ins().iconst(I64, 0);
                let by_zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let by_minus = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                let special = self.b.ins().bor(by_zero, by_minus);
                let d = self.b.ins().select(special, one, b);
                let q = self.b.ins().sdiv(a, d);
                let neg = self.b.ins().ineg(a);
                let q = self.b.ins().select(by_minus, neg, q);
                self.b.ins().select(by_zero, zero, q)
            }
            Binary::Max => self.b.ins().smax(a, b),
            Binary::Min => self.b.ins().smin(a, b),
            Binary::Equal => cmp(self, IntCC::Equal),
            Binary::Less => cmp(self, IntCC::SignedLessThan),
            Binary::Greater => cmp(self, IntCC::SignedGreaterThan),
            // Refused by `live_exprs` in integer kernels.
            Binary::Pow => a,
        }
    }

    /// Truncates `x` to an integer clamped to `lo..=hi`, as type `ty`.
    fn narrow(&mut self, x: Value, ty: Type, lo: i64, hi: i64) -> Value {
        let t = self.b.ins().fcvt_to_sint_sat(I32, x);
        let lo = self.b.ins().iconst(I32, lo);
        let hi = self.b.ins().iconst(I32, hi);
        let t = self.b.ins().smax(t, lo);
        let t = self.b.ins().smin(t, hi);
        self.b.ins().ireduce(ty, t)
    }

    /// Emits the live expressions for one element (`ty` = F32) or four
    /// (`ty` = F32X4); `vals[i]` is operand `i`'s loaded value.
    pub(super) fn exprs(&mut self, ty: Type, vals: &[Option<Value>]) -> Value {
        let k = self.k;
        let mut v: Vec<Option<Value>> = vec![None; k.exprs.len()];
        let get = |v: &[Option<Value>], i: usize| v[i].expect("live arguments are emitted first");
        for (i, e) in k.exprs.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            v[i] = Some(match *e {
                Expr::Load(op) => vals[op].expect("used operands are loaded"),
                Expr::Const(c) => self.fconst(ty, c),
                Expr::Int(c) => self.fconst(ty, c as f32),
                Expr::Unary(op, a) => self.unary(ty, op, get(&v, a)),
                Expr::Binary(op, a, b) => self.binary(ty, op, get(&v, a), get(&v, b)),
                Expr::Select(c, a, b) => {
                    let zero = self.fconst(ty, 0.0);
                    let m = self.b.ins().fcmp(FloatCC::NotEqual, get(&v, c), zero);
                    self.pick(m, get(&v, a), get(&v, b))
                }
            });
        }
        get(&v, k.result)
    }

    fn fconst(&mut self, ty: Type, c: f32) -> Value {
        let s = self.b.ins().f32const(c);
        if ty.is_vector() {
            self.b.ins().splat(ty, s)
        } else {
            s
        }
    }

    /// `mask ? a : b`, where `mask` comes from `fcmp` on `a`'s type.
    fn pick(&mut self, mask: Value, a: Value, b: Value) -> Value {
        let ty = self.b.func.dfg.value_type(a);
        if ty.is_vector() {
            let flags = MemFlagsData::new().with_endianness(Endianness::Little);
            let m = self.b.ins().bitcast(ty, flags, mask);
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(mask, a, b)
        }
    }

    fn unary(&mut self, ty: Type, op: Unary, x: Value) -> Value {
        match op {
            Unary::Neg => self.b.ins().fneg(x),
            Unary::Abs => self.b.ins().fabs(x),
            Unary::Sqrt => self.b.ins().sqrt(x),
            Unary::Rsqrt => {
                let one = self.fconst(ty, 1.0);
                let s = self.b.ins().sqrt(x);
                self.b.ins().fdiv(one, s)
            }
            Unary::Reciprocal => {
                let one = self.fconst(ty, 1.0);
                self.b.ins().fdiv(one, x)
            }
            Unary::Exp => self.call(MathFn::Exp, &[x]),
            Unary::Log => self.call(MathFn::Log, &[x]),
            Unary::Tanh => self.call(MathFn::Tanh, &[x]),
            Unary::Erf => self.call(MathFn::Erf, &[x]),
            Unary::Sigmoid => self.call(MathFn::Sigmoid, &[x]),
            Unary::Sin => self.call(MathFn::Sin, &[x]),
            Unary::Cos => self.call(MathFn::Cos, &[x]),
            Unary::Floor | Unary::Ceil | Unary::Trunc | Unary::RoundEven => self.round(ty, op, x),
            Unary::Relu => {
                // NaN and -0.0 pass through, as max(x, 0) in the reference.
                let zero = self.fconst(ty, 0.0);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                self.pick(neg, zero, x)
            }
        }
    }

    fn binary(&mut self, ty: Type, op: Binary, a: Value, b: Value) -> Value {
        match op {
            Binary::Add => self.b.ins().fadd(a, b),
            Binary::Sub => self.b.ins().fsub(a, b),
            Binary::Mul => self.b.ins().fmul(a, b),
            Binary::Div => self.b.ins().fdiv(a, b),
            Binary::Max | Binary::Min => {
                // numpy's maximum/minimum: NaN from either side wins, a tie
                // returns `a`.
                let cc = if op == Binary::Max {
                    FloatCC::GreaterThanOrEqual
                } else {
                    FloatCC::LessThanOrEqual
                };
                let keep_a = self.b.ins().fcmp(cc, a, b);
                let t = self.pick(keep_a, a, b);
                let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
                self.pick(a_nan, a, t)
            }
            Binary::Pow => self.call(MathFn::Pow, &[a, b]),
            Binary::Equal | Binary::Less | Binary::Greater => {
                let cc = match op {
                    Binary::Equal => FloatCC::Equal,
                    Binary::Less => FloatCC::LessThan,
                    _ => FloatCC::GreaterThan,
                };
                let m = self.b.ins().fcmp(cc, a, b);
                let one = self.fconst(ty, 1.0);
                let zero = self.fconst(ty, 0.0);
                self.pick(m, one, zero)
            }
        }
    }

    /// Floor, ceil, trunc and round-half-even. SSE4.1 has instructions for
    /// them; without it Cranelift would call libm (a relocation), so the
    /// baseline rounds to nearest even by adding and subtracting 2^23 (exact
    /// below 2^23 in magnitude, where f32 has fractional bits; larger values,
    /// infinities and NaN are integral already and pass through) and derives
    /// the others by a ±1 correction.
    fn round(&mut self, ty: Type, op: Unary, x: Value) -> Value {
        if self.level.has_round() {
            return match op {
                Unary::Floor => self.b.ins().floor(x),
                Unary::Ceil => self.b.ins().ceil(x),
                Unary::Trunc => self.b.ins().trunc(x),
                _ => self.b.ins().nearest(x),
            };
        }
        let big = self.fconst(ty, 8388608.0);
        let sign_bit = self.fconst(ty, -0.0);
        let ax = self.b.ins().fabs(x);
        let r = self.b.ins().fadd(ax, big);
        let r = self.b.ins().fsub(r, big);
        let sign = self.b.ins().band(x, sign_bit);
        let r = self.b.ins().bor(r, sign);
        let small = self.b.ins().fcmp(FloatCC::LessThan, ax, big);
        let n = self.pick(small, r, x);
        if op == Unary::RoundEven {
            return n;
        }
        let one = self.fconst(ty, 1.0);
        let above = self.b.ins().fcmp(FloatCC::GreaterThan, n, x);
        let n_minus = self.b.ins().fsub(n, one);
        let floor = self.pick(above, n_minus, n);
        let below = self.b.ins().fcmp(FloatCC::LessThan, n, x);
        let n_plus = self.b.ins().fadd(n, one);
        let ceil = self.pick(below, n_plus, n);
        match op {
            Unary::Floor => floor,
            Unary::Ceil => ceil,
            _ => {
                let zero = self.fconst(ty, 0.0);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                self.pick(neg, ceil, floor)
            }
        }
    }

    /// Calls a math table function: once for a scalar, once per vector
    /// through the `f32x4` entry, or lane by lane for a vector of a function
    /// without one (`pow`).
    fn call(&mut self, f: MathFn, args: &[Value]) -> Value {
        let ty = self.b.func.dfg.value_type(args[0]);
        if ty.is_vector()
            && let Some(fptr) = self.vector_fns[f.slot()]
        {
            let sig = self
                .sig_vec
                .expect("the vector signature is imported with the vector entries");
            let inst = self.b.ins().call_indirect(sig, fptr, args);
            return self.b.inst_results(inst)[0];
        }
        let fptr = self.scalar_fns[f.slot()].expect("live math functions are loaded");
        let sig = if f.binary() {
            self.sig_bin
        } else {
            self.sig_un
        }
        .expect("signatures of live math functions are imported");
        if !ty.is_vector() {
            let inst = self.b.ins().call_indirect(sig, fptr, args);
            return self.b.inst_results(inst)[0];
        }
        let mut out = args[0];
        for lane in 0..ty.lane_count() as u8 {
            let lanes: Vec<Value> = args
                .iter()
                .map(|&a| self.b.ins().extractlane(a, lane))
                .collect();
            let inst = self.b.ins().call_indirect(sig, fptr, &lanes);
            let y = self.b.inst_results(inst)[0];
            out = self.b.ins().insertlane(out, y, lane);
        }
        out
    }
}
