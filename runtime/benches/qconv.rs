//! Integer convolution benchmark: GOP/s of `qconv2d` (weights packed as a
//! session packs them at load) on the layer shapes of ResNet-50 and
//! MobileNetV2 at batch 1, per direct level this CPU has (AMX, AVX-512
//! VNNI) and for the depthwise kernel, with the AMX tile peak measured in
//! the same run for scale (`gemm_int8`'s register-only loop).
//!
//! `cargo bench -p aoc-runtime --bench qconv [-- --threads N] [-- --filter S]`
//! (`--filter`: only the shapes whose label contains S).

mod common;
use common::best_of;

use aoc_runtime::kernels::int8::Int8Level;
use aoc_runtime::kernels::qconv::{pack_qconv, pack_qconv_direct, qconv2d};
use aoc_runtime::kernels::{qdepthwise, qdirect};
use aoc_runtime::plan::{ConvGeom, QuantConv, QuantElem};

/// `(label, h, c, oc, k, stride, group)`: square maps, pads `k/2`.
const SHAPES: &[(&str, u64, u64, u64, u64, u64, u64)] = &[
    ("r50 stem 7x7", 224, 3, 64, 7, 2, 1),
    ("r50 1x1 56 64->64", 56, 64, 64, 1, 1, 1),
    ("r50 3x3 56 64->64", 56, 64, 64, 3, 1, 1),
    ("r50 1x1 56 64->256", 56, 64, 256, 1, 1, 1),
    ("r50 1x1 56 256->64", 56, 256, 64, 1, 1, 1),
    ("r50 3x3 28 128->128", 28, 128, 128, 3, 1, 1),
    ("r50 1x1 28 128->512", 28, 128, 512, 1, 1, 1),
    ("r50 3x3 14 256->256", 14, 256, 256, 3, 1, 1),
    ("r50 1x1 14 1024->256", 14, 1024, 256, 1, 1, 1),
    ("r50 3x3 7 512->512", 7, 512, 512, 3, 1, 1),
    ("r50 1x1 7 512->2048", 7, 512, 2048, 1, 1, 1),
    ("mv2 dw 112 32", 112, 32, 32, 3, 1, 32),
    ("mv2 dw 56 144", 56, 144, 144, 3, 1, 144),
    ("mv2 dw 112 96 s2", 112, 96, 96, 3, 2, 96),
    ("mv2 dw 14 576", 14, 576, 576, 3, 1, 576),
    ("mv2 dw 7 960", 7, 960, 960, 3, 1, 960),
    ("mv2 1x1 112 32->16", 112, 32, 16, 1, 1, 1),
    ("mv2 1x1 56 24->144", 56, 24, 144, 1, 1, 1),
    ("mv2 1x1 14 576->96", 14, 576, 96, 1, 1, 1),
];

fn geom(h: u64, c: u64, oc: u64, k: u64, s: u64, group: u64) -> ConvGeom {
    let o = (h + 2 * (k / 2) - k) / s + 1;
    ConvGeom {
        n: 1,
        h,
        w: h,
        c,
        oh: o,
        ow: o,
        oc,
        kh: k,
        kw: k,
        stride: [s, s],
        dilation: [1, 1],
        pads: [k / 2; 4],
        group,
    }
}

/// Seeded bytes (xorshift).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = common::threads_arg(&args);
    let filter = args.iter().position(|a| a == "--filter").and_then(|i| args.get(i + 1)).cloned();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("rayon pool");
    let levels: Vec<Int8Level> = [Int8Level::Amx, Int8Level::Avx512Vnni]
        .into_iter()
        .filter(|&l| qdirect::supports(l))
        .collect();
    println!("threads: {threads}; direct levels: {levels:?} (others skipped: this cpu lacks them)");
    println!("{:24} {:>10} {:>9} {:>9}", "shape", "kernel", "ms", "GOP/s");
    let q = QuantConv { x_signed: false, x_zero: 3, y_signed: false, y_zero: 0, y_min: 0, y_max: 255, elem: QuantElem::Int8 };
    for &(label, h, c, oc, k, s, group) in SHAPES {
        if filter.as_ref().is_some_and(|f| !label.contains(f.as_str())) {
            continue;
        }
        let g = geom(h, c, oc, k, s, group);
        let kk = (k * k * c / group) as usize;
        let x = bytes((h * h * c) as usize, 1);
        let w: Vec<i8> = bytes(oc as usize * kk, 2).into_iter().map(|b| (b as i8) / 2).collect();
        let comp: Vec<i32> = (0..oc as i32).map(|o| o * 7 - 900).collect();
        let scale: Vec<f32> = (0..oc).map(|o| 1.0 / (3000.0 + o as f32)).collect();
        let shift: Vec<f32> = (0..oc).map(|o| o as f32 * 0.01).collect();
        let mut y = vec![0u8; (g.oh * g.ow * oc) as usize];
        let ops = 2.0 * (g.oh * g.ow * oc) as f64 * kk as f64;
        let mut runs: Vec<(String, aoc_runtime::kernels::qconv::PackedQConv)> = Vec::new();
        if group == 1 {
            for &l in &levels {
                runs.push((l.name().to_string(), pack_qconv_direct(&g, &w, l).expect("pack")));
            }
        } else {
            let d = aoc_plan::pack::ConvDims::new(&g).expect("geometry");
            let dw = qdepthwise::pack(&g, &w).expect("pack");
            for k in qdepthwise::Kernel::ALL {
                if !k.is_supported() || !qdepthwise::takes(k, &d, &q, &dw) {
                    continue;
                }
                let t = pool.install(|| {
                    best_of(|| qdepthwise::run_kernel(k, &d, &q, &x, &dw, &comp, &scale, &shift, &mut y).expect("depthwise"))
                });
                println!("{label:24} {:>10} {:9.3} {:9.0}", format!("dw-{k:?}"), t * 1e3, ops / t / 1e9);
            }
            runs.push(("depthwise".to_string(), pack_qconv(&g, &w).expect("pack")));
        }
        for (name, packed) in &runs {
            let t = pool.install(|| {
                best_of(|| qconv2d(&g, &q, &x, &w, Some(packed), &comp, &scale, &shift, &mut y).expect("qconv2d"))
            });
            println!("{label:24} {name:>10} {:9.3} {:9.0}", t * 1e3, ops / t / 1e9);
        }
    }
}
