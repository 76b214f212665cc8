//! Data movement: reshapes (no copy in the identity order), transposes (a
//! relabelling of the physical order, no copy), and strided copies for
//! concat, slice, pad, expand and gather.

use aoc_ir::attr::Attr;
use aoc_ir::module::OpData;
use aoc_ir::ops::shape::slice_plan_of;
use aoc_ir::types::{Scalar, TensorType};
use aoc_plan::plan::{Buf, Step};

use super::{Lower, Val, elem_size, identity, logical_strides, row_major};

impl Lower<'_> {
    pub(crate) fn lower_reshape(&mut self, op: &OpData) -> Result<bool, String> {
        let x = op.operands[0];
        let r = self.ty(op.results[0]).rank();
        let xb = self.materialize(x, &identity(self.ty(x).rank()))?;
        self.define(op.results[0], xb, identity(r));
        Ok(true)
    }

    pub(crate) fn lower_transpose(&mut self, op: &OpData) -> Result<bool, String> {
        let x = op.operands[0];
        let rank = self.ty(x).rank();
        let perm: Vec<usize> = match op.attrs.get("perm") {
            Some(Attr::Ints(p)) if p.len() == rank => p.iter().map(|&d| d as usize).collect(),
            _ => return Ok(false),
        };
        // Output logical dim i is input logical dim perm[i].
        let mut inv = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let (buf, in_perm) = match self.val(x)? {
            Val::Mem { buf, perm } => (buf, perm),
            Val::Const(_) => (self.materialize(x, &identity(rank))?, identity(rank)),
        };
        let out_perm: Vec<usize> = in_perm.iter().map(|&d| inv[d]).collect();
        self.define(op.results[0], buf, out_perm);
        Ok(true)
    }

    /// Copies value `v` (any order) into `dst` viewed with element strides
    /// `dst_strides` per logical dimension of `v`, starting `dst_elem`
    /// elements into `dst`.
    fn copy_value_into(&mut self, v: aoc_ir::module::ValueId, dst: Buf, dst_strides: &[u64], dst_elem: u64) -> Result<(), String> {
        let ty = self.ty(v).clone();
        let (src, perm) = match self.val(v)? {
            Val::Mem { buf, perm } => (buf, perm),
            Val::Const(t) => (self.add_tensor("const", &t), identity(ty.rank())),
        };
        let ls = logical_strides(&ty.shape, &perm);
        let es = elem_size(ty.elem.storage());
        let mut d = dst;
        d.offset += dst_elem * es;
        d.len -= dst_elem * es;
        self.push(Step::Copy {
            src,
            dst: d,
            elem_size: es,
            shape: ty.shape.iter().map(|&s| s as u64).collect(),
            src_start: 0,
            src_strides: ls.iter().map(|&s| s as i64).collect(),
            dst_strides: dst_strides.to_vec(),
        });
        Ok(())
    }

    pub(crate) fn lower_concat(&mut self, op: &OpData) -> Result<bool, String> {
        let yt = self.ty(op.results[0]).clone();
        let r = yt.rank();
        let axis = match op.attrs.get("axis") {
            Some(Attr::Int(a)) => aoc_ir::ops::normalize_axis(*a, r)?,
            _ => return Ok(false),
        };
        // Keep a shared non-identity order (NHWC channel concat).
        let perms: Vec<Vec<usize>> = op
            .operands
            .iter()
            .filter_map(|v| match self.vals.get(v) {
                Some(Val::Mem { perm, .. }) => Some(perm.clone()),
                _ => None,
            })
            .collect();
        let perm = match perms.first() {
            Some(p) if perms.iter().all(|q| q == p) => p.clone(),
            _ => identity(r),
        };
        let y = self.alloc(&yt)?;
        let ys = logical_strides(&yt.shape, &perm);
        let mut at = 0u64;
        for &v in &op.operands {
            let len = self.ty(v).shape[axis] as u64;
            if len > 0 {
                self.copy_value_into(v, y, &ys, at * ys[axis])?;
            }
            at += len;
        }
        self.define(op.results[0], y, perm);
        Ok(true)
    }

    pub(crate) fn lower_slice(&mut self, op: &OpData) -> Result<bool, String> {
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let attrs = Lower::attrs(op)?;
        let plan = slice_plan_of(&attrs, &xt.shape)?;
        let (src, perm) = match self.val(x)? {
            Val::Mem { buf, perm } => (buf, perm),
            Val::Const(_) => (self.materialize(x, &identity(xt.rank()))?, identity(xt.rank())),
        };
        let ls = logical_strides(&xt.shape, &perm);
        let y = self.alloc(&yt)?;
        if yt.num_elements() == 0 {
            self.define(op.results[0], y, identity(yt.rank()));
            return Ok(true);
        }
        let start: i64 = plan.iter().zip(&ls).map(|(&(s, _, _), &st)| s * st as i64).sum();
        let shape: Vec<u64> = yt.shape.iter().map(|&d| d as u64).collect();
        self.push(Step::Copy {
            src,
            dst: y,
            elem_size: elem_size(xt.elem.storage()),
            shape: shape.clone(),
            src_start: start as u64,
            src_strides: plan.iter().zip(&ls).map(|(&(_, step, _), &st)| step * st as i64).collect(),
            dst_strides: row_major(&shape),
        });
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }

    pub(crate) fn lower_pad(&mut self, op: &OpData) -> Result<bool, String> {
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let pads = match attrs.get("pads") {
            Some(Attr::Ints(p)) => p.clone(),
            _ => return Ok(false),
        };
        let r = xt.rank();
        let mode = match attrs.get("mode") {
            Some(Attr::Str(m)) => m.clone(),
            _ => "constant".to_string(),
        };
        if mode != "constant" && pads.len() == 2 * r {
            return self.lower_pad_gathers(op, &pads, &mode);
        }
        if mode != "constant" || pads.len() != 2 * r || pads.iter().any(|&p| p < 0) {
            return Ok(false);
        }
        let value = match attrs.get("value") {
            Some(Attr::Float(v)) => *v,
            _ => 0.0,
        };
        let s = yt.elem.storage();
        let bits = match s {
            Scalar::F32 => (value as f32).to_bits() as u64,
            Scalar::F64 => value.to_bits(),
            _ if s.is_int() || s.is_bool() => value as i64 as u64,
            _ => return Ok(false),
        };
        let y = self.alloc(&yt)?;
        self.push(Step::Fill { dst: y, elem_size: elem_size(s), bits });
        let ys = logical_strides(&yt.shape, &identity(r));
        let start: u64 = (0..r).map(|d| pads[d] as u64 * ys[d]).sum();
        if xt.num_elements() > 0 {
            self.copy_value_into(x, y, &ys, start)?;
        }
        self.define(op.results[0], y, identity(r));
        Ok(true)
    }

    /// A `reflect`, `edge` or `wrap` pad (negative pads crop) as one gather
    /// per dimension it changes, each with constant indices from the
    /// interpreter's own index rule (`pad_source_index`): native on every
    /// backend that gathers.
    fn lower_pad_gathers(&mut self, op: &OpData, pads: &[i64], mode: &str) -> Result<bool, String> {
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let r = xt.rank();
        let changed: Vec<usize> = (0..r).filter(|&d| pads[d] != 0 || pads[r + d] != 0).collect();
        if changed.is_empty() || yt.num_elements() == 0 {
            return Ok(false);
        }
        let mut cur = self.materialize(x, &identity(r))?;
        let mut shape = xt.shape.clone();
        for (i, &d) in changed.iter().enumerate() {
            let len = shape[d];
            let out_len = yt.shape[d];
            let mut idx = Vec::with_capacity(out_len * 8);
            for o in 0..out_len {
                let src = aoc_ir::ops::shape::pad_source_index(o, pads[d], pads[r + d], len, mode)?
                    .ok_or_else(|| format!("core.pad: mode {mode:?} left position {o} of dimension {d} without a source"))?;
                idx.extend_from_slice(&(src as i64).to_le_bytes());
            }
            let ib = self.add_weight("pad_idx", Scalar::I64, &[out_len as u64], idx);
            let outer = shape[..d].iter().product::<usize>() as u64;
            let inner = shape[d + 1..].iter().product::<usize>() as u64;
            shape[d] = out_len;
            let ty = if i + 1 == changed.len() { yt.clone() } else { TensorType { shape: shape.clone(), ..yt.clone() } };
            let out = self.alloc(&ty)?;
            self.push(Step::Gather {
                data: cur,
                indices: ib,
                out,
                elem_size: elem_size(xt.elem.storage()),
                outer,
                axis: len as u64,
                inner,
                count: out_len as u64,
            });
            cur = out;
        }
        self.define(op.results[0], cur, identity(r));
        Ok(true)
    }

    pub(crate) fn lower_expand(&mut self, op: &OpData) -> Result<bool, String> {
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let (src, perm) = match self.val(x)? {
            Val::Mem { buf, perm } => (buf, perm),
            Val::Const(_) => (self.materialize(x, &identity(xt.rank()))?, identity(xt.rank())),
        };
        let ls = logical_strides(&xt.shape, &perm);
        let off = yt.rank() - xt.rank();
        let src_strides: Vec<i64> = (0..yt.rank())
            .map(|d| if d < off || xt.shape[d - off] == 1 { 0 } else { ls[d - off] as i64 })
            .collect();
        let shape: Vec<u64> = yt.shape.iter().map(|&d| d as u64).collect();
        let y = self.alloc(&yt)?;
        self.push(Step::Copy {
            src,
            dst: y,
            elem_size: elem_size(xt.elem.storage()),
            shape: shape.clone(),
            src_start: 0,
            src_strides,
            dst_strides: row_major(&shape),
        });
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }

    pub(crate) fn lower_gather(&mut self, op: &OpData) -> Result<bool, String> {
        let (data, idx) = (op.operands[0], op.operands[1]);
        let (dt, it, yt) = (self.ty(data).clone(), self.ty(idx).clone(), self.ty(op.results[0]).clone());
        let axis = match op.attrs.get("axis") {
            Some(Attr::Int(a)) => aoc_ir::ops::normalize_axis(*a, dt.rank())?,
            None => 0,
            _ => return Ok(false),
        };
        let db = self.materialize(data, &identity(dt.rank()))?;
        let ib = match self.constant(idx) {
            Some(t) => {
                // Store constant indices as i64 whatever their type.
                let v: Vec<u8> = t.to_i64().iter().flat_map(|i| i.to_le_bytes()).collect();
                let shape: Vec<u64> = it.shape.iter().map(|&d| d as u64).collect();
                self.add_weight("gather_idx", Scalar::I64, &shape, v)
            }
            None if it.elem.storage() == Scalar::I64 => self.materialize(idx, &identity(it.rank()))?,
            None => return Ok(false),
        };
        let y = self.alloc(&yt)?;
        self.push(Step::Gather {
            data: db,
            indices: ib,
            out: y,
            elem_size: elem_size(dt.elem.storage()),
            outer: dt.shape[..axis].iter().product::<usize>() as u64,
            axis: dt.shape[axis] as u64,
            inner: dt.shape[axis + 1..].iter().product::<usize>() as u64,
            count: it.num_elements() as u64,
        });
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }
}
