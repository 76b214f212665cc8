//! Recurrent ops: `core.rnn`, `core.gru` and `core.lstm`, with ONNX's
//! semantics (RNN, GRU, LSTM with `layout = 0`: the sequence axis first).
//!
//! Operands: `x` `[seq, batch, input]`, `w` `[dirs, gates*hidden, input]`,
//! `r` `[dirs, gates*hidden, hidden]`, then optional `b` `[dirs,
//! 2*gates*hidden]` (input then recurrence biases), `seq_lens` `[batch]`
//! (integers), `h0` `[dirs, batch, hidden]`, and for the LSTM `c0` (like
//! `h0`) and `p` `[dirs, 3*hidden]` (peepholes, `i, o, f`). Results: `y`
//! `[seq, dirs, batch, hidden]`, `y_h` `[dirs, batch, hidden]` and, for the
//! LSTM, `y_c`. Gate order is ONNX's: LSTM `i, o, f, c`; GRU `z, r, h`.
//!
//! Sequence lengths: batch entry `b` takes steps `t < seq_lens[b]`; at the
//! others its state is kept and its `y` is zero. A reverse direction runs
//! `t` from `seq - 1` down to 0 under the same rule, so batch entry `b`
//! reads `x[seq_lens[b] - 1]` first, as ONNX defines.
//!
//! Activations are named in one string attribute, comma-separated and
//! lowercase (`"sigmoid,tanh,tanh"`; per direction, forward first), with
//! ONNX's `activation_alpha`/`activation_beta` consumed in order by the
//! activations that take parameters ([`Act`]). The lowering expands these
//! ops into matrix products and pointwise ops with [`activations`] and
//! [`Cell`], so the interpreter and both backends read the attributes
//! through one decoder.

use crate::ops::kind::Cell;
use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// One activation function of a recurrent cell, with its parameters.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Act {
    Sigmoid,
    Tanh,
    Relu,
    /// `alpha * x + beta`
    Affine(f64, f64),
    LeakyRelu(f64),
    /// `x` where `x > alpha`, else 0.
    ThresholdedRelu(f64),
    /// `alpha * tanh(beta * x)`
    ScaledTanh(f64, f64),
    /// `clamp(alpha * x + beta, 0, 1)`
    HardSigmoid(f64, f64),
    /// `x` where `x >= 0`, else `alpha * (exp(x) - 1)`.
    Elu(f64),
    /// `x / (1 + |x|)`
    Softsign,
    /// `log(1 + exp(x))`
    Softplus,
}

impl Act {
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Act::Sigmoid => crate::ops::kind::sigmoid(x),
            Act::Tanh => x.tanh(),
            Act::Relu => x.max(0.0),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => if x >= 0.0 { x } else { a * x },
            Act::ThresholdedRelu(a) => if x > a { x } else { 0.0 },
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => if x >= 0.0 { x } else { a * (x.exp() - 1.0) },
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.exp().ln_1p(),
        }
    }
}

impl Cell {
    /// Gates per hidden unit: the rows of `w` and `r` are `gates * hidden`.
    pub fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    /// Activations per direction (ONNX's `f`, `g`, `h`).
    pub fn activation_count(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 2,
            Cell::Lstm => 3,
        }
    }
    /// ONNX's default activations for one direction.
    pub fn default_activations(self) -> &'static str {
        match self {
            Cell::Rnn => "tanh",
            Cell::Gru => "sigmoid,tanh",
            Cell::Lstm => "sigmoid,tanh,tanh",
        }
    }
}

/// The directions `direction` names: `[false]` forward, `[true]` reverse,
/// `[false, true]` bidirectional (the flag says "reverse").
pub fn directions(direction: &str) -> Result<&'static [bool], String> {
    match direction {
        "forward" => Ok(&[false]),
        "reverse" => Ok(&[true]),
        "bidirectional" => Ok(&[false, true]),
        other => Err(format!("unknown direction `{other}` (forward, reverse or bidirectional)")),
    }
}

