// SCRATCH (deleted after the index/rows refactor): dumps the LLVM IR,
// geometries, plans and errors of a spread of index and rows kernels.
use aoc_backend_ptx::ModuleText;
use aoc_backend_ptx::kernels::{ConvGeom, index, rows};
use aoc_runtime::plan::{PoolKind, ReduceKind, ResizeMode};
use std::fmt::Write as _;

fn dense(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}
fn permute(name: &str, es: u64, ss_: &[u64], perm: &[usize]) -> (String, u64, Vec<u64>, u64, Vec<i64>, Vec<u64>) {
    let ss = dense(ss_);
    let shape: Vec<u64> = perm.iter().map(|&p| ss_[p]).collect();
    let src: Vec<i64> = perm.iter().map(|&p| ss[p] as i64).collect();
    let d = dense(&shape);
    (name.into(), es, shape, 0, src, d)
}
fn cc(name: &str, es: u64, shape: &[u64], start: u64, src: &[i64], dst: &[u64]) -> (String, u64, Vec<u64>, u64, Vec<i64>, Vec<u64>) {
    (name.into(), es, shape.to_vec(), start, src.to_vec(), dst.to_vec())
}

fn cg(nhwc: [u64; 4], oc: u64, ohw: [u64; 2], k: [u64; 2], s: [u64; 2], d: [u64; 2], pads: [u64; 4], group: u64) -> ConvGeom {
    ConvGeom { n: nhwc[0], h: nhwc[1], w: nhwc[2], c: nhwc[3], oh: ohw[0], ow: ohw[1], oc, kh: k[0], kw: k[1], stride: s, dilation: d, pads, group }
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let mut log = String::new();
    // ---------------- index: copy
    let mut m = ModuleText::new();
    let cases = vec![
        cc("cp_rank0", 4, &[], 3, &[], &[]),
        cc("cp_ones", 2, &[1, 1, 1], 5, &[7, 3, 1], &[1, 1, 1]),
        cc("cp_flat", 4, &[1000], 0, &[1], &[1]),
        cc("cp_odd", 4, &[7], 2, &[1], &[1]),
        cc("cp_slice_f16", 2, &[3, 10], 4, &[16, 1], &[10, 1]),
        permute("cp_heads", 4, &[1, 128, 12, 64], &[0, 2, 1, 3]),
        permute("cp_heads_f16", 2, &[1, 24, 6, 32], &[0, 2, 1, 3]),
        permute("cp_t2d", 4, &[40, 50], &[1, 0]),
        permute("cp_t2d_i8", 1, &[33, 70], &[1, 0]),
        permute("cp_t2d_f16", 2, &[17, 45], &[1, 0]),
        permute("cp_t2d_f64", 8, &[36, 20], &[1, 0]),
        permute("cp_t3d", 4, &[3, 40, 50], &[0, 2, 1]),
        permute("cp_nchw_nhwc", 4, &[2, 3, 20, 20], &[0, 2, 3, 1]),
        permute("cp_rank6", 4, &[2, 3, 1, 4, 5, 2], &[5, 3, 0, 2, 4, 1]),
        cc("cp_reverse", 4, &[100], 99, &[-1], &[1]),
        cc("cp_reverse_rows", 4, &[5, 64], 4 * 64, &[-64, 1], &[64, 1]),
        cc("cp_t2d_rev", 4, &[20, 30], 19, &[-1, 20], &[30, 1]),
        cc("cp_splat", 4, &[6, 32], 0, &[1, 0], &[32, 1]),
        cc("cp_splat_i8", 1, &[3, 48], 1, &[1, 0], &[48, 1]),
        cc("cp_splat_f16", 2, &[5, 24], 0, &[1, 0], &[24, 1]),
        cc("cp_splat_f64", 8, &[4, 6], 0, &[1, 0], &[6, 1]),
        cc("cp_expand", 4, &[8, 64], 0, &[0, 1], &[64, 1]),
        cc("cp_dst_stride0", 4, &[3, 4], 0, &[4, 1], &[0, 1]),
        cc("cp_overlap", 4, &[2, 3], 0, &[3, 1], &[1, 1]),
        cc("cp_gaps", 4, &[10, 3], 0, &[3, 1], &[8, 2]),
        cc("cp_empty", 4, &[3, 0, 2], 0, &[0, 0, 0], &[0, 0, 0]),
        cc("cp_elem3", 3, &[4, 5], 0, &[1, 4], &[5, 1]),
        cc("cp_elem16", 16, &[6, 3], 0, &[3, 1], &[3, 1]),
        cc("cp_elem12_t", 12, &[20, 18], 0, &[1, 20], &[18, 1]),
        cc("cp_huge", 4, &[70000, 40000], 0, &[1, 70000], &[40000, 1]),
        cc("cp_huge2", 1, &[1 << 24, 1 << 24], 0, &[1, 0], &[1 << 24, 1]),
        cc("cp_tt", 4, &[1, 12, 128, 64], 0, &[98304, 64, 768, 1], &[98304, 8192, 64, 1]),
        cc("cp-bad", 4, &[1], 0, &[1], &[1]),
        cc("cp_e1", 4, &[3], 1, &[-1], &[1]),
        cc("cp_e2", 0, &[3], 0, &[1], &[1]),
        cc("cp_e3", 4, &[3, 2], 0, &[1], &[1, 1]),
        cc("cp_e4", 4, &[1 << 40, 1 << 40], 0, &[1, 1], &[1 << 40, 1]),
    ];
    for (name, es, shape, start, src, dst) in &cases {
        let p = index::copy_plan(*es, shape, *start, src, dst);
        let g = index::copy(&mut m, name, *es, shape, *start, src, dst);
        let pg = p.as_ref().map(|p| p.geometry());
        writeln!(log, "copy {name}: {p:?} {pg:?} {g:?}").unwrap();
    }
    std::fs::write(dir.join("copy.ll"), m.finish()).unwrap();
    // ---------------- fill
    let mut m = ModuleText::new();
    let fills: Vec<(u64, u64, u64)> = vec![
        (4, 0, 7), (4, 1, 0x3f80_0000), (4, 37, 0xdead_beef), (1, 5, 0xab), (1, 1000, 0x5a),
        (2, 77, 0x1234_3c00), (8, 9, 0x0102_0304_0506_0708), (3, 11, 0xffab_cdef),
        (7, 4, 0x0011_2233_4455_6677), (9, 1, 0), (4, 1 << 42, 0), (5, 1 << 40, 3),
    ];
    for (i, (es, count, bits)) in fills.iter().enumerate() {
        let g = index::fill(&mut m, &format!("fill{i}"), *es, *count, *bits);
        writeln!(log, "fill{i}: {g:?}").unwrap();
    }
    std::fs::write(dir.join("fill.ll"), m.finish()).unwrap();
    // ---------------- gather
    let mut m = ModuleText::new();
    let gs: Vec<(u64, u64, u64, u64, u64)> = vec![
        (4, 1, 300, 768, 6), (4, 3, 7, 1, 4), (2, 2, 5, 3, 2), (8, 2, 4, 2, 3), (1, 1, 9, 20, 2),
        (4, 2, 6, 4, 6), (4, 0, 5, 4, 2), (4, 2, 0, 4, 1), (4, 2, 5, 4, 0), (4, 1, 30522, 768, 128),
        (4, 1, 10, 1 << 30, 1 << 12), (0, 1, 1, 1, 1), (4, 0, 3, 0, 0), (6, 3, 5, 7, 9),
    ];
    for (i, (es, o, a, inn, c)) in gs.iter().enumerate() {
        let g = index::gather(&mut m, &format!("ga{i}"), *es, *o, *a, *inn, *c);
        writeln!(log, "ga{i}: {g:?}").unwrap();
    }
    std::fs::write(dir.join("gather.ll"), m.finish()).unwrap();
    // ---------------- resize
    let mut m = ModuleText::new();
    let modes = [ResizeMode::Nearest, ResizeMode::BilinearHalfPixel, ResizeMode::BilinearAlignCorners, ResizeMode::BilinearAsymmetric];
    let shapes: Vec<([u64; 4], u64, u64)> = vec![
        ([2, 5, 7, 3], 9, 4), ([1, 3, 4, 16], 7, 11), ([1, 4, 3, 2], 1, 6), ([1, 2, 3, 4], 1, 5000),
        ([1, 0, 3, 4], 0, 5), ([1, 2, 2, 4], 1 << 17, 1 << 17), ([1, 0, 2, 1], 2, 4), ([1, 6000, 3, 5], 9000, 2),
    ];
    for (s, (sh, oh, ow)) in shapes.iter().enumerate() {
        for (mi, mode) in modes.iter().enumerate() {
            let [n, h, w, c] = *sh;
            let g = index::resize(&mut m, &format!("rs{s}_{mi}"), *mode, n, h, w, c, *oh, *ow);
            writeln!(log, "rs{s}_{mi}: {g:?}").unwrap();
        }
    }
    std::fs::write(dir.join("resize.ll"), m.finish()).unwrap();
    // ---------------- depthwise
    let mut m = ModuleText::new();
    let dws = vec![
        cg([2, 7, 6, 8], 8, [7, 6], [3, 3], [1, 1], [1, 1], [1; 4], 8),
        cg([1, 9, 8, 6], 6, [4, 4], [3, 3], [2, 2], [1, 1], [1, 1, 0, 0], 6),
        cg([1, 5, 5, 4], 8, [5, 5], [3, 3], [1, 1], [1, 1], [1; 4], 4),
        cg([1, 6, 5, 2], 8, [3, 3], [3, 3], [2, 2], [1, 1], [1; 4], 2),
        cg([1, 5, 6, 3], 9, [5, 6], [3, 2], [1, 1], [2, 2], [2, 1, 2, 1], 3),
        cg([1, 10, 9, 12], 12, [5, 5], [5, 5], [2, 2], [1, 1], [2; 4], 12),
        cg([0, 4, 4, 4], 4, [4, 4], [3, 3], [1, 1], [1, 1], [1; 4], 4),
        cg([64, 1024, 1024, 256], 256, [1024, 1024], [3, 3], [1, 1], [1, 1], [1; 4], 256),
        cg([1, 5, 5, 4], 16, [5, 5], [3, 3], [1, 1], [1, 1], [1; 4], 4),
        cg([1, 5, 5, 4], 12, [5, 5], [3, 3], [1, 1], [1, 1], [1; 4], 4),
        cg([2, 7, 6, 8], 8, [8, 6], [3, 3], [1, 1], [1, 1], [1; 4], 8),
        cg([2, 7, 6, 8], 8, [7, 6], [3, 3], [1, 1], [1, 1], [1; 4], 1),
        cg([2, 7, 6, 8], 8, [7, 6], [0, 3], [1, 1], [1, 1], [1; 4], 8),
    ];
    for (i, g) in dws.iter().enumerate() {
        for (b, r) in [(false, false), (true, false), (false, true), (true, true)] {
            let geo = index::depthwise_conv2d(&mut m, &format!("dw{i}_{}{}", b as u8, r as u8), g, b, r);
            writeln!(log, "dw{i}_{b}{r}: {geo:?}").unwrap();
        }
    }
    std::fs::write(dir.join("dw.ll"), m.finish()).unwrap();
    // ---------------- conv transpose
    let tg = |n: u64, h: u64, w: u64, c: u64, oc: u64, k: u64, s: u64, d: u64, pads: [u64; 4], extra: u64, group: u64| {
        let out = |i: u64, pb: u64, pe: u64| (i - 1) * s + d * (k - 1) + 1 - pb - pe + extra;
        cg([n, h, w, c], oc, [out(h, pads[0], pads[2]), out(w, pads[1], pads[3])], [k, k], [s, s], [d, d], pads, group)
    };
    let mut m = ModuleText::new();
    let mut cts = vec![
        tg(1, 4, 5, 4, 8, 3, 2, 1, [1, 1, 1, 1], 1, 2),
        tg(2, 3, 3, 6, 6, 4, 2, 1, [1, 1, 1, 1], 0, 2),
        tg(1, 3, 4, 4, 16, 2, 2, 1, [0; 4], 0, 1),
        tg(1, 4, 4, 3, 3, 3, 1, 2, [2, 1, 0, 1], 0, 3),
        tg(1, 2, 3, 8, 12, 3, 3, 1, [0, 2, 1, 0], 2, 1),
        tg(8, 512, 512, 64, 64, 4, 2, 1, [1; 4], 0, 1),
        tg(0, 4, 5, 4, 8, 3, 2, 1, [1, 1, 1, 1], 1, 2),
    ];
    let mut bad = cts[0];
    bad.oh += 5;
    cts.push(bad);
    bad = cts[0];
    bad.group = 3;
    cts.push(bad);
    for (i, g) in cts.iter().enumerate() {
        for b in [false, true] {
            let geo = index::conv_transpose2d(&mut m, &format!("ct{i}_{}", b as u8), g, b);
            writeln!(log, "ct{i}_{b}: {geo:?}").unwrap();
        }
    }
    std::fs::write(dir.join("ct.ll"), m.finish()).unwrap();
    // ---------------- rows
    let shapes: [(u64, u64); 12] = [(1, 1), (3, 31), (12 * 128, 128), (5, 768), (1, 1024), (2, 5000), (3, 20000), (0, 128), (4, 0), (7, 2), (300, 33), (1, 16384)];
    let mut m = ModuleText::new();
    for (rws, cols) in shapes {
        for log_ in [false, true] {
            let g = rows::softmax(&mut m, &format!("sm_{rws}x{cols}_{log_}"), rws, cols, log_);
            writeln!(log, "sm {rws} {cols} {log_}: {g:?}").unwrap();
        }
    }
    let g = rows::softmax(&mut m, "s", u64::MAX / 4, 2, false);
    writeln!(log, "sm big: {g:?}").unwrap();
    let g = rows::softmax(&mut m, "s-1", 1, 1, false);
    writeln!(log, "sm bad: {g:?}").unwrap();
    std::fs::write(dir.join("softmax.ll"), m.finish()).unwrap();
    let mut m = ModuleText::new();
    for (i, (rws, cols)) in shapes.into_iter().enumerate() {
        for (ga, be) in [(true, true), (true, false), (false, true), (false, false)] {
            let g = rows::layer_norm(&mut m, &format!("ln{i}_{}{}", ga as u8, be as u8), rws, cols, 1e-5, ga, be);
            writeln!(log, "ln{i} {ga} {be}: {g:?}").unwrap();
        }
    }
    std::fs::write(dir.join("ln.ll"), m.finish()).unwrap();
    let mut m = ModuleText::new();
    let kinds = [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min];
    let rs: [(u64, u64, u64); 17] = [
        (4, 0, 1), (4, 1, 1), (6, 31, 1), (100, 1000, 1), (3, 4000, 1), (3, 5000, 1), (4096, 5000, 1),
        (1, 49, 2048), (32, 49, 2048), (2, 0, 2048), (2, 1, 2048), (3, 100, 2), (1, 7, 3), (0, 5, 5),
        (1, 1000, 5), (u64::MAX, 2, 1), (1, 3000, 300),
    ];
    for (o, l, inn) in rs {
        for kd in kinds {
            let name = format!("red_{kd:?}_{o}x{l}x{inn}").to_lowercase();
            let g = rows::reduce(&mut m, &name, kd, o, l, inn);
            writeln!(log, "{name}: {g:?}").unwrap();
        }
    }
    std::fs::write(dir.join("reduce.ll"), m.finish()).unwrap();
    let mut m = ModuleText::new();
    let pg = |nhwc: [u64; 4], ohw: [u64; 2], k: [u64; 2], s: [u64; 2], d: [u64; 2], pads: [u64; 4]| cg(nhwc, nhwc[3], ohw, k, s, d, pads, 1);
    let base = pg([1, 6, 6, 2], [2, 2], [3, 3], [2, 2], [1, 1], [0; 4]);
    let pools = vec![
        (pg([2, 112, 112, 64], [56, 56], [3, 3], [2, 2], [1, 1], [1; 4]), false),
        (pg([1, 1, 5, 1], [1, 3], [1, 3], [1, 2], [1, 1], [0, 0, 0, 1]), true),
        (pg([2, 5, 7, 3], [3, 4], [2, 3], [2, 2], [2, 1], [0, 1, 1, 2]), true),
        (pg([2, 5, 7, 3], [2, 4], [2, 3], [2, 2], [2, 1], [0, 1, 1, 2]), false),
        (pg([1, 7, 7, 2048], [1, 1], [7, 7], [1, 1], [1, 1], [0; 4]), false),
        (pg([0, 8, 8, 4], [4, 4], [2, 2], [2, 2], [1, 1], [0; 4]), false),
        (base, false),
        (base, true),
        (ConvGeom { oc: 3, ..base }, false),
        (ConvGeom { kh: 9, ..base }, false),
        (ConvGeom { stride: [0, 1], ..base }, false),
        (pg([4, 40000, 40000, 8], [40000, 40000], [1, 1], [1, 1], [1, 1], [0; 4]), false),
    ];
    for (i, (g, ceil)) in pools.iter().enumerate() {
        for kd in [PoolKind::Max, PoolKind::AvgExcludePad, PoolKind::AvgIncludePad] {
            let name = format!("pool{i}_{kd:?}").to_lowercase();
            let geo = rows::pool(&mut m, &name, kd, g, *ceil);
            writeln!(log, "{name}: {geo:?}").unwrap();
        }
    }
    std::fs::write(dir.join("pool.ll"), m.finish()).unwrap();
    std::fs::write(dir.join("log.txt"), log).unwrap();
}
