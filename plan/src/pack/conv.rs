//! The weight layouts of the convolution steps, and the checked geometry
//! ([`ConvDims`]) both their packing here and the runtime's convolution,
//! pooling and Winograd kernels work from:
//! - [`conv2d_pack_weights`]: `Step::Conv2d`, per group a [`pack_b`] matrix
//!   with rows in `(kh, kw, c)` order;
//! - [`depthwise_pack_weights`]: `Step::DepthwiseConv2d`, `kh × kw × oc`;
//! - [`conv_transpose2d_pack_weights`]: `Step::ConvTranspose2d`, per input
//!   channel its taps' output channels, row major.
//!
//! Invariants: the functions never panic on bad arguments (they return
//! [`PackError`]); a geometry [`ConvDims::new`] accepts has non-zero kernel,
//! strides and dilations and tensor sizes that fit in memory, so the
//! kernels index with plain `usize` arithmetic.

use super::{PackError, pack_b, packed_len, perr, product};
use crate::plan::ConvGeom;

/// A [`ConvGeom`] converted to `usize` and checked for the properties every
/// kernel and every weight layout relies on: non-zero kernel, strides and dilations, and tensor
/// sizes that fit in memory.
#[derive(Clone, Copy, Debug)]
pub struct ConvDims {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub oh: usize,
    pub ow: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Top, left, bottom, right.
    pub pads: [usize; 4],
    pub group: usize,
    /// Elements of `x` (`n·h·w·c`) and of `y` (`n·oh·ow·oc`).
    pub x_len: usize,
    pub y_len: usize,
}

impl ConvDims {
    pub fn new(g: &ConvGeom) -> Result<ConvDims, PackError> {
        let u = |v: u64| {
            usize::try_from(v).map_err(|_| perr(format!("geometry value {v} is too large")))
        };
        let (stride, dilation) = (
            [u(g.stride[0])?, u(g.stride[1])?],
            [u(g.dilation[0])?, u(g.dilation[1])?],
        );
        let pads = [u(g.pads[0])?, u(g.pads[1])?, u(g.pads[2])?, u(g.pads[3])?];
        let (kh, kw) = (u(g.kh)?, u(g.kw)?);
        if kh == 0 || kw == 0 {
            return Err(perr(format!(
                "kernel size must be non-zero, found {kh}x{kw}"
            )));
        }
        if stride.contains(&0) {
            return Err(perr(format!(
                "strides must be at least 1, found {stride:?}"
            )));
        }
        if dilation.contains(&0) {
            return Err(perr(format!(
                "dilations must be at least 1, found {dilation:?}"
            )));
        }
        let (n, h, w, c) = (u(g.n)?, u(g.h)?, u(g.w)?, u(g.c)?);
        let (oh, ow, oc) = (u(g.oh)?, u(g.ow)?, u(g.oc)?);
        let group = u(g.group)?;
        // Spans and padded sizes are computed in usize below; keep them far
        // from overflow.
        for v in [kh, kw, pads[0], pads[1], pads[2], pads[3], h, w] {
            if v > u32::MAX as usize {
                return Err(perr(format!("geometry value {v} is too large")));
            }
        }
        for v in [stride[0], stride[1], dilation[0], dilation[1]] {
            if v > u32::MAX as usize {
                return Err(perr(format!("geometry value {v} is too large")));
            }
        }
        Ok(ConvDims {
            n,
            h,
            w,
            c,
            oh,
            ow,
            oc,
            kh,
            kw,
            stride,
            dilation,
            pads,
            group,
            x_len: product("input", &[n, h, w, c])?,
            y_len: product("output", &[n, oh, ow, oc])?,
        })
    }

    /// Checks that `group` divides both channel counts.
    pub fn check_groups(&self) -> Result<(), PackError> {
        if self.group == 0 {
            return Err(perr("group must be at least 1, found 0".into()));
        }
        if !self.c.is_multiple_of(self.group) || !self.oc.is_multiple_of(self.group) {
            return Err(perr(format!(
                "channels {} (input) and {} (output) must be multiples of group {}",
                self.c, self.oc, self.group
            )));
        }
        Ok(())
    }

    /// Checks `oh`, `ow` against the convolution output-size formula.
    pub fn check_conv_out(&self) -> Result<(), PackError> {
        let eh = conv_out_size(
            self.h,
            self.kh,
            self.stride[0],
            self.dilation[0],
            self.pads[0],
            self.pads[2],
        );
        let ew = conv_out_size(
            self.w,
            self.kw,
            self.stride[1],
            self.dilation[1],
            self.pads[1],
            self.pads[3],
        );
        match (eh, ew) {
            (Some(eh), Some(ew)) if (eh, ew) == (self.oh, self.ow) => Ok(()),
            (Some(eh), Some(ew)) => Err(perr(format!(
                "output size must be {eh}x{ew} for this geometry, found {}x{}",
                self.oh, self.ow
            ))),
            _ => Err(perr(format!(
                "the window ({}x{}, dilation {:?}) is larger than the padded input ({}x{} with pads {:?})",
                self.kh, self.kw, self.dilation, self.h, self.w, self.pads
            ))),
        }
    }

