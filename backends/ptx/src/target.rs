//! The NVIDIA GPU architectures aoc generates PTX for, and what each offers.
//!
//! Invariants:
//! - [`Sm::name`] is the spelling of the `--target` option, of PTX's
//!   `.target` directive and of `ptxas -arch`; [`Sm::parse`] accepts exactly
//!   those names.
//! - [`Sm::ptx_feature`] is the lowest PTX ISA version that knows the
//!   architecture and every instruction aoc emits for it (the driver that JITs
//!   the PTX must understand that version, so the lowest one is the most
//!   portable).

use std::fmt;

/// A GPU architecture (compute capability).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sm {
    /// Volta.
    Sm70,
    /// Turing.
    Sm75,
    /// Ampere A100.
    Sm80,
    /// Ampere consumer and workstation parts (PTX for it also runs on
    /// sm_89 and sm_90 through the driver's JIT).
    Sm86,
    /// Ada.
    Sm89,
    /// Hopper.
    Sm90,
    /// Hopper with the architecture-specific features (`wgmma`, `setmaxnreg`);
    /// PTX for it runs on sm_90 only.
    Sm90a,
}

impl Sm {
    pub const ALL: [Sm; 7] = [
        Sm::Sm70,
        Sm::Sm75,
        Sm::Sm80,
        Sm::Sm86,
        Sm::Sm89,
        Sm::Sm90,
        Sm::Sm90a,
    ];

    /// The architecture name: `sm_86`.
    pub fn name(self) -> &'static str {
        match self {
            Sm::Sm70 => "sm_70",
            Sm::Sm75 => "sm_75",
            Sm::Sm80 => "sm_80",
            Sm::Sm86 => "sm_86",
            Sm::Sm89 => "sm_89",
            Sm::Sm90 => "sm_90",
            Sm::Sm90a => "sm_90a",
        }
    }

    /// The architecture named `name` (`sm_86`), or an error listing the
    /// names accepted.
    pub fn parse(name: &str) -> Result<Sm, String> {
        Sm::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Sm::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown gpu target `{name}`, expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// The compute capability times ten (`86`).
    pub fn capability(self) -> u32 {
        match self {
            Sm::Sm70 => 70,
            Sm::Sm75 => 75,
            Sm::Sm80 => 80,
            Sm::Sm86 => 86,
            Sm::Sm89 => 89,
            Sm::Sm90 | Sm::Sm90a => 90,
        }
    }

    /// The PTX ISA version (major * 10 + minor) the module declares.
    /// `ldmatrix` needs 6.5, `mma.sync` m16n8k16 and `cp.async` 7.0, the
    /// sparse `mma.sp` 7.1 (CUDA 11.1); each architecture's version is at
    /// least that from sm_80 on. sm_90a takes 8.4, which `wgmma` of u8
    /// activations by s8 weights needs (CUDA 12.4 drivers); sm_89 8.1, for
    /// the e4m3 conversions.
    pub fn ptx_version(self) -> u32 {
        match self {
            Sm::Sm70 => 60,
            Sm::Sm75 => 65,
            Sm::Sm80 => 71,
            Sm::Sm86 => 71,
            // 8.1: the e4m3 conversions on sm_89 (7.8 has them on sm_90 only).
            Sm::Sm89 => 81,
            Sm::Sm90 => 78,
            Sm::Sm90a => 84,
        }
    }

    /// The LLVM NVPTX target feature selecting [`Sm::ptx_version`]: `+ptx71`.
    pub fn ptx_feature(self) -> String {
        format!("+ptx{}", self.ptx_version())
    }

    /// Whether `mma.sync.aligned.m16n8k16` with f16/bf16 inputs and f32
    /// accumulation exists (sm_80 and newer; Turing has only m16n8k8).
    pub fn has_mma_f16(self) -> bool {
        self.capability() >= 80
    }

    /// The e4m3 conversions (`cvt.rn.satfinite.e4m3x2.f32`,
    /// `cvt.rn.f16x2.e4m3x2`): Ada and Hopper.
    pub fn has_fp8_cvt(self) -> bool {
        self.capability() >= 89
    }

    /// Whether `cp.async` (asynchronous global → shared copies) exists.
    pub fn has_cp_async(self) -> bool {
        self.capability() >= 80
    }

    /// Whether `ldmatrix` exists (sm_75 and newer).
    pub fn has_ldmatrix(self) -> bool {
        self.capability() >= 75
    }

    /// Whether the hardware `tanh.approx.f32` exists (sm_75 and newer).
    pub fn has_tanh_approx(self) -> bool {
        self.capability() >= 75
    }

    /// The most shared memory one block may use, in bytes (dynamic shared
    /// memory above 48 KiB needs the launcher to opt in with
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    pub fn max_shared_per_block(self) -> u32 {
        match self {
            Sm::Sm70 => 96 * 1024,
            Sm::Sm75 => 64 * 1024,
            Sm::Sm80 => 163 * 1024,
            Sm::Sm86 | Sm::Sm89 => 99 * 1024,
            Sm::Sm90 | Sm::Sm90a => 227 * 1024,
        }
    }
}

impl fmt::Display for Sm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
