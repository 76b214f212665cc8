"""The exceptions aoc raises. Every one is an `aoc.Error`; the message is
the `aoc` command's own (diagnostics located as FILE:LINE:COL)."""

from __future__ import annotations


class Error(Exception):
    """Base class of every error aoc raises."""


class CompileError(Error):
    """The model could not be read, imported, optimized or compiled."""


class LoadError(Error, OSError):
    """An artifact or model file could not be read, or is not valid."""


class InputError(Error, ValueError):
    """An argument does not fit: an unknown input name, a wrong dtype or
    shape, a non-contiguous array, a bad option or calibration batch."""


class RunError(Error, RuntimeError):
    """An inference failed in the runtime."""


class QuantizeError(Error):
    """Calibration or quantization failed."""


class DeviceError(Error, RuntimeError):
    """The GPU (or its driver) is missing or refused the artifact."""


class InternalError(Error, RuntimeError):
    """A bug in aoc (a Rust panic, caught at the boundary): please report it."""


for _c in (Error, CompileError, LoadError, InputError, RunError, QuantizeError, DeviceError, InternalError):
    _c.__module__ = "aoc"

__all__ = [
    "Error",
    "CompileError",
    "LoadError",
    "InputError",
    "RunError",
    "QuantizeError",
    "DeviceError",
    "InternalError",
]