    /// Input coordinate (may be negative) of output `o`, tap 0, along
    /// dimension `dim` (0 = H, 1 = W).
    #[inline]
    pub fn base(&self, o: usize, dim: usize) -> isize {
        (o * self.stride[dim]) as isize - self.pads[dim] as isize
    }
}

/// `(input + pads - span) / stride + 1`, or `None` when the window does not
/// fit in the padded input.
#[inline]
pub fn conv_out_size(
    input: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
) -> Option<usize> {
    let span = dilation * (k - 1) + 1;
    let padded = input + pad_begin + pad_end;
    (padded >= span).then(|| (padded - span) / stride + 1)
}

/// Packs OIHW convolution weights `[oc, c/group, kh, kw]` into the layout of
/// `Step::Conv2d`: per group the `(kh·kw·c/group) × (oc/group)` matrix with
/// rows in `(kh, kw, c)` order, packed by [`pack_b`], groups back to back.
pub fn conv2d_pack_weights(geom: &ConvGeom, w_oihw: &[f32]) -> Result<Vec<f32>, PackError> {
    let g = ConvDims::new(geom)?;
    g.check_groups()?;
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let kdim = product("weight", &[g.kh, g.kw, cg])?;
    let need = product("weight", &[g.oc, kdim])?;
    if w_oihw.len() != need {
        return Err(perr(format!(
            "weight [{}, {cg}, {}, {}] must hold {need} floats, found {}",
            g.oc,
            g.kh,
            g.kw,
            w_oihw.len()
        )));
    }
    let mut out = Vec::with_capacity(g.group * packed_len(kdim, mg));
    let mut mat = vec![0.0f32; kdim * mg];
    for grp in 0..g.group {
        for j in 0..mg {
            let o = grp * mg + j;
            for ci in 0..cg {
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        mat[((ky * g.kw + kx) * cg + ci) * mg + j] =
                            w_oihw[((o * cg + ci) * g.kh + ky) * g.kw + kx];
                    }
                }
            }
        }
        out.extend_from_slice(&pack_b(kdim, mg, &mat, mg)?);
    }
    Ok(out)
}

/// Packs depthwise OIHW weights `[oc, 1, kh, kw]` into `kh × kw × oc`
/// (`Step::DepthwiseConv2d`).
pub fn depthwise_pack_weights(geom: &ConvGeom, w_oihw: &[f32]) -> Result<Vec<f32>, PackError> {
    let g = ConvDims::new(geom)?;
    let taps = g.kh * g.kw;
    let need = product("weight", &[g.oc, taps])?;
    if w_oihw.len() != need {
        return Err(perr(format!(
            "weight [{}, 1, {}, {}] must hold {need} floats, found {}",
            g.oc,
            g.kh,
            g.kw,
            w_oihw.len()
        )));
    }
    let mut out = vec![0.0f32; need];
    for o in 0..g.oc {
        for t in 0..taps {
            out[t * g.oc + o] = w_oihw[o * taps + t];
        }
    }
    Ok(out)
}

/// Rearranges ONNX ConvTranspose weights `[c, oc/group, kh, kw]` into the
/// layout of `Step::ConvTranspose2d`: `group × (c/group) × kh × kw ×
/// (oc/group)`, row major (for input channel `i` of group `g`, the row
/// `g·c/group + i` of a `c × (kh·kw·oc/group)` matrix).
pub fn conv_transpose2d_pack_weights(
    geom: &ConvGeom,
    w_iohw: &[f32],
) -> Result<Vec<f32>, PackError> {
    let g = ConvDims::new(geom)?;
    g.check_groups()?;
    let mg = g.oc / g.group;
    let taps = g.kh * g.kw;
    let need = product("weight", &[g.c, mg, taps])?;
    if w_iohw.len() != need {
        return Err(perr(format!(
            "weight [{}, {mg}, {}, {}] must hold {need} floats, found {}",
            g.c,
            g.kh,
            g.kw,
            w_iohw.len()
        )));
    }
    let mut out = vec![0.0f32; need];
    for i in 0..g.c {
        for j in 0..mg {
            for t in 0..taps {
                out[(i * taps + t) * mg + j] = w_iohw[(i * mg + j) * taps + t];
            }
        }
    }
    Ok(out)
}