/// The activations of every direction, in order: the attribute's list, or
/// the cell's defaults (repeated per direction) when it is empty.
pub fn activations(
    cell: Cell,
    dirs: usize,
    names: &str,
    alpha: &[f64],
    beta: &[f64],
) -> Result<Vec<Act>, String> {
    let want = cell.activation_count() * dirs;
    let names: Vec<String> = if names.is_empty() {
        std::iter::repeat_n(cell.default_activations(), dirs)
            .flat_map(|s| s.split(','))
            .map(str::to_string)
            .collect()
    } else {
        names.split(',').map(|s| s.trim().to_ascii_lowercase()).collect()
    };
    if names.len() != want {
        return Err(format!(
            "activations lists {} functions, expected {want} ({} per direction)",
            names.len(),
            cell.activation_count()
        ));
    }
    let (mut alpha, mut beta) = (alpha.iter().copied(), beta.iter().copied());
    names
        .iter()
        .map(|name| {
            let mut a = |default: f64| alpha.next().unwrap_or(default);
            Ok(match name.as_str() {
                "sigmoid" => Act::Sigmoid,
                "tanh" => Act::Tanh,
                "relu" => Act::Relu,
                "affine" => Act::Affine(a(1.0), beta.next().unwrap_or(0.0)),
                "leakyrelu" => Act::LeakyRelu(a(0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
                "scaledtanh" => Act::ScaledTanh(a(1.0), beta.next().unwrap_or(1.0)),
                "hardsigmoid" => Act::HardSigmoid(a(0.2), beta.next().unwrap_or(0.5)),
                "elu" => Act::Elu(a(1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                other => return Err(format!("unknown activation `{other}`")),
            })
        })
        .collect()
}

/// The sizes every hook needs, checked.
#[derive(Copy, Clone, Debug)]
pub struct Dims {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub dirs: usize,
}

fn cell_of(cx_opcode: crate::Opcode) -> Result<Cell, String> {
    match cx_opcode.kind() {
        crate::ops::OpKind::Recurrent(c) => Ok(c),
        _ => Err(format!("{} is not a recurrent op", cx_opcode.name())),
    }
}

/// Checks the operand types of a recurrent op of `cell` and returns its
/// sizes.
pub fn check(cell: Cell, operands: &[TensorType], direction: &str) -> Result<Dims, String> {
    let dirs = directions(direction)?.len();
    let x = &operands[0];
    if !x.elem.is_float() || x.rank() != 3 {
        return Err(format!("x must be a float tensor [seq, batch, input], found {x}"));
    }
    let (seq, batch, input) = (x.shape[0], x.shape[1], x.shape[2]);
    let r = &operands[2];
    if r.rank() != 3 || r.shape[0] != dirs || r.shape[1] % cell.gates() != 0 {
        return Err(format!("r must be [{dirs}, {}*hidden, hidden], found {r}", cell.gates()));
    }
    let hidden = r.shape[1] / cell.gates();
    let g = cell.gates() * hidden;
    let mut want: Vec<(&str, Vec<usize>)> = vec![
        ("w", vec![dirs, g, input]),
        ("r", vec![dirs, g, hidden]),
        ("b", vec![dirs, 2 * g]),
        ("seq_lens", vec![batch]),
        ("h0", vec![dirs, batch, hidden]),
    ];
    if cell == Cell::Lstm {
        want.push(("c0", vec![dirs, batch, hidden]));
        want.push(("p", vec![dirs, 3 * hidden]));
    }
    for (i, t) in operands.iter().enumerate().skip(1) {
        let Some((name, shape)) = want.get(i - 1) else {
            return Err(format!("too many operands ({})", operands.len()));
        };
        if t.shape != *shape {
            return Err(format!("{name} must have shape {shape:?}, found {t}"));
        }
        if *name == "seq_lens" {
            if !t.elem.is_int() {
                return Err(format!("seq_lens must be integers, found {t}"));
            }
        } else if t.elem != x.elem {
            return Err(format!("{name} has element type {}, expected {}", t.elem, x.elem));
        }
    }
    Ok(Dims { seq, batch, input, hidden, dirs })
}

pub fn infer_recurrent(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let cell = cell_of(cx.opcode)?;
    let d = check(cell, cx.operands, cx.str("direction")?)?;
    let acts = cx.attrs.get("activations").map_or(Ok(""), |_| cx.str("activations"))?;
    let floats = |name: &str| if cx.has(name) { cx.floats(name) } else { Ok(&[][..]) };
    activations(cell, d.dirs, acts, floats("activation_alpha")?, floats("activation_beta")?)?;
    if cx.has("clip") && !(cx.float("clip")? >= 0.0) {
        return Err(format!("clip must be a non-negative number, found {}", cx.float("clip")?));
    }
    let x = &cx.operands[0];
    let state = x.with_shape(vec![d.dirs, d.batch, d.hidden]);
    let mut out = vec![x.with_shape(vec![d.seq, d.dirs, d.batch, d.hidden]), state.clone()];
    if cell == Cell::Lstm {
        out.push(state);
    }
    Ok(out)
}

pub fn eval_recurrent(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let cell = cell_of(cx.opcode)?;
    let types: Vec<TensorType> = cx.inputs.iter().map(|t| t.ty.clone()).collect();
    let direction = cx.str("direction")?;
    let d = check(cell, &types, direction)?;
    let acts = cx.attrs.get("activations").map_or(Ok(""), |_| cx.str("activations"))?;
    let floats = |name: &str| if cx.has(name) { cx.floats(name) } else { Ok(&[][..]) };
    let acts = activations(cell, d.dirs, acts, floats("activation_alpha")?, floats("activation_beta")?)?;
    let clip = if cx.has("clip") { Some(cx.float("clip")?) } else { None };
    let flag = |name: &str| cx.has(name) && cx.bool(name).unwrap_or(false);
    let (input_forget, linear_before_reset) = (flag("input_forget"), flag("linear_before_reset"));

    let (h, g) = (d.hidden, cell.gates() * d.hidden);
    let x = cx.inputs[0].to_f64();
    let w = cx.inputs[1].to_f64();
    let r = cx.inputs[2].to_f64();
    let opt = |i: usize, n: usize| cx.input(i).map_or_else(|| vec![0.0; n], |t| t.to_f64());
    let b = opt(3, d.dirs * 2 * g);
    let lens: Vec<usize> = match cx.input(4) {
        Some(t) => (0..d.batch).map(|i| t.get_i64(i).clamp(0, d.seq as i64) as usize).collect(),
        None => vec![d.seq; d.batch],
    };
    let h0 = opt(5, d.dirs * d.batch * h);
    let c0 = opt(6, d.dirs * d.batch * h);
    let p = opt(7, d.dirs * 3 * h);
    let clipped = |v: f64| clip.map_or(v, |c| v.clamp(-c, c));

    let mut y = vec![0.0; d.seq * d.dirs * d.batch * h];
    let mut y_h = vec![0.0; d.dirs * d.batch * h];
    let mut y_c = vec![0.0; d.dirs * d.batch * h];
    for (di, &reverse) in directions(direction)?.iter().enumerate() {
        let act = &acts[di * cell.activation_count()..];
        let w = &w[di * g * d.input..];
        let r = &r[di * g * h..];
        let (wb, rb) = (&b[di * 2 * g..di * 2 * g + g], &b[di * 2 * g + g..]);
        let p = &p[di * 3 * h..];
        for bi in 0..d.batch {
            let mut hs: Vec<f64> = h0[(di * d.batch + bi) * h..][..h].to_vec();
            let mut cs: Vec<f64> = c0[(di * d.batch + bi) * h..][..h].to_vec();
            let steps: Vec<usize> = if reverse { (0..lens[bi]).rev().collect() } else { (0..lens[bi]).collect() };
            for t in steps {
                let xt = &x[(t * d.batch + bi) * d.input..][..d.input];
                // Pre-activations of every gate row: x·W + bias_w, and h·R + bias_r.
                let xw: Vec<f64> =
                    (0..g).map(|j| wb[j] + (0..d.input).map(|k| xt[k] * w[j * d.input + k]).sum::<f64>()).collect();
                let hr: Vec<f64> = (0..g).map(|j| rb[j] + (0..h).map(|k| hs[k] * r[j * h + k]).sum::<f64>()).collect();
                let next: Vec<f64> = match cell {
                    Cell::Rnn => (0..h).map(|j| act[0].eval(clipped(xw[j] + hr[j]))).collect(),
                    Cell::Gru => (0..h)
                        .map(|j| {
                            let z = act[0].eval(clipped(xw[j] + hr[j]));
                            let rg = act[0].eval(clipped(xw[h + j] + hr[h + j]));
                            let cand = if linear_before_reset {
                                xw[2 * h + j] + rg * hr[2 * h + j]
                            } else {
                                // (r ⊙ h)·R_h + bias_r
                                let rh: f64 = (0..h).map(|k| rg_at(&xw, &hr, act[0], clip, h, k) * hs[k] * r[(2 * h + j) * h + k]).sum();
                                xw[2 * h + j] + rh + rb[2 * h + j]
                            };
                            let ht = act[1].eval(clipped(cand));
                            (1.0 - z) * ht + z * hs[j]
                        })
                        .collect(),
                    Cell::Lstm => {
                        let mut hn = vec![0.0; h];
                        for j in 0..h {
                            let i = act[0].eval(clipped(xw[j] + hr[j] + p[j] * cs[j]));
                            let f = if input_forget {
                                1.0 - i
                            } else {
                                act[0].eval(clipped(xw[2 * h + j] + hr[2 * h + j] + p[2 * h + j] * cs[j]))
                            };
                            let c = act[1].eval(clipped(xw[3 * h + j] + hr[3 * h + j]));
                            cs[j] = f * cs[j] + i * c;
                            let o = act[0].eval(clipped(xw[h + j] + hr[h + j] + p[h + j] * cs[j]));
                            hn[j] = o * act[2].eval(cs[j]);
                        }
                        hn
                    }
                };
                hs = next;
                y[((t * d.dirs + di) * d.batch + bi) * h..][..h].copy_from_slice(&hs);
            }
            y_h[(di * d.batch + bi) * h..][..h].copy_from_slice(&hs);
            y_c[(di * d.batch + bi) * h..][..h].copy_from_slice(&cs);
        }
    }
    let ty = |shape: Vec<usize>| cx.inputs[0].ty.with_shape(shape);
    let mut out = vec![
        Tensor::from_f64(ty(vec![d.seq, d.dirs, d.batch, h]), y),
        Tensor::from_f64(ty(vec![d.dirs, d.batch, h]), y_h),
    ];
    if cell == Cell::Lstm {
        out.push(Tensor::from_f64(ty(vec![d.dirs, d.batch, h]), y_c));
    }
    Ok(out)
}

/// The GRU's reset gate at unit `k` (recomputed where the candidate needs
/// it for another unit).
fn rg_at(xw: &[f64], hr: &[f64], f: Act, clip: Option<f64>, h: usize, k: usize) -> f64 {
    let v = xw[h + k] + hr[h + k];
    f.eval(clip.map_or(v, |c| v.clamp(-c, c)))
}
