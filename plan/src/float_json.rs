//! JSON for the plan's f32 parameters, infinities and NaN included.
//!
//! JSON has no number for them (serde_json writes `null`), yet a model may
//! carry them: a clip with no upper bound is `[lo, inf]`, and a model may
//! set a norm's epsilon or a scale to anything the IR accepts. The plan
//! writes a finite value as a JSON number and the others as the strings
//! `"inf"`, `"-inf"` and `"nan"`, and reads both back, so every artifact
//! `aoc compile` writes loads again.

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// An f32 as the plan writes it; `#[serde(with = "float_json")]` on a field.
pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    Json(*v).serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    Json::deserialize(d).map(|j| j.0)
}

/// `Option<f32>` fields: `#[serde(with = "float_json::opt")]`.
pub mod opt {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        v.map(Json).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        Option::<Json>::deserialize(d).map(|o| o.map(|j| j.0))
    }
}

/// `Option<[f32; 2]>` fields (clamps): `#[serde(with = "float_json::opt_pair")]`.
pub mod opt_pair {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<[f32; 2]>, s: S) -> Result<S::Ok, S::Error> {
        v.map(|[a, b]| [Json(a), Json(b)]).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[f32; 2]>, D::Error> {
        Option::<[Json; 2]>::deserialize(d).map(|o| o.map(|[a, b]| [a.0, b.0]))
    }
}

#[derive(Clone, Copy)]
struct Json(f32);

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() {
            s.serialize_f32(v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl Visitor<'_> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an f32 (a number, or \"inf\", \"-inf\" or \"nan\")")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json(v as f32))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json(v as f32))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json(v as f32))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        match v {
            "inf" => Ok(Json(f32::INFINITY)),
            "-inf" => Ok(Json(f32::NEG_INFINITY)),
            "nan" => Ok(Json(f32::NAN)),
            _ => Err(E::invalid_value(Unexpected::Str(v), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::QuantAdd;
    use crate::plan::QuantOperand;

    fn operand(scale: f32) -> QuantOperand {
        QuantOperand { signed: true, zero: 0, scale }
    }

    #[test]
    fn non_finite_parameters_survive_the_json_round_trip() {
        let add = QuantAdd {
            a: operand(f32::NAN),
            b: operand(0.5),
            y: operand(f32::INFINITY),
            clip_min: Some(0.0),
            clip_max: Some(f32::INFINITY),
        };
        let v = serde_json::to_value(add).unwrap();
        assert_eq!(v["clip_max"], "inf");
        assert_eq!(v["y"]["scale"], "inf");
        assert_eq!(v["b"]["scale"], 0.5);
        let back: QuantAdd = serde_json::from_value(v).unwrap();
        assert!(back.a.scale.is_nan());
        assert_eq!(back.y.scale, f32::INFINITY);
        assert_eq!((back.clip_min, back.clip_max), (Some(0.0), Some(f32::INFINITY)));
    }

    #[test]
    fn an_unknown_string_is_refused_with_what_was_expected() {
        let v = serde_json::json!({ "signed": true, "zero": 0, "scale": "big" });
        let e = serde_json::from_value::<QuantOperand>(v).unwrap_err().to_string();
        assert!(e.contains("\"big\"") && e.contains("\"inf\""), "{e}");
    }
}
