//! Calibration and evaluation data: a folder of `.npy` batches or of
//! images, checked against the model's inputs.
//!
//! Layouts:
//! - one input: `DIR/*.npy`, each file one batch of exactly the input's
//!   shape and dtype (or `DIR/<input name>/*.npy`);
//! - several inputs: `DIR/<input name>/*.npy` for each, matched by file
//!   name (every folder must hold the same names);
//! - images (`.png`, `.jpg`, `.jpeg`, `.bmp`) for a single NCHW or NHWC
//!   input with 3 channels: decoded, resized to the input's height and
//!   width, scaled (`x / scale`), normalized (`(x - mean) / std`) per
//!   channel in RGB order (or BGR), and grouped into batches of the
//!   input's batch size (a last incomplete batch is left out).
//!
//! Batches load one at a time ([`CalibData::load`]), so memory does not grow
//! with the folder. Every problem names the file: a shape or dtype that is
//! not the input's, an unreadable file, a NaN or infinity in the data.

use std::path::{Path, PathBuf};

use aoc_ir::tensor::{Data, Tensor};
use aoc_ir::types::{Scalar, TensorType};

/// How images become input tensors.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    /// (height, width); must match the model's input when given.
    pub size: Option<(usize, usize)>,
    pub mean: [f64; 3],
    pub std: [f64; 3],
    /// Channels in BGR order instead of RGB.
    pub bgr: bool,
    /// Pixel values are divided by this first (255 maps 8-bit pixels to [0, 1]).
    pub scale: f64,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions { size: None, mean: [0.0; 3], std: [1.0; 3], bgr: false, scale: 255.0 }
    }
}

#[derive(Clone, Debug)]
enum Batch {
    /// One `.npy` file per model input.
    Npy(Vec<PathBuf>),
    /// The images of one batch of the single input.
    Images(Vec<PathBuf>),
}

/// Layout of an image input: where the channel axis is.
#[derive(Clone, Copy, Debug)]
enum ImageLayout {
    Nchw,
    Nhwc,
}

/// A calibration (or evaluation) folder, listed and checked.
#[derive(Clone, Debug)]
pub struct CalibData {
    pub dir: PathBuf,
    inputs: Vec<(String, TensorType)>,
    batches: Vec<Batch>,
    images: Option<(ImageOptions, ImageLayout)>,
    /// Images left out because they do not fill a batch.
    pub left_out: usize,
}

fn is_image(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg" | "bmp"))
}

fn is_npy(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "npy")
}

