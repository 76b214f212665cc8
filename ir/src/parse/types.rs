//! Types while lowering: shapes, element types, quantized types and
//! sparse encodings, with the checks the text alone can make (storage and
//! expressed types, per-axis axis and scale count against the shape, zero
//! points in range, `0 < n <= m`).

use super::ast::{self, Elem, LitKind, QuantParamsAst, Spanned};
use super::literals::{float, nearest};
use super::lower::Lowerer;
use crate::types::{ElemType, Encoding, QuantParams, QuantType, Scalar, TensorType};

impl Lowerer {
    pub(super) fn ty(&mut self, t: &ast::Type) -> Option<TensorType> {
        let mut shape = Vec::with_capacity(t.dims.len());
        let mut ok = true;
        for d in &t.dims {
            match d.text[..d.text.len() - 1].parse::<usize>() {
                Ok(n) if n <= i64::MAX as usize => shape.push(n),
                _ => {
                    self.error(
                        format!("dimension `{}` is too large", &d.text[..d.text.len() - 1]),
                        d.span,
                    );
                    ok = false;
                }
            }
        }
        if ok && let Err(m) = crate::types::checked_elements(&shape) {
            self.error(m, t.span);
            ok = false;
        }
        let elem = match &t.elem {
            Elem::Scalar(w) => self.scalar(w).map(ElemType::Scalar),
            Elem::Quant(q) => self
                .quant(q, ok.then_some(shape.as_slice()))
                .map(|q| ElemType::Quant(Box::new(q))),
        };
        let encoding = match &t.encoding {
            None => Some(None),
            Some(e) => self.encoding(e).map(Some),
        };
        match (ok, elem, encoding) {
            (true, Some(elem), Some(encoding)) => Some(TensorType {
                shape,
                elem,
                encoding,
            }),
            _ => None,
        }
    }

    pub(super) fn quant(
        &mut self,
        q: &ast::QuantAst,
        shape: Option<&[usize]>,
    ) -> Option<QuantType> {
        if q.name.text != "!quant.uniform" {
            self.error(
                format!("unknown type `{}`, expected `!quant.uniform`", q.name.text),
                q.name.span,
            );
            return None;
        }
        let storage = self.scalar(&q.storage)?;
        let expressed = self.scalar(&q.expressed)?;
        if !(storage.is_int() || matches!(storage, Scalar::F8E4M3FN | Scalar::F8E5M2)) {
            self.error(
                format!("quantized storage type must be an integer or fp8 type, found {storage}"),
                q.storage.span,
            );
            return None;
        }
        if !expressed.is_float() {
            self.error(
                format!("quantized expressed type must be a float type, found {expressed}"),
                q.expressed.span,
            );
            return None;
        }
        let mut pair = |p: &ast::ScaleZp| -> Option<(f64, i64)> {
            let scale = match p.scale.kind {
                LitKind::Float => float(p.scale.text.text),
                LitKind::Int => self.int(&p.scale.text)? as f64,
                LitKind::Bool => f64::NAN,
            };
            if !scale.is_finite() || scale == 0.0 {
                self.error(
                    format!(
                        "quantization scale must be finite and non-zero, found `{}`",
                        p.scale.text.text
                    ),
                    p.scale.text.span,
                );
                return None;
            }
            let zp = match &p.zero_point {
                Some(z) => {
                    let v = self.int(z)?;
                    if let Some((lo, hi)) = storage.int_range()
                        && !(lo..=hi).contains(&v)
                    {
                        self.error(
                            format!("zero point {v} is out of range for {storage}"),
                            z.span,
                        );
                        return None;
                    }
                    v
                }
                None => 0,
            };
            Some((scale, zp))
        };
        let params = match (&q.axis, &q.params) {
            (None, QuantParamsAst::PerTensor(p)) => {
                let (scale, zero_point) = pair(p)?;
                QuantParams::PerTensor { scale, zero_point }
            }
            (Some(axis), QuantParamsAst::PerAxis(ps, span)) => {
                let mut scales = Vec::new();
                let mut zero_points = Vec::new();
                for p in ps {
                    let (s, z) = pair(p)?;
                    scales.push(s);
                    zero_points.push(z);
                }
                let a = self.int(axis)?;
                let shape = shape?;
                let Some(axis_u) = usize::try_from(a).ok().filter(|&a| a < shape.len()) else {
                    self.error(
                        format!(
                            "quantization axis {a} is out of range for rank {}",
                            shape.len()
                        ),
                        q.span,
                    );
                    return None;
                };
                if scales.len() != shape[axis_u] {
                    self.error(
                        format!(
                            "per-axis quantization along axis {a} needs {} scales (the dimension's size), found {}",
                            shape[axis_u],
                            scales.len()
                        ),
                        *span,
                    );
                    return None;
                }
                QuantParams::PerAxis {
                    axis: axis_u,
                    scales,
                    zero_points,
                }
            }
            (Some(axis), QuantParamsAst::PerTensor(_)) => {
                self.error(
                    "a quantization axis needs a `{scale:zero_point, ...}` list",
                    axis.span,
                );
                return None;
            }
            (None, QuantParamsAst::PerAxis(_, span)) => {
                self.error(
                    "a list of scales needs an axis: `!quant.uniform<i8:f32:AXIS, {...}>`",
                    *span,
                );
                return None;
            }
        };
        Some(QuantType {
            storage,
            expressed,
            params,
        })
    }

    pub(super) fn encoding(&mut self, e: &ast::EncodingAst) -> Option<Encoding> {
        if e.name.text != "#sparse.nm" {
            self.error(
                format!("unknown encoding `{}`, expected `#sparse.nm`", e.name.text),
                e.name.span,
            );
            return None;
        }
        let [n, m] = e.args.as_slice() else {
            self.error(
                format!("#sparse.nm takes 2 integers (n, m), found {}", e.args.len()),
                e.span,
            );
            return None;
        };
        let (n, m) = (self.int(n)?, self.int(m)?);
        if !(0 < n && n <= m && m <= u32::MAX as i64) {
            self.error(
                format!("#sparse.nm<{n}, {m}> must satisfy 0 < n <= m"),
                e.span,
            );
            return None;
        }
        Some(Encoding::NM {
            n: n as u32,
            m: m as u32,
        })
    }

    pub(super) fn scalar(&mut self, w: &Spanned) -> Option<Scalar> {
        if let Some(s) = Scalar::from_name(w.text) {
            return Some(s);
        }
        let mut msg = format!("unknown element type `{}`", w.text);
        if let Some(s) = nearest(w.text, Scalar::ALL.iter().map(|s| s.name())) {
            msg.push_str(&format!("; did you mean `{s}`?"));
        }
        self.error(msg, w.span);
        None
    }
}
