//! Recurrent layers (`core.rnn`, `core.gru`, `core.lstm`) as the ops both
//! backends have kernels for: per direction, the input projection of every
//! step as one GEMM (`[seq*batch, input] · wᵀ + bw + br`), then per step
//! one GEMM of the state with `rᵀ` that takes the step's projection as its
//! `c` operand, and the gates as pointwise ops. Sequence lengths become a
//! per-step mask (`t < seq_lens[b]`) that keeps the state and zeroes `y`,
//! which is also what the reverse direction needs (ONNX's reverse pass of
//! entry `b` starts at `seq_lens[b] - 1`).
//!
//! The expansion computes exactly the interpreter's definition
//! (`aoc_ir::ops::recurrent`), through the same attribute decoder
//! (`activations`, `directions`); only float rounding differs.

use std::sync::Arc;

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::module::{Func, OpData, ValueId};
use aoc_ir::ops::kind::Cell;
use aoc_ir::ops::recurrent::{Act, activations, check, directions};
use aoc_ir::{Location, Opcode, Scalar, Tensor, TensorType};

/// Builds ops into a function under one name and location.
struct B<'f> {
    f: &'f mut Func,
    base: String,
    loc: Location,
    elem: Scalar,
}

impl B<'_> {
    fn op(&mut self, opcode: Opcode, operands: &[ValueId], attrs: Attrs) -> Result<ValueId, String> {
        let r = self
            .f
            .push_op(opcode, operands, attrs, None, &self.base, self.loc.clone())
            .map_err(|d| format!("expanding {}: {}", self.base, d.message))?;
        Ok(r[0])
    }
    fn un(&mut self, opcode: Opcode, x: ValueId) -> Result<ValueId, String> {
        self.op(opcode, &[x], Attrs::new())
    }
    fn bin(&mut self, opcode: Opcode, a: ValueId, b: ValueId) -> Result<ValueId, String> {
        self.op(opcode, &[a, b], Attrs::new())
    }
    fn konst(&mut self, t: Tensor) -> Result<ValueId, String> {
        let ty = t.ty.clone();
        let attrs = Attrs::new().with("value", Attr::Const(ConstValue::Tensor(Arc::new(t))));
        let r = self
            .f
            .push_op(Opcode::Const, &[], attrs, Some(vec![ty]), &self.base, self.loc.clone())
            .map_err(|d| d.message)?;
        Ok(r[0])
    }
    fn scalar(&mut self, v: f64) -> Result<ValueId, String> {
        self.konst(Tensor::splat(TensorType::new(vec![], self.elem), v))
    }
    fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId, String> {
        let s = shape.iter().map(|&d| d as i64).collect();
        self.op(Opcode::Reshape, &[x], Attrs::new().with("shape", Attr::Ints(s)))
    }
    /// `x[.., start..end, ..]` along `axis`.
    fn slice(&mut self, x: ValueId, axis: usize, start: usize, end: usize) -> Result<ValueId, String> {
        let attrs = Attrs::new()
            .with("starts", Attr::Ints(vec![start as i64]))
            .with("ends", Attr::Ints(vec![end as i64]))
            .with("axes", Attr::Ints(vec![axis as i64]));
        self.op(Opcode::Slice, &[x], attrs)
    }
    fn concat(&mut self, xs: &[ValueId], axis: usize) -> Result<ValueId, String> {
        if let [x] = xs {
            return Ok(*x);
        }
        self.op(Opcode::Concat, xs, Attrs::new().with("axis", Attr::Int(axis as i64)))
    }
    /// `a · bᵀ (+ c)`.
    fn gemm_t(&mut self, a: ValueId, b: ValueId, c: Option<ValueId>) -> Result<ValueId, String> {
        let mut operands = vec![a, b];
        operands.extend(c);
        self.op(Opcode::Gemm, &operands, Attrs::new().with("trans_b", Attr::Bool(true)))
    }
    fn clip(&mut self, x: ValueId, clip: Option<f64>) -> Result<ValueId, String> {
        match clip {
            None => Ok(x),
            Some(c) => {
                let attrs = Attrs::new().with("min", Attr::Float(-c)).with("max", Attr::Float(c));
                self.op(Opcode::Clip, &[x], attrs)
            }
        }
    }
    fn act(&mut self, a: Act, x: ValueId) -> Result<ValueId, String> {
        Ok(match a {
            Act::Sigmoid => self.un(Opcode::Sigmoid, x)?,
            Act::Tanh => self.un(Opcode::Tanh, x)?,
            Act::Relu => self.un(Opcode::Relu, x)?,
            Act::Affine(alpha, beta) => {
                let (a, b) = (self.scalar(alpha)?, self.scalar(beta)?);
                let m = self.bin(Opcode::Mul, x, a)?;
                self.bin(Opcode::Add, m, b)?
            }
            Act::LeakyRelu(alpha) => self.op(Opcode::LeakyRelu, &[x], Attrs::new().with("alpha", Attr::Float(alpha)))?,
            Act::ThresholdedRelu(alpha) => {
                let (a, zero) = (self.scalar(alpha)?, self.scalar(0.0)?);
                let above = self.bin(Opcode::Greater, x, a)?;
                self.op(Opcode::Where, &[above, x, zero], Attrs::new())?
            }
            Act::ScaledTanh(alpha, beta) => {
                let (a, b) = (self.scalar(alpha)?, self.scalar(beta)?);
                let bx = self.bin(Opcode::Mul, x, b)?;
                let t = self.un(Opcode::Tanh, bx)?;
                self.bin(Opcode::Mul, t, a)?
            }
            Act::HardSigmoid(alpha, beta) => {
                let attrs = Attrs::new().with("alpha", Attr::Float(alpha)).with("beta", Attr::Float(beta));
                self.op(Opcode::HardSigmoid, &[x], attrs)?
            }
            Act::Elu(alpha) => {
                let (a, zero, one) = (self.scalar(alpha)?, self.scalar(0.0)?, self.scalar(1.0)?);
                let e = self.un(Opcode::Exp, x)?;
                let em1 = self.bin(Opcode::Sub, e, one)?;
                let neg = self.bin(Opcode::Mul, em1, a)?;
                let below = self.bin(Opcode::Less, x, zero)?;
                self.op(Opcode::Where, &[below, neg, x], Attrs::new())?
            }
            Act::Softsign => {
                let one = self.scalar(1.0)?;
                let ax = self.un(Opcode::Abs, x)?;
                let d = self.bin(Opcode::Add, ax, one)?;
                self.bin(Opcode::Div, x, d)?
            }
            Act::Softplus => {
                let one = self.scalar(1.0)?;
                let e = self.un(Opcode::Exp, x)?;
                let s = self.bin(Opcode::Add, e, one)?;
                self.un(Opcode::Log, s)?
            }
        })
    }
    /// `f(clip(x))`
    fn gate(&mut self, a: Act, x: ValueId, clip: Option<f64>) -> Result<ValueId, String> {
        let c = self.clip(x, clip)?;
        self.act(a, c)
    }
    /// `keep ? new : old` (no mask: `new`).
    fn masked(&mut self, mask: Option<ValueId>, new: ValueId, old: ValueId) -> Result<ValueId, String> {
        match mask {
            None => Ok(new),
            Some(m) => self.op(Opcode::Where, &[m, new, old], Attrs::new()),
        }
    }
}