/// The files of `dir` (not folders), sorted by name.
fn files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("error: cannot read the folder {}: {e}", dir.display()))?;
    let mut out = vec![];
    for e in rd {
        let e = e.map_err(|e| format!("error: cannot read the folder {}: {e}", dir.display()))?;
        let p = e.path();
        if p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

impl CalibData {
    /// Lists `dir` for a model with `inputs`; `image` gives the image
    /// preprocessing (defaults apply when the folder holds images and no
    /// options were given).
    pub fn open(dir: &Path, inputs: &[(String, TensorType)], image: Option<&ImageOptions>) -> Result<CalibData, String> {
        if !dir.is_dir() {
            return Err(format!("error: {} is not a folder (calibration data is a folder of .npy files or images)", dir.display()));
        }
        if inputs.is_empty() {
            return Err("error: the model has no inputs to calibrate".to_string());
        }
        let mut data = CalibData { dir: dir.to_path_buf(), inputs: inputs.to_vec(), batches: vec![], images: None, left_out: 0 };
        let per_input_dirs: Vec<PathBuf> = inputs.iter().map(|(n, _)| dir.join(n)).collect();
        if inputs.len() > 1 || per_input_dirs[0].is_dir() {
            data.batches = matched_npy(dir, inputs, &per_input_dirs)?;
        } else {
            let all = files(dir)?;
            let npys: Vec<PathBuf> = all.iter().filter(|p| is_npy(p)).cloned().collect();
            let imgs: Vec<PathBuf> = all.iter().filter(|p| is_image(p)).cloned().collect();
            if !npys.is_empty() {
                data.batches = npys.into_iter().map(|p| Batch::Npy(vec![p])).collect();
            } else if !imgs.is_empty() {
                let (name, ty) = &inputs[0];
                let layout = image_layout(ty).ok_or_else(|| {
                    format!("error: {} holds images, but input {name} is {ty}; images need an NCHW or NHWC float input with 3 channels", dir.display())
                })?;
                let opts = image.cloned().unwrap_or_default();
                let (h, w) = hw(ty, layout);
                if let Some((sh, sw)) = opts.size
                    && (sh, sw) != (h, w)
                {
                    return Err(format!("error: --image-size {sh},{sw} does not match input {name} ({ty}: height {h}, width {w})"));
                }
                let n = ty.shape[0].max(1);
                data.left_out = imgs.len() % n;
                data.batches = imgs.chunks_exact(n).map(|c| Batch::Images(c.to_vec())).collect();
                data.images = Some((opts, layout));
                if data.batches.is_empty() {
                    return Err(format!(
                        "error: {} holds {} images, fewer than one batch of input {name} ({n})",
                        dir.display(),
                        imgs.len()
                    ));
                }
            }
        }
        if data.batches.is_empty() {
            return Err(format!(
                "error: {} holds no calibration data: no .npy files and no images (.png, .jpg, .jpeg, .bmp)",
                dir.display()
            ));
        }
        Ok(data)
    }

    pub fn len(&self) -> usize {
        self.batches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// What batch `i` was read from, for messages.
    pub fn describe(&self, i: usize) -> String {
        match &self.batches[i] {
            Batch::Npy(ps) => ps.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            Batch::Images(ps) if ps.len() == 1 => ps[0].display().to_string(),
            Batch::Images(ps) => format!("{} .. {}", ps[0].display(), ps[ps.len() - 1].display()),
        }
    }

    /// Batch `i`: one tensor per model input, of exactly its type, finite.
    pub fn load(&self, i: usize) -> Result<Vec<Tensor>, String> {
        match &self.batches[i] {
            Batch::Npy(paths) => paths
                .iter()
                .zip(&self.inputs)
                .map(|(p, (name, ty))| {
                    let t = crate::npy::read_npy(p).map_err(|m| format!("error: {m}"))?;
                    let t = crate::npy::conform(t, ty).map_err(|m| format!("error: {}: input {name}: {m}", p.display()))?;
                    check_finite(&t, p)?;
                    Ok(t)
                })
                .collect(),
            Batch::Images(paths) => {
                let (opts, layout) = self.images.as_ref().expect("image batches have image options");
                let (_, ty) = &self.inputs[0];
                Ok(vec![load_images(paths, ty, opts, *layout)?])
            }
        }
    }
}

/// `DIR/<input>/*.npy` for every input, matched by file name.
fn matched_npy(dir: &Path, inputs: &[(String, TensorType)], dirs: &[PathBuf]) -> Result<Vec<Batch>, String> {
    let mut names: Option<Vec<std::ffi::OsString>> = None;
    for ((input, _), d) in inputs.iter().zip(dirs) {
        if !d.is_dir() {
            return Err(format!(
                "error: {} has no folder {input}/; a model with several inputs takes one folder of .npy files per input, named after it",
                dir.display()
            ));
        }
        let here: Vec<std::ffi::OsString> =
            files(d)?.into_iter().filter(|p| is_npy(p)).filter_map(|p| p.file_name().map(|n| n.to_owned())).collect();
        match &names {
            None => names = Some(here),
            Some(first) => {
                for n in first.iter().chain(&here) {
                    if !first.contains(n) || !here.contains(n) {
                        let missing = if first.contains(n) { d.join(n) } else { dirs[0].join(n) };
                        return Err(format!("error: {} is missing: every input folder must hold the same file names", missing.display()));
                    }
                }
            }
        }
    }
    Ok(names
        .unwrap_or_default()
        .into_iter()
        .map(|n| Batch::Npy(dirs.iter().map(|d| d.join(&n)).collect()))
        .collect())
}

fn check_finite(t: &Tensor, path: &Path) -> Result<(), String> {
    if let Data::F(v) = &t.data
        && let Some(i) = v.iter().position(|x| !x.is_finite())
    {
        let idx = aoc_ir::tensor::unravel(i, &t.ty.shape);
        return Err(format!("error: {}: element {idx:?} is {} (calibration data must be finite)", path.display(), v[i]));
    }
    Ok(())
}

fn image_layout(ty: &TensorType) -> Option<ImageLayout> {
    if ty.rank() != 4 || !ty.elem.scalar().is_some_and(|s| s.is_float()) {
        return None;
    }
    match (ty.shape[1], ty.shape[3]) {
        (3, _) => Some(ImageLayout::Nchw),
        (_, 3) => Some(ImageLayout::Nhwc),
        _ => None,
    }
}

fn hw(ty: &TensorType, layout: ImageLayout) -> (usize, usize) {
    match layout {
        ImageLayout::Nchw => (ty.shape[2], ty.shape[3]),
        ImageLayout::Nhwc => (ty.shape[1], ty.shape[2]),
    }
}

/// Decodes, resizes and normalizes the images of one batch into `ty`.
fn load_images(paths: &[PathBuf], ty: &TensorType, o: &ImageOptions, layout: ImageLayout) -> Result<Tensor, String> {
    let (h, w) = hw(ty, layout);
    let mut out = vec![0f64; ty.num_elements()];
    let per_image = 3 * h * w;
    for (n, p) in paths.iter().enumerate() {
        let img = image::open(p).map_err(|e| format!("error: {}: cannot read the image: {e}", p.display()))?;
        let rgb = img.resize_exact(w as u32, h as u32, image::imageops::FilterType::Triangle).to_rgb8();
        for (x, y, px) in rgb.enumerate_pixels() {
            let (x, y) = (x as usize, y as usize);
            for c in 0..3 {
                let src = if o.bgr { 2 - c } else { c };
                let v = (px.0[src] as f64 / o.scale - o.mean[c]) / o.std[c];
                let i = match layout {
                    ImageLayout::Nchw => n * per_image + (c * h + y) * w + x,
                    ImageLayout::Nhwc => n * per_image + (y * w + x) * 3 + c,
                };
                out[i] = v;
            }
        }
    }
    let s = ty.elem.scalar().unwrap_or(Scalar::F32);
    let t = Tensor::from_f64(ty.clone(), out.into_iter().map(|v| aoc_ir::tensor::round_to(s, v)).collect());
    check_finite(&t, &paths[0])?;
    Ok(t)
}
