//! ONNX import (being written).