/// The values that replace the results of recurrent op `op`, whose
/// operands are `operands` in `f`.
pub(crate) fn expand_recurrent(
    f: &mut Func,
    op: &OpData,
    cell: Cell,
    operands: &[ValueId],
    base: &str,
) -> Result<Vec<ValueId>, String> {
    let attrs = op.opcode.info().complete_attrs(op.attrs.clone())?;
    let str_attr = |name: &str| match attrs.get(name) {
        Some(Attr::Str(s)) => s.clone(),
        _ => String::new(),
    };
    let floats = |name: &str| match attrs.get(name) {
        Some(Attr::Floats(v)) => v.clone(),
        _ => vec![],
    };
    let flag = |name: &str| matches!(attrs.get(name), Some(Attr::Bool(true)));
    let clip = match attrs.get("clip") {
        Some(Attr::Float(c)) => Some(*c),
        _ => None,
    };
    let direction = str_attr("direction");
    let types: Vec<TensorType> = operands.iter().map(|&v| f.ty(v).clone()).collect();
    let d = check(cell, &types, &direction)?;
    let acts = activations(cell, d.dirs, &str_attr("activations"), &floats("activation_alpha"), &floats("activation_beta"))?;
    let elem = types[0].elem.storage();
    let mut b = B { f, base: base.to_string(), loc: op.loc.clone(), elem };
    let (s, n, h, g) = (d.seq, d.batch, d.hidden, cell.gates() * d.hidden);
    let given = |i: usize| operands.get(i).copied();

    // The mask of each step: t < seq_lens[b], as a [batch, 1] bool.
    let lens = match given(4) {
        None => None,
        Some(l) => {
            let to = Attr::Type(elem);
            let lf = b.op(Opcode::Cast, &[l], Attrs::new().with("to", to))?;
            Some(b.reshape(lf, &[n, 1])?)
        }
    };
    let mut masks = vec![];
    for t in 0..s {
        masks.push(match lens {
            None => None,
            Some(l) => {
                let tv = b.scalar(t as f64)?;
                Some(b.bin(Opcode::Less, tv, l)?)
            }
        });
    }
    let zeros = b.konst(Tensor::splat(TensorType::new(vec![n, h], elem), 0.0))?;
    let x2 = b.reshape(operands[0], &[s * n, d.input])?;

    let mut ys = vec![];
    let (mut hs_out, mut cs_out) = (vec![], vec![]);
    for (di, &reverse) in directions(&direction)?.iter().enumerate() {
        let act = &acts[di * cell.activation_count()..(di + 1) * cell.activation_count()];
        let pick = |b: &mut B, v: ValueId, rows: usize, cols: usize| -> Result<ValueId, String> {
            let one = b.slice(v, 0, di, di + 1)?;
            b.reshape(one, &[rows, cols])
        };
        let w = pick(&mut b, operands[1], g, d.input)?;
        let r = pick(&mut b, operands[2], g, h)?;
        let (wb, rb) = match given(3) {
            None => (None, None),
            Some(bias) => {
                let all = pick(&mut b, bias, 1, 2 * g)?;
                let wb = b.slice(all, 1, 0, g)?;
                let rb = b.slice(all, 1, g, 2 * g)?;
                (Some(wb), Some(rb))
            }
        };
        let state = |b: &mut B, i: usize| -> Result<ValueId, String> {
            match given(i) {
                None => Ok(zeros),
                Some(v) => pick(b, v, n, h),
            }
        };
        let mut hs = state(&mut b, 5)?;
        let mut cs = state(&mut b, 6)?;
        let peep = match given(7) {
            None => None,
            Some(p) => {
                let p = pick(&mut b, p, 1, 3 * h)?;
                Some([b.slice(p, 1, 0, h)?, b.slice(p, 1, h, 2 * h)?, b.slice(p, 1, 2 * h, 3 * h)?])
            }
        };
        // The input projection of every step at once. The GRU keeps the
        // recurrence bias apart (its candidate gate needs h·rᵀ + br alone).
        let bias = match (cell, wb, rb) {
            (Cell::Gru, wb, _) => wb,
            (_, Some(wb), Some(rb)) => Some(b.bin(Opcode::Add, wb, rb)?),
            (_, wb, _) => wb,
        };
        let xw = b.gemm_t(x2, w, bias)?;
        let steps: Vec<usize> = if reverse { (0..s).rev().collect() } else { (0..s).collect() };
        let mut y_dir = vec![None; s];
        for t in steps {
            let xt = b.slice(xw, 0, t * n, (t + 1) * n)?;
            let hn = match cell {
                Cell::Rnn => {
                    let pre = b.gemm_t(hs, r, Some(xt))?;
                    b.gate(act[0], pre, clip)?
                }
                Cell::Gru => {
                    let hr = b.gemm_t(hs, r, rb)?;
                    let xzr = b.slice(xt, 1, 0, 2 * h)?;
                    let hzr = b.slice(hr, 1, 0, 2 * h)?;
                    let zr_pre = b.bin(Opcode::Add, xzr, hzr)?;
                    let zr = b.gate(act[0], zr_pre, clip)?;
                    let z = b.slice(zr, 1, 0, h)?;
                    let rg = b.slice(zr, 1, h, 2 * h)?;
                    let xh = b.slice(xt, 1, 2 * h, 3 * h)?;
                    let rec = if flag("linear_before_reset") {
                        let hh = b.slice(hr, 1, 2 * h, 3 * h)?;
                        b.bin(Opcode::Mul, rg, hh)?
                    } else {
                        let rh_w = b.slice(r, 0, 2 * h, 3 * h)?;
                        let rh_b = match rb {
                            Some(rb) => Some(b.slice(rb, 1, 2 * h, 3 * h)?),
                            None => None,
                        };
                        let gated = b.bin(Opcode::Mul, rg, hs)?;
                        b.gemm_t(gated, rh_w, rh_b)?
                    };
                    let cand_pre = b.bin(Opcode::Add, xh, rec)?;
                    let cand = b.gate(act[1], cand_pre, clip)?;
                    // (1 - z) ⊙ cand + z ⊙ h = cand + z ⊙ (h - cand)
                    let diff = b.bin(Opcode::Sub, hs, cand)?;
                    let zd = b.bin(Opcode::Mul, z, diff)?;
                    b.bin(Opcode::Add, cand, zd)?
                }
                Cell::Lstm => {
                    let pre = b.gemm_t(hs, r, Some(xt))?;
                    let part = |b: &mut B, k: usize| b.slice(pre, 1, k * h, (k + 1) * h);
                    let with_peep = |b: &mut B, x: ValueId, k: usize, c: ValueId| -> Result<ValueId, String> {
                        match peep {
                            None => Ok(x),
                            Some(p) => {
                                let pc = b.bin(Opcode::Mul, p[k], c)?;
                                b.bin(Opcode::Add, x, pc)
                            }
                        }
                    };
                    let i_pre = part(&mut b, 0)?;
                    let i_pre = with_peep(&mut b, i_pre, 0, cs)?;
                    let i = b.gate(act[0], i_pre, clip)?;
                    let f = if flag("input_forget") {
                        let one = b.scalar(1.0)?;
                        b.bin(Opcode::Sub, one, i)?
                    } else {
                        let f_pre = part(&mut b, 2)?;
                        let f_pre = with_peep(&mut b, f_pre, 2, cs)?;
                        b.gate(act[0], f_pre, clip)?
                    };
                    let c_pre = part(&mut b, 3)?;
                    let cc = b.gate(act[1], c_pre, clip)?;
                    let fc = b.bin(Opcode::Mul, f, cs)?;
                    let ic = b.bin(Opcode::Mul, i, cc)?;
                    let c_new = b.bin(Opcode::Add, fc, ic)?;
                    let o_pre = part(&mut b, 1)?;
                    let o_pre = with_peep(&mut b, o_pre, 1, c_new)?;
                    let o = b.gate(act[0], o_pre, clip)?;
                    let hc = b.act(act[2], c_new)?;
                    cs = b.masked(masks[t], c_new, cs)?;
                    b.bin(Opcode::Mul, o, hc)?
                }
            };
            let yt = b.masked(masks[t], hn, zeros)?;
            y_dir[t] = Some(b.reshape(yt, &[1, 1, n, h])?);
            hs = b.masked(masks[t], hn, hs)?;
        }
        ys.push(y_dir.into_iter().collect::<Option<Vec<_>>>().ok_or("a step was skipped")?);
        hs_out.push(b.reshape(hs, &[1, n, h])?);
        cs_out.push(b.reshape(cs, &[1, n, h])?);
    }
    // y: per step, the directions side by side; then the steps in order.
    let mut per_step = vec![];
    for t in 0..s {
        let dirs: Vec<ValueId> = ys.iter().map(|y| y[t]).collect();
        per_step.push(b.concat(&dirs, 1)?);
    }
    let y = b.concat(&per_step, 0)?;
    let mut out = vec![y, b.concat(&hs_out, 0)?];
    if cell == Cell::Lstm {
        out.push(b.concat(&cs_out, 0)?);
    }
    Ok(out)
}
