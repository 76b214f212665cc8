use std::time::Instant;
use aoc_runtime::kernels::conv::*;
use aoc_runtime::kernels::pool::*;
use aoc_runtime::plan::*;

fn geom(n: u64, h: u64, c: u64, oc: u64, k: u64, s: u64, p: u64, group: u64) -> ConvGeom {
    let oh = (h + 2 * p - k) / s + 1;
    ConvGeom { n, h, w: h, c, oh, ow: oh, oc, kh: k, kw: k, stride: [s, s], dilation: [1, 1], pads: [p; 4], group }
}

fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut reps = 0;
        while t.elapsed().as_secs_f64() < 0.2 { f(); reps += 1; }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        for (name, g) in [
            ("3x3 64->64 56x56", geom(1, 56, 64, 64, 3, 1, 1, 1)),
            ("1x1 64->256 56x56", geom(1, 56, 64, 256, 1, 1, 0, 1)),
            ("3x3 256->256 14x14", geom(1, 14, 256, 256, 3, 1, 1, 1)),
            ("3x3 512->512 7x7", geom(1, 7, 512, 512, 3, 1, 1, 1)),
            ("7x7/2 3->64 224", geom(1, 224, 3, 64, 7, 2, 3, 1)),
            ("3x3 g32 128->128 56", geom(1, 56, 128, 128, 3, 1, 1, 32)),
        ] {
            let x = vec![0.5f32; (g.n * g.h * g.w * g.c) as usize];
            let w = vec![0.01f32; (g.oc * g.c / g.group * 9 * 0 + g.oc * g.c / g.group * g.kh * g.kw) as usize];
            let wp = conv2d_pack_weights(&g, &w).unwrap();
            let bias = vec![0.1f32; g.oc as usize];
            let mut y = vec![0.0f32; (g.n * g.oh * g.ow * g.oc) as usize];
            let secs = time(|| conv2d(&g, &x, &wp, Some(&bias), true, &mut y).unwrap());
            let flops = 2.0 * (g.n * g.oh * g.ow * g.oc * g.c / g.group * g.kh * g.kw) as f64;
            println!("conv {name:24} {:8.3} ms {:7.1} GFLOP/s", secs * 1e3, flops / secs / 1e9);
        }
        for (name, g) in [
            ("dw 3x3 32ch 112x112", geom(1, 112, 32, 32, 3, 1, 1, 32)),
            ("dw 3x3 144ch 56x56", geom(1, 56, 144, 144, 3, 1, 1, 144)),
            ("dw 3x3/2 960ch 14", geom(1, 14, 960, 960, 3, 2, 1, 960)),
        ] {
            let x = vec![0.5f32; (g.n * g.h * g.w * g.c) as usize];
            let w = vec![0.01f32; (g.oc * g.kh * g.kw) as usize];
            let wp = depthwise_pack_weights(&g, &w).unwrap();
            let mut y = vec![0.0f32; (g.n * g.oh * g.ow * g.oc) as usize];
            let secs = time(|| depthwise_conv2d(&g, &x, &wp, None, true, &mut y).unwrap());
            let flops = 2.0 * (g.n * g.oh * g.ow * g.oc * g.kh * g.kw) as f64;
            let bytes = 4.0 * (x.len() + y.len()) as f64;
            println!("{name:29} {:8.3} ms {:7.1} GFLOP/s {:6.1} GB/s", secs * 1e3, flops / secs / 1e9, bytes / secs / 1e9);
        }
        let g = ConvGeom { n: 1, h: 112, w: 112, c: 64, oh: 56, ow: 56, oc: 64, kh: 3, kw: 3, stride: [2, 2], dilation: [1, 1], pads: [1; 4], group: 1 };
        let x = vec![0.5f32; 112 * 112 * 64];
        let mut y = vec![0.0f32; 56 * 56 * 64];
        let secs = time(|| pool2d(PoolKind::Max, &g, false, &x, &mut y).unwrap());
        println!("maxpool 3x3/2 64ch 112        {:8.3} ms {:6.1} GB/s", secs * 1e3, 4.0 * (x.len() + y.len()) as f64 / secs / 1e9);
        let x = vec![0.5f32; 7 * 7 * 2048];
        let mut y = vec![0.0f32; 2048];
        let secs = time(|| reduce_middle(ReduceKind::Mean, 1, 49, 2048, &x, &mut y).unwrap());
        println!("gap 7x7x2048                  {:8.3} ms", secs * 1e3);
        let x = vec![0.5f32; 56 * 56 * 64];
        let mut y = vec![0.0f32; 112 * 112 * 64];
        let secs = time(|| aoc_runtime::kernels::resize::resize(ResizeMode::BilinearHalfPixel, 1, 56, 56, 64, 112, 112, &x, &mut y).unwrap());
        println!("resize bilinear 56->112 64ch  {:8.3} ms {:6.1} GB/s", secs * 1e3, 4.0 * (x.len() + y.len()) as f64 / secs / 1e9);
    });
}
