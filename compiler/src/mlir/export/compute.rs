//! The exporter's compositions of compute ops: reductions and
//! normalizations, matmuls and gemms as 3-D `tosa.matmul`, convolutions
//! and pools in NHWC between transposes (with the window arithmetic TOSA
//! insists on), quant casts, slices and gathers.

use super::{Ex, R, V, boolean, broadcast, float, int, internal, ints, norm_axis};
use crate::mlir::types;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::kind::Pool;
use aoc_ir::types::{ElemType, Scalar, TensorType};
use aoc_ir::Tensor;
use melior::ir::attribute::TypeAttribute;
use melior::ir::{Attribute, Location, Type};

/// The NCHW result shape of a convolution's core (before any epilogue).
pub(super) fn conv_shape(attrs: &Attrs, x: &[usize], w: &[usize]) -> Vec<usize> {
    let (s, p, d) = (ints(attrs, "strides"), ints(attrs, "pads"), ints(attrs, "dilations"));
    let dim = |i: usize| {
        let span = d[i] * (w[2 + i] as i64 - 1) + 1;
        ((x[2 + i] as i64 + p[i] + p[i + 2] - span) / s[i] + 1).max(0) as usize
    };
    vec![x[0], w[0], dim(0), dim(1)]
}

/// The result shape of a numpy matmul of ranks >= 2.
pub(super) fn matmul_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let (ra, rb) = (a.len(), b.len());
    let mut s = broadcast(&a[..ra.saturating_sub(2)], &b[..rb.saturating_sub(2)]);
    s.extend([a[ra.saturating_sub(2)], b[rb - 1]]);
    s
}

/// The `[M, N]` of a gemm.
pub(super) fn gemm_shape(attrs: &Attrs, a: &[usize], b: &[usize]) -> Vec<usize> {
    let m = if boolean(attrs, "trans_a") { a[1] } else { a[0] };
    let n = if boolean(attrs, "trans_b") { b[0] } else { b[1] };
    vec![m, n]
}

