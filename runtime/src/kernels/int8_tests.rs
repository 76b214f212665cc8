//! Tests of the int8 and bf16 GEMMs (stub).