/// The 3x3 OIHW weight `g` of a Winograd weight `U = G g G^T` (laid out
/// `[m+2, m+2, C_out, C_in]`): `g = L U L^T` with `L` a left inverse of
/// `G` (`L G = I`), exact up to the rounding of `U`.
pub(super) fn winograd_weight(u: &Tensor, tile: usize) -> Result<Tensor, String> {
    let l: &[[f64; 6]; 3] = match tile {
        // F(2x2, 3x3): rows 0 and 3 of G are g0 and g2; row 1 is their mean with g1.
        2 => &[[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [-1.0, 2.0, 0.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]],
        // F(4x4, 3x3): g0 = 4 r0, g2 = r5, g1 = 12 r3 - g0 / 2 - 2 g2.
        4 => &[[4.0, 0.0, 0.0, 0.0, 0.0, 0.0], [-2.0, 0.0, 0.0, 12.0, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]],
        t => return Err(format!("Winograd tile {t} is not 2 or 4")),
    };
    let a = tile + 2;
    let &[a0, a1, k_out, c_in] = u.shape() else { return Err("a Winograd weight is rank 4".into()) };
    if a0 != a || a1 != a {
        return Err(format!("Winograd weight shape {:?} does not match tile {tile}", u.shape()));
    }
    let uv = u.to_f64();
    let mut g = vec![0.0; k_out * c_in * 9];
    for k in 0..k_out {
        for c in 0..c_in {
            for p in 0..3 {
                for q in 0..3 {
                    let mut s = 0.0;
                    for i in 0..a {
                        for j in 0..a {
                            s += l[p][i] * uv[((i * a + j) * k_out + k) * c_in + c] * l[q][j];
                        }
                    }
                    g[(k * c_in + c) * 9 + p * 3 + q] = s;
                }
            }
        }
    }
    let g = Tensor::from_f64(TensorType::new(vec![k_out, c_in, 3, 3], Scalar::F32), g);
    // Only a transformed 3x3 kernel has a 3x3 kernel behind it.
    let back = aoc_ir::ops::winograd::transform_weight(&g, tile)?;
    let scale = uv.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    if back.to_f64().iter().zip(&uv).any(|(a, b)| (a - b).abs() > 1e-4 * scale) {
        return Err("the Winograd weight is not the transform of a 3x3 kernel, so it has no plain convolution".to_string());
    }
    Ok(g)
}

impl<'c, 'a, 'w> Ex<'c, 'a, 'w> {
    // ------------------------------------------------------------ reductions

    /// `tosa.reduce_*` over each of `axes` (kept as size 1).
    pub(super) fn reduce(&self, name: &str, x: &V<'c, 'a>, axes: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let mut v = x.clone();
        for &a in axes {
            let mut shape = v.t.shape.clone();
            shape[a] = 1;
            v = self.op1(name, &[&v], v.t.with_shape(shape), &[("axis", self.attr(&format!("{a} : i32"))?)], loc)?;
        }
        Ok(v)
    }

    pub(super) fn mean(&mut self, x: &V<'c, 'a>, axes: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let s = self.reduce("tosa.reduce_sum", x, axes, loc)?;
        let n: usize = axes.iter().map(|&a| x.t.shape[a]).product();
        let c = self.splat(n as f64, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.div(&s, &c, loc)
    }

    pub(super) fn softmax(&mut self, x: &V<'c, 'a>, axis: usize, log: bool, loc: Location<'c>) -> R<V<'c, 'a>> {
        let m = self.reduce("tosa.reduce_max", x, &[axis], loc)?;
        let d = self.arith("tosa.sub", x, &m, loc)?;
        let e = self.unary("tosa.exp", &d, loc)?;
        let s = self.reduce("tosa.reduce_sum", &e, &[axis], loc)?;
        if log {
            let l = self.unary("tosa.log", &s, loc)?;
            self.arith("tosa.sub", &d, &l, loc)
        } else {
            self.div(&e, &s, loc)
        }
    }

    // ------------------------------------------------------------ compute

    /// Numpy-style matmul of ranks >= 2 as 3-D `tosa.matmul`.
    pub(super) fn matmul(&mut self, a: &V<'c, 'a>, b: &V<'c, 'a>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let zp = self.splat(0.0, a.t.elem.storage(), &[1], loc)?;
        let (ra, rb) = (a.t.rank(), b.t.rank());
        if ra < 2 || rb < 2 {
            return Err("error: matmuls of 1-D operands are not supported by the MLIR export".into());
        }
        let (m, k, n) = (a.t.shape[ra - 2], a.t.shape[ra - 1], b.t.shape[rb - 1]);
        let elem = a.t.elem.clone();
        let r = if rb == 2 {
            let batch: usize = a.t.shape[..ra - 2].iter().product();
            let a3 = self.reshape(a, &[1, batch * m, k], loc)?;
            let b3 = self.reshape(b, &[1, k, n], loc)?;
            self.op1("tosa.matmul", &[&a3, &b3, &zp, &zp], TensorType { shape: vec![1, batch * m, n], elem, encoding: None }, &[], loc)?
        } else {
            let batch_shape = broadcast(&a.t.shape[..ra - 2], &b.t.shape[..rb - 2]);
            let batch: usize = batch_shape.iter().product();
            let mut sa = batch_shape.clone();
            sa.extend([m, k]);
            let mut sb = batch_shape.clone();
            sb.extend([k, n]);
            let a3 = self.expand(a, &sa, loc)?;
            let b3 = self.expand(b, &sb, loc)?;
            let a3 = self.reshape(&a3, &[batch, m, k], loc)?;
            let b3 = self.reshape(&b3, &[batch, k, n], loc)?;
            self.op1("tosa.matmul", &[&a3, &b3, &zp, &zp], TensorType { shape: vec![batch, m, n], elem, encoding: None }, &[], loc)?
        };
        self.reshape(&r, out, loc)
    }

    pub(super) fn gemm(&mut self, attrs: &Attrs, a: &V<'c, 'a>, b: &V<'c, 'a>, c: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let a = if boolean(attrs, "trans_a") { self.transpose(a, &[1, 0], loc)? } else { a.clone() };
        let b = if boolean(attrs, "trans_b") { self.transpose(b, &[1, 0], loc)? } else { b.clone() };
        let mut y = self.matmul(&a, &b, out, loc)?;
        let alpha = float(attrs, "alpha").unwrap_or(1.0);
        if alpha != 1.0 {
            y = self.mul_scalar(&y, alpha, loc)?;
        }
        if let Some(c) = c {
            let beta = float(attrs, "beta").unwrap_or(1.0);
            let c = if beta != 1.0 { self.mul_scalar(c, beta, loc)? } else { c.clone() };
            y = self.arith("tosa.add", &y, &c, loc)?;
        }
        Ok(y)
    }

    /// TOSA pads `[top, bottom, left, right]` giving exactly `out` rows and
    /// columns (TOSA wants the window arithmetic to divide evenly; aoc
    /// floors, or ceils for `ceil_mode`): the bottom and right pads are
    /// adjusted, and an input with rows no window reads is cropped first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn window(
        &self,
        x: &V<'c, 'a>,
        kernel: [usize; 2],
        strides: [usize; 2],
        dil: [usize; 2],
        pads: &[i64],
        out: [usize; 2],
        loc: Location<'c>,
    ) -> R<(V<'c, 'a>, [i64; 4])> {
        // x is NHWC here.
        let mut tosa = [0i64; 4];
        let mut crop = [x.t.shape[1], x.t.shape[2]];
        for d in 0..2 {
            let size = x.t.shape[1 + d] as i64;
            let begin = pads.get(d).copied().unwrap_or(0);
            let span = (kernel[d] as i64 - 1) * dil[d] as i64 + 1;
            let end = (out[d] as i64 - 1) * strides[d] as i64 + span - size - begin;
            if end < 0 {
                crop[d] = (size + end) as usize;
                tosa[2 * d + 1] = 0;
            } else {
                tosa[2 * d + 1] = end;
            }
            tosa[2 * d] = begin;
        }
        let x = if crop != [x.t.shape[1], x.t.shape[2]] {
            let shape = vec![x.t.shape[0], crop[0], crop[1], x.t.shape[3]];
            let start = self.shape_const(&[0, 0, 0, 0], loc)?;
            let size = self.shape_const(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), loc)?;
            let t = x.t.with_shape(shape);
            let ty = types::tensor(self.ctx, &t)?;
            V { v: self.emit("tosa.slice", &[x.v, start, size], &[ty], &[], loc)?[0], t }
        } else {
            x.clone()
        };
        Ok((x, tosa))
    }

    pub(super) fn arr(&self, v: &[i64]) -> R<Attribute<'c>> {
        self.attr(&format!("array<i64: {}>", v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")))
    }

    pub(super) fn acc(&self, s: Scalar) -> R<Attribute<'c>> {
        let t = if s.is_float() { s.name().to_string() } else { "i32".to_string() };
        Ok(TypeAttribute::new(Type::parse(self.ctx, &t).ok_or_else(|| internal("acc type"))?).into())
    }

    /// `core.conv2d` (NCHW, OIHW) as `tosa.conv2d` or `tosa.depthwise_conv2d`.
    pub(super) fn conv(&mut self, attrs: &Attrs, x: &V<'c, 'a>, w: &V<'c, 'a>, b: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.rank() != 4 {
            return Err("error: only 2-D convolutions (rank-4 tensors) map to TOSA".into());
        }
        let s = x.t.elem.storage();
        let groups = int(attrs, "groups", 1) as usize;
        let (cin, cout, kh, kw) = (x.t.shape[1], w.t.shape[0], w.t.shape[2], w.t.shape[3]);
        let strides = ints(attrs, "strides");
        let dil = ints(attrs, "dilations");
        let pads = ints(attrs, "pads");
        let xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        let st = [strides[0] as usize, strides[1] as usize];
        let dl = [dil[0] as usize, dil[1] as usize];
        let (xs, pad) = self.window(&xs, [kh, kw], st, dl, &[pads[0], pads[1]], [out[2], out[3]], loc)?;
        let bias = match b {
            Some(b) => b.clone(),
            None => self.splat(0.0, s, &[cout], loc)?,
        };
        let zp = self.splat(0.0, s, &[1], loc)?;
        let nhwc = vec![out[0], out[2], out[3], out[1]];
        let t = x.t.with_shape(nhwc);
        let common = [
            ("pad", self.arr(&pad)?),
            ("stride", self.arr(&strides)?),
            ("dilation", self.arr(&dil)?),
            ("acc_type", self.acc(s)?),
        ];
        let y = if groups == 1 {
            let wt = self.transpose(w, &[0, 2, 3, 1], loc)?;
            self.op1("tosa.conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &common, loc)?
        } else if groups == cin && cout % cin == 0 && w.t.shape[1] == 1 {
            let mult = cout / cin;
            let wr = self.reshape(w, &[cin, mult, kh, kw], loc)?;
            let wt = self.transpose(&wr, &[2, 3, 0, 1], loc)?;
            self.op1("tosa.depthwise_conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &common, loc)?
        } else if groups > 1 && cin % groups == 0 && cout % groups == 0 {
            // Grouped: one tosa.conv2d per group on its channel slices, concatenated.
            let (gi, go) = (cin / groups, cout / groups);
            let wt = self.transpose(w, &[0, 2, 3, 1], loc)?;
            let mut parts = vec![];
            for g in 0..groups {
                let xg = self.slice_axis(&xs, 3, (g * gi) as i64, 1, gi, loc)?;
                let wg = self.slice_axis(&wt, 0, (g * go) as i64, 1, go, loc)?;
                let bg = self.slice_axis(&bias, 0, (g * go) as i64, 1, go, loc)?;
                let tg = t.with_shape(vec![out[0], out[2], out[3], go]);
                parts.push(self.op1("tosa.conv2d", &[&xg, &wg, &bg, &zp, &zp], tg, &common, loc)?);
            }
            let refs: Vec<&V<'c, 'a>> = parts.iter().collect();
            self.op1("tosa.concat", &refs, t, &[("axis", self.attr("3 : i32")?)], loc)?
        } else {
            return Err(format!("error: grouped convolutions (groups = {groups}) whose channels do not divide evenly are not supported by the MLIR export"));
        };
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    pub(super) fn conv_transpose(&mut self, attrs: &Attrs, x: &V<'c, 'a>, w: &V<'c, 'a>, b: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let s = x.t.elem.storage();
        if int(attrs, "groups", 1) != 1 || ints(attrs, "dilations").iter().any(|&d| d != 1) {
            return Err("error: grouped or dilated transposed convolutions are not supported by the MLIR export".into());
        }
        let pads = ints(attrs, "pads");
        let op = ints(attrs, "output_padding");
        let out_pad = [-pads[0], -pads[2] + op.first().copied().unwrap_or(0), -pads[1], -pads[3] + op.get(1).copied().unwrap_or(0)];
        let xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        let wt = self.transpose(w, &[1, 2, 3, 0], loc)?;
        let cout = wt.t.shape[0];
        let bias = match b {
            Some(b) => b.clone(),
            None => self.splat(0.0, s, &[cout], loc)?,
        };
        let zp = self.splat(0.0, s, &[1], loc)?;
        let t = x.t.with_shape(vec![out[0], out[2], out[3], out[1]]);
        let attrs = [("out_pad", self.arr(&out_pad)?), ("stride", self.arr(&ints(attrs, "strides"))?), ("acc_type", self.acc(s)?)];
        let y = self.op1("tosa.transpose_conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &attrs, loc)?;
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    pub(super) fn pool(&mut self, p: Pool, attrs: &Attrs, x: &V<'c, 'a>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        match p {
            Pool::GlobalAvg | Pool::GlobalMax => {
                let axes: Vec<usize> = (2..x.t.rank()).collect();
                return if p == Pool::GlobalAvg { self.mean(x, &axes, loc) } else { self.reduce("tosa.reduce_max", x, &axes, loc) };
            }
            Pool::Max | Pool::Avg => {}
        }
        if x.t.rank() != 4 {
            return Err("error: only 2-D pools (rank-4 tensors) map to TOSA".into());
        }
        if ints(attrs, "dilations").iter().any(|&d| d != 1) {
            return Err("error: dilated pools are not supported by TOSA".into());
        }
        let k = ints(attrs, "kernel");
        let strides = ints(attrs, "strides");
        let mut pads = ints(attrs, "pads");
        let mut xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        if p == Pool::Avg && boolean(attrs, "count_include_pad") && pads.iter().any(|&p| p != 0) {
            // TOSA leaves padding out of the count: pad explicitly with zeros.
            let padding = [0, 0, pads[0], pads[2], pads[1], pads[3], 0, 0];
            let sh = self.shape_const(&padding, loc)?;
            let pc = self.splat(0.0, xs.t.elem.storage(), &[1], loc)?;
            let shape = vec![xs.t.shape[0], xs.t.shape[1] + (pads[0] + pads[2]) as usize, xs.t.shape[2] + (pads[1] + pads[3]) as usize, xs.t.shape[3]];
            let t = xs.t.with_shape(shape);
            let ty = types::tensor(self.ctx, &t)?;
            xs = V { v: self.emit("tosa.pad", &[xs.v, sh, pc.v], &[ty], &[], loc)?[0], t };
            pads = vec![0, 0, 0, 0];
        }
        let (xs, pad) = self.window(&xs, [k[0] as usize, k[1] as usize], [strides[0] as usize, strides[1] as usize], [1, 1], &[pads[0], pads[1]], [out[2], out[3]], loc)?;
        let t = x.t.with_shape(vec![out[0], out[2], out[3], out[1]]);
        let common = [("kernel", self.arr(&k)?), ("stride", self.arr(&strides)?), ("pad", self.arr(&pad)?)];
        let y = if p == Pool::Max {
            self.op1("tosa.max_pool2d", &[&xs], t, &common, loc)?
        } else {
            let s = x.t.elem.storage();
            let zp = self.splat(0.0, s, &[1], loc)?;
            let mut attrs = common.to_vec();
            attrs.push(("acc_type", self.acc(s)?));
            self.op1("tosa.avg_pool2d", &[&xs, &zp, &zp], t, &attrs, loc)?
        };
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    // ------------------------------------------------------------ quant

    pub(super) fn dcast(&self, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        match &x.t.elem {
            ElemType::Quant(q) => {
                let t = x.t.with_elem(q.expressed);
                self.op1("quant.dcast", &[x], t, &[], loc)
            }
            ElemType::Scalar(_) => Ok(x.clone()),
        }
    }

    pub(super) fn qcast(&self, x: &V<'c, 'a>, t: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        self.op1("quant.qcast", &[x], t.clone(), &[], loc)
    }

    /// ONNX-style `core.slice` (negative starts, any steps) as TOSA:
    /// `tosa.slice` for step 1; `tosa.reverse` first for negative steps;
    /// a step `k > 1` takes a slice of `len * k` (padded at the end where
    /// it runs past), reshapes the axis to `[len, k]` and keeps index 0.
    pub(super) fn slice(&mut self, attrs: &Attrs, x: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let r = x.t.rank();
        let starts = ints(attrs, "starts");
        let axes: Vec<usize> = match attrs.get("axes") {
            Some(Attr::Ints(a)) => a.iter().map(|&a| norm_axis(a, r)).collect(),
            _ => (0..starts.len()).collect(),
        };
        let steps = ints(attrs, "steps");
        let mut y = x.clone();
        for (i, &a) in axes.iter().enumerate() {
            let d = y.t.shape[a] as i64;
            let len = out.shape[a];
            let mut step = steps.get(i).copied().unwrap_or(1);
            let s = starts[i];
            let s = if s < 0 { s + d } else { s };
            let mut start = if step > 0 { s.clamp(0, d) } else { s.clamp(0, (d - 1).max(0)) };
            if step < 0 {
                y = self.op1("tosa.reverse", &[&y], y.t.clone(), &[("axis", self.attr(&format!("{a} : i32"))?)], loc)?;
                start = d - 1 - start;
                step = -step;
            }
            y = self.slice_axis(&y, a, start, step as usize, len, loc)?;
        }
        if y.t.shape != out.shape {
            return Err(internal(format!("slice to {:?}, expected {:?}", y.t.shape, out.shape)));
        }
        if y.v == x.v {
            return self.unary("tosa.identity", x, loc);
        }
        Ok(y)
    }

    /// `core.pad`: negative amounts crop first (`tosa.slice`); constant
    /// padding is `tosa.pad`; `reflect`, `edge` and `wrap` concatenate
    /// reversed, broadcast or wrapped slices along each padded axis.
    /// `None` when a reflect or wrap pad is wider than its dimension.
    pub(super) fn pad(&mut self, attrs: &Attrs, x: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<Option<V<'c, 'a>>> {
        let mode = match attrs.get("mode") {
            Some(Attr::Str(s)) => s.clone(),
            _ => "constant".to_string(),
        };
        let pads = ints(attrs, "pads");
        let r = x.t.rank();
        let mut y = x.clone();
        for a in 0..r {
            let (b, e) = (pads[a], pads[r + a]);
            if b < 0 || e < 0 {
                let d = y.t.shape[a] as i64;
                let start = (-b).max(0);
                let len = (d - start - (-e).max(0)).max(0) as usize;
                y = self.slice_axis(&y, a, start, 1, len, loc)?;
            }
        }
        let pos: Vec<i64> = pads.iter().map(|&p| p.max(0)).collect();
        if pos.iter().any(|&p| p > 0) {
            if mode == "constant" {
                let padding: Vec<i64> = (0..r).flat_map(|d| [pos[d], pos[r + d]]).collect();
                let sh = self.shape_const(&padding, loc)?;
                let pc = self.splat(float(attrs, "value").unwrap_or(0.0), x.t.elem.storage(), &[1], loc)?;
                let ty = types::tensor(self.ctx, out)?;
                y = V { v: self.emit("tosa.pad", &[y.v, sh, pc.v], &[ty], &[], loc)?[0], t: out.clone() };
            } else {
                for a in 0..r {
                    let (b, e) = (pos[a] as usize, pos[r + a] as usize);
                    let d = y.t.shape[a];
                    if (mode == "reflect" && (b >= d || e >= d)) || (mode == "wrap" && (b > d || e > d)) || d == 0 {
                        return Ok(None);
                    }
                    let mut parts = vec![];
                    for (n, front) in [(b, true), (e, false)] {
                        if n == 0 {
                            continue;
                        }
                        let part = match (mode.as_str(), front) {
                            ("reflect", true) => self.slice_axis(&y, a, 1, 1, n, loc)?,
                            ("reflect", false) => self.slice_axis(&y, a, (d - 1 - n) as i64, 1, n, loc)?,
                            ("wrap", true) => self.slice_axis(&y, a, (d - n) as i64, 1, n, loc)?,
                            ("wrap", false) => self.slice_axis(&y, a, 0, 1, n, loc)?,
                            (_, true) => self.slice_axis(&y, a, 0, 1, 1, loc)?,
                            (_, false) => self.slice_axis(&y, a, (d - 1) as i64, 1, 1, loc)?,
                        };
                        let part = match mode.as_str() {
                            "reflect" => self.op1("tosa.reverse", &[&part], part.t.clone(), &[("axis", self.attr(&format!("{a} : i32"))?)], loc)?,
                            "wrap" => part,
                            _ => {
                                let mut shape = part.t.shape.clone();
                                shape[a] = n;
                                self.expand(&part, &shape, loc)?
                            }
                        };
                        parts.push((front, part));
                    }
                    let mut all: Vec<V<'c, 'a>> = parts.iter().filter(|p| p.0).map(|p| p.1.clone()).collect();
                    all.push(y.clone());
                    all.extend(parts.iter().filter(|p| !p.0).map(|p| p.1.clone()));
                    let mut shape = y.t.shape.clone();
                    shape[a] = d + b + e;
                    let refs: Vec<&V<'c, 'a>> = all.iter().collect();
                    y = self.op1("tosa.concat", &refs, y.t.with_shape(shape), &[("axis", self.attr(&format!("{a} : i32"))?)], loc)?;
                }
            }
        }
        if y.t.shape != out.shape {
            return Err(internal(format!("pad to {:?}, expected {:?}", y.t.shape, out.shape)));
        }
        if y.v == x.v {
            return self.unary("tosa.identity", x, loc).map(Some);
        }
        Ok(Some(y))
    }

    /// `core.resize` as `tosa.resize` where the two compute the same: 2-D
    /// on NCHW, scales equal to the size ratios, and `nearest` with
    /// asymmetric/floor or half-pixel coordinates (ties only where the
    /// nearest mode rounds them up, as TOSA does), or `linear` with
    /// half-pixel, asymmetric or align-corners coordinates. Coordinates are
    /// exact rationals: input = (output * scale_d + offset) / scale_n.
    /// `None` for the other modes.
    pub(super) fn resize(&mut self, attrs: &Attrs, x: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<Option<V<'c, 'a>>> {
        let text = |n: &str, d: &str| match attrs.get(n) {
            Some(Attr::Str(s)) => s.clone(),
            _ => d.to_string(),
        };
        let (mode, ctm, nearest) = (text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel"), text("nearest_mode", "round_prefer_floor"));
        if x.t.rank() != 4 || out.shape[..2] != x.t.shape[..2] || x.t.shape[2..].contains(&0) || out.shape[2..].contains(&0) {
            return Ok(None);
        }
        if let Some(Attr::Floats(sc)) = attrs.get("scales")
            && (2..4).any(|d| (sc.get(d).copied().unwrap_or(0.0) - out.shape[d] as f64 / x.t.shape[d] as f64).abs() > 1e-9)
        {
            return Ok(None);
        }
        let mut scale = vec![];
        let (mut offset, mut border) = (vec![], vec![]);
        for d in 2..4 {
            let (o, i) = (out.shape[d] as i64, x.t.shape[d] as i64);
            let (n, dn, off) = match (mode.as_str(), ctm.as_str()) {
                // floor(oy * I / O) = round-half-up(oy * I / O - 1/2).
                ("nearest", "asymmetric") if nearest == "floor" => (2 * o, 2 * i, -o),
                ("nearest", "half_pixel") if nearest == "round_prefer_floor" || nearest == "round_prefer_ceil" => {
                    // A tie rounds up in TOSA; refuse where ONNX would round it down.
                    if nearest == "round_prefer_floor" && (0..o).any(|y| (y * 2 * i + i - o).rem_euclid(2 * o) == o) {
                        return Ok(None);
                    }
                    (2 * o, 2 * i, i - o)
                }
                ("linear", "half_pixel") => (2 * o, 2 * i, i - o),
                ("linear", "pytorch_half_pixel") if o > 1 => (2 * o, 2 * i, i - o),
                ("linear", "asymmetric") => (o, i, 0),
                ("linear", "align_corners") if o > 1 && i > 1 => (o - 1, i - 1, 0),
                _ => return Ok(None),
            };
            scale.extend([n, dn]);
            offset.push(off);
            border.push((o - 1) * dn - (i - 1) * n + off);
        }
        let xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        let (sc, of, bo) = (self.shape_const(&scale, loc)?, self.shape_const(&offset, loc)?, self.shape_const(&border, loc)?);
        let t = x.t.with_shape(vec![out.shape[0], out.shape[2], out.shape[3], out.shape[1]]);
        let ty = types::tensor(self.ctx, &t)?;
        let m = if mode == "nearest" { "#tosa.resize_mode<NEAREST_NEIGHBOR>" } else { "#tosa.resize_mode<BILINEAR>" };
        let y = V { v: self.emit("tosa.resize", &[xs.v, sc, of, bo], &[ty], &[("mode", self.attr(m)?)], loc)?[0], t };
        self.transpose(&y, &[0, 3, 1, 2], loc).map(Some)
    }

    /// Elements `start, start + step, ...` (`len` of them) along `axis`.
    pub(super) fn slice_axis(&mut self, x: &V<'c, 'a>, axis: usize, start: i64, step: usize, len: usize, loc: Location<'c>) -> R<V<'c, 'a>> {
        let d = x.t.shape[axis];
        if step == 1 && start == 0 && len == d {
            return Ok(x.clone());
        }
        let span = if step == 1 { len } else { len * step };
        let mut x = x.clone();
        let end = start as usize + span;
        if end > d {
            // Pad the end so the strided view is whole; the padding is never kept.
            let mut padding = vec![0i64; 2 * x.t.rank()];
            padding[2 * axis + 1] = (end - d) as i64;
            let sh = self.shape_const(&padding, loc)?;
            let pc = self.splat(0.0, x.t.elem.storage(), &[1], loc)?;
            let mut shape = x.t.shape.clone();
            shape[axis] = end;
            let t = x.t.with_shape(shape);
            let ty = types::tensor(self.ctx, &t)?;
            x = V { v: self.emit("tosa.pad", &[x.v, sh, pc.v], &[ty], &[], loc)?[0], t };
        }
        let mut begin = vec![0i64; x.t.rank()];
        begin[axis] = start;
        let mut size: Vec<i64> = x.t.shape.iter().map(|&d| d as i64).collect();
        size[axis] = span as i64;
        let (st, sz) = (self.shape_const(&begin, loc)?, self.shape_const(&size, loc)?);
        let t = x.t.with_shape(size.iter().map(|&d| d as usize).collect::<Vec<_>>());
        let ty = types::tensor(self.ctx, &t)?;
        let y = V { v: self.emit("tosa.slice", &[x.v, st, sz], &[ty], &[], loc)?[0], t };
        if step == 1 {
            return Ok(y);
        }
        let mut split = y.t.shape[..axis].to_vec();
        split.extend([len, step]);
        split.extend(&y.t.shape[axis + 1..]);
        let y = self.reshape(&y, &split, loc)?;
        let mut begin = vec![0i64; split.len()];
        begin[axis + 1] = 0;
        let mut size: Vec<i64> = split.iter().map(|&d| d as i64).collect();
        size[axis + 1] = 1;
        let (st, sz) = (self.shape_const(&begin, loc)?, self.shape_const(&size, loc)?);
        let t = y.t.with_shape(size.iter().map(|&d| d as usize).collect::<Vec<_>>());
        let ty = types::tensor(self.ctx, &t)?;
        let y = V { v: self.emit("tosa.slice", &[y.v, st, sz], &[ty], &[], loc)?[0], t };
        let mut shape = x.t.shape.clone();
        shape[axis] = len;
        self.reshape(&y, &shape, loc)
    }

    /// `core.gather` as 3-D `tosa.gather`: data `[P, A, Q]`, indices `[P, W]`.
    pub(super) fn gather(&mut self, attrs: &Attrs, data: &V<'c, 'a>, idx: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let r = data.t.rank();
        let axis = norm_axis(int(attrs, "axis", 0), r);
        let p: usize = data.t.shape[..axis].iter().product();
        let a = data.t.shape[axis];
        let q: usize = data.t.shape[axis + 1..].iter().product();
        let w = idx.t.num_elements();
        let d3 = self.reshape(data, &[p, a, q], loc)?;
        let i32t = idx.t.with_elem(Scalar::I32);
        let mut i = if idx.t.elem.storage() == Scalar::I32 { idx.clone() } else { self.op1("tosa.cast", &[idx], i32t, &[], loc)? };
        // Negative indices count from the end.
        let zero = self.splat(0.0, Scalar::I32, &vec![1; i.t.rank()], loc)?;
        let neg = self.binary("tosa.greater", &zero, &i, ElemType::I1, loc)?;
        let size = self.splat(a as f64, Scalar::I32, &vec![1; i.t.rank()], loc)?;
        let wrapped = self.arith("tosa.add", &i, &size, loc)?;
        i = self.select(&neg, &wrapped, &i, loc)?;
        let i2 = self.reshape(&i, &[1, w], loc)?;
        let i2 = self.expand(&i2, &[p, w], loc)?;
        let t = data.t.with_shape(vec![p, w, q]);
        let g = self.op1("tosa.gather", &[&d3, &i2], t, &[], loc)?;
        self.reshape(&g, &out.shape, loc)
    }
}
