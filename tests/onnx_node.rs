//! The ONNX backend node tests, run through the importer and the reference
//! interpreter.
//!
//! Data: `make node-data` writes `build/onnx-node/node/test_*/` (override
//! with `$AOC_NODE_DATA`). Each case's model is imported with its own input
//! shapes, run on `test_data_set_0/input_*.pb`, and compared with
//! `output_*.pb` (shape, element type, values: floats within ONNX's runner
//! tolerance rtol 1e-3 / atol 1e-7, looser for 16- and 8-bit floats, NaN
//! equal to NaN; integers exact).
//!
//! A case is *supported* when every op in its graph is one the importer
//! maps (`supported_op_types`). The test fails unless at least 95% of the
//! supported cases pass, and it regenerates `docs/onnx-support.md`: with
//! `AOC_BLESS=1` it writes the file, otherwise it fails when the committed
//! file differs.

use aoc_compiler::onnx::{
    ImportOptions, MIN_OPSET, import_model, proto, supported_op_types, tensor_from_proto_bytes,
};
use aoc_ir::{Scalar, Tensor};
use libtest_mimic::{Arguments, Failed, Trial};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const PASS_RATE: f64 = 0.95;

fn main() {
    let args = Arguments::from_args();
    let trials = vec![Trial::test("onnx_backend_node_tests", run_suite)];
    libtest_mimic::run(&args, trials).exit();
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

struct Case {
    name: String,
    /// Distinct op types in the graph.
    ops: BTreeSet<String>,
    supported: bool,
    /// Why it is unsupported (empty when supported).
    unsupported: Vec<String>,
    result: Result<(), String>,
}

fn run_suite() -> Result<(), Failed> {
    let root = std::env::var_os("AOC_NODE_DATA")
        .map_or_else(|| workspace().join("build/onnx-node"), PathBuf::from);
    let dir = root.join("node");
    if !dir.is_dir() {
        println!("skipping: no ONNX node data (run `make node-data`)");
        return Ok(());
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("test_"))
        .collect();
    names.sort();

    // Cases run on worker threads; a panic in a case is that case's failure.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Case>> = Mutex::new(Vec::with_capacity(names.len()));
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(name) = names.get(i) else { break };
                    let case = run_case(&dir.join(name), name);
                    results.lock().unwrap().push(case);
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut cases = results.into_inner().unwrap();
    cases.sort_by(|a, b| a.name.cmp(&b.name));

    let report = report(&cases);
    let supported = cases.iter().filter(|c| c.supported).count();
    let passed = cases
        .iter()
        .filter(|c| c.supported && c.result.is_ok())
        .count();
    let rate = if supported == 0 {
        1.0
    } else {
        passed as f64 / supported as f64
    };
    println!(
        "onnx node tests: {passed} of {supported} supported cases pass ({:.1}%), {} cases in all",
        rate * 100.0,
        cases.len()
    );

    let doc = workspace().join("docs/onnx-support.md");
    let mut problems = vec![];
    if std::env::var("AOC_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&doc, &report).map_err(|e| format!("{}: {e}", doc.display()))?;
    } else if std::fs::read_to_string(&doc).ok().as_deref() != Some(report.as_str()) {
        problems.push(format!(
            "{} is out of date; review the change and re-bless with `AOC_BLESS=1 cargo test -p aoc-tests --test onnx_node`",
            doc.display()
        ));
    }
    if rate < PASS_RATE {
        let failing: Vec<String> = cases
            .iter()
            .filter(|c| c.supported)
            .filter_map(|c| {
                c.result
                    .as_ref()
                    .err()
                    .map(|e| format!("  {}: {}", c.name, first_line(e)))
            })
            .collect();
        problems.push(format!(
            "only {passed} of {supported} supported cases pass ({:.1}%, need {:.0}%):\n{}",
            rate * 100.0,
            PASS_RATE * 100.0,
            failing.join("\n")
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The ONNX element types the importer maps (`TensorProto.DataType`).
const SUPPORTED_TYPES: &[i32] = &[1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17, 19];

/// Why a case is outside what the importer maps: unmapped op types,
/// unsupported element types (graph inputs, outputs, initializers, Cast
/// targets) or an opset older than the importer accepts. Empty when
/// supported.
fn unsupported_features(m: &proto::ModelProto) -> Vec<String> {
    let mut out = BTreeSet::new();
    for o in &m.opset_import {
        if matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx"))
            && o.version.unwrap_or(0) < MIN_OPSET
        {
            out.insert(format!("opset {} (< {MIN_OPSET})", o.version.unwrap_or(0)));
        }
    }
    let Some(g) = &m.graph else {
        return vec!["no graph".into()];
    };
    let supported_ops = supported_op_types();
    let mut types = vec![];
    for n in &g.node {
        let op = n.op_type.clone().unwrap_or_default();
        let default = matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx"));
        if !default || !supported_ops.contains(&op.as_str()) {
            out.insert(format!(
                "op `{}{op}`",
                if default {
                    String::new()
                } else {
                    format!("{}:", n.domain.as_deref().unwrap_or(""))
                }
            ));
        }
        if op == "Cast" {
            types.extend(
                n.attribute
                    .iter()
                    .filter(|a| a.name.as_deref() == Some("to"))
                    .filter_map(|a| a.i.map(|i| i as i32)),
            );
        }
        types.extend(
            n.attribute
                .iter()
                .filter_map(|a| a.t.as_ref())
                .filter_map(|t| t.data_type),
        );
    }
    for vi in g.input.iter().chain(&g.output) {
        match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(proto::type_proto::Value::TensorType(t)) => types.extend(t.elem_type),
            _ => {
                out.insert("non-tensor input or output".to_string());
            }
        }
    }
    types.extend(g.initializer.iter().filter_map(|t| t.data_type));
    for t in types {
        if !SUPPORTED_TYPES.contains(&t) {
            out.insert(format!("element type {}", proto::data_type::name(t)));
        }
    }
    out.into_iter().collect()
}

fn run_case(dir: &Path, name: &str) -> Case {
    let bytes = std::fs::read(dir.join("model.onnx")).unwrap_or_default();
    let mut ops = BTreeSet::new();
    let unsupported = match proto::ModelProto::decode(bytes.as_slice()) {
        Ok(m) => {
            for n in m.graph.iter().flat_map(|g| &g.node) {
                ops.insert(n.op_type.clone().unwrap_or_default());
            }
            unsupported_features(&m)
        }
        Err(e) => vec![format!("undecodable model: {e}")],
    };
    let result = match std::panic::catch_unwind(|| check_case(dir, &bytes)) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    };
    Case {
        name: name.to_string(),
        ops,
        supported: unsupported.is_empty(),
        unsupported,
        result,
    }
}

fn read_pbs(dir: &Path, prefix: &str) -> Result<Vec<Tensor>, String> {
    let mut out = vec![];
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        let bytes = std::fs::read(&p).map_err(|e| format!("{prefix}_{i}.pb: {e}"))?;
        out.push(tensor_from_proto_bytes(&bytes).map_err(|e| format!("{prefix}_{i}.pb: {e}"))?);
    }
    Ok(out)
}

/// Moves the graph inputs `pin` selects into initializers holding the
/// case's input values: ONNX node tests feed shape-like operands (Reshape's
/// shape, Slice's bounds, ...) as inputs, where the importer requires
/// constants, as exported models have them.
fn pin_inputs(
    bytes: &[u8],
    data: &Path,
    pin: impl Fn(&proto::ModelProto, &str, &proto::TensorProto) -> bool,
) -> Result<Vec<u8>, String> {
    let mut model = proto::ModelProto::decode(bytes).map_err(|e| e.to_string())?;
    let snapshot = model.clone();
    let Some(graph) = model.graph.as_mut() else {
        return Err("no graph".into());
    };
    let inits: BTreeSet<String> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.clone())
        .collect();
    let mut kept = vec![];
    let mut i = 0;
    for vi in std::mem::take(&mut graph.input) {
        let name = vi.name.clone().unwrap_or_default();
        if inits.contains(&name) {
            kept.push(vi);
            continue;
        }
        let p = data.join(format!("input_{i}.pb"));
        i += 1;
        let pb = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut t = proto::TensorProto::decode(pb.as_slice()).map_err(|e| e.to_string())?;
        if pin(&snapshot, &name, &t) {
            t.name = Some(name);
            graph.initializer.push(t);
        } else {
            kept.push(vi);
        }
    }
    graph.input = kept;
    Ok(model.encode_to_vec())
}

/// Whether graph input `name` is an integer tensor some node reads as a
/// second or later operand (the shape-like position).
fn shape_like(model: &proto::ModelProto, name: &str, t: &proto::TensorProto) -> bool {
    let int = matches!(
        t.data_type,
        Some(proto::data_type::INT64) | Some(proto::data_type::INT32)
    );
    int && model
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .any(|n| n.input.iter().skip(1).any(|i| i == name))
}

fn check_case(dir: &Path, bytes: &[u8]) -> Result<(), String> {
    let data = dir.join("test_data_set_0");
    let mut all_inputs = read_pbs(&data, "input")?;
    let mut imported = import_model(bytes, &ImportOptions::default());
    // Constant-only operands fed as inputs: pin the shape-like ones, then,
    // if that is not enough, all of them.
    for stage in 0..2 {
        match &imported {
            Err(d) if d.message.contains("must be a constant") => {
                let pinned = pin_inputs(bytes, &data, |m, n, t| stage == 1 || shape_like(m, n, t))?;
                imported = import_model(&pinned, &ImportOptions::default());
            }
            _ => break,
        }
    }
    let imported = imported.map_err(|d| format!("import: {d}"))?;
    let diags = aoc_ir::verify::verify_module(&imported.module);
    if let Some(d) = diags.first() {
        return Err(format!("verify: {d}"));
    }
    let func = imported.module.entry().ok_or("no function")?;
    // The remaining parameters are the unpinned inputs, in order.
    let model = proto::ModelProto::decode(bytes).map_err(|e| e.to_string())?;
    let graph = model.graph.unwrap_or_default();
    let inits: BTreeSet<String> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.clone())
        .collect();
    let params: Vec<&str> = func.params().iter().map(|&p| func.name_of(p)).collect();
    let inputs: Vec<Tensor> = graph
        .input
        .iter()
        .filter(|vi| !inits.contains(vi.name.as_deref().unwrap_or("")))
        .zip(std::mem::take(&mut all_inputs))
        .filter(|(vi, _)| {
            params.contains(
                &aoc_ir::module::fresh_name(vi.name.as_deref().unwrap_or(""), |_| false).as_str(),
            )
        })
        .map(|(_, t)| t)
        .collect();
    let expected = read_pbs(&data, "output")?;
    let outputs = aoc_ir::interp::run(func, inputs, &imported.weight_source())
        .map_err(|d| format!("run: {d}"))?;
    if outputs.len() != expected.len() {
        return Err(format!(
            "{} outputs, expected {}",
            outputs.len(),
            expected.len()
        ));
    }
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        compare(got, want).map_err(|m| format!("output {i}: {m}"))?;
    }
    Ok(())
}

/// ONNX's runner tolerance, widened for narrow float types.
fn tolerance(s: Scalar) -> (f64, f64) {
    match s {
        Scalar::F16 => (2e-3, 1e-5),
        Scalar::BF16 => (1e-2, 1e-5),
        Scalar::F8E4M3FN | Scalar::F8E5M2 => (0.13, 1e-5),
        _ => (1e-3, 1e-7),
    }
}

fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let (gs, ws) = (got.ty.elem.storage(), want.ty.elem.storage());
    if gs != ws {
        return Err(format!("element type {gs}, expected {ws}"));
    }
    let (rtol, atol) = tolerance(ws);
    for i in 0..want.len() {
        if ws.is_float() {
            let (g, w) = (got.get_f64(i), want.get_f64(i));
            let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
            if !ok {
                return Err(format!("element {i} is {g}, expected {w}"));
            }
        } else if got.get_i64(i) != want.get_i64(i) {
            return Err(format!(
                "element {i} is {}, expected {}",
                got.get_i64(i),
                want.get_i64(i)
            ));
        }
    }
    Ok(())
}

fn report(cases: &[Case]) -> String {
    #[derive(Default)]
    struct Row {
        cases: usize,
        passed: usize,
    }
    let mut per_op: BTreeMap<&str, Row> = BTreeMap::new();
    let mut unsupported: BTreeMap<&str, usize> = BTreeMap::new();
    let supported_ops = supported_op_types();

    for c in cases {
        if c.supported {
            for op in &c.ops {
                let row = per_op.entry(op).or_default();
                row.cases += 1;
                row.passed += c.result.is_ok() as usize;
            }
        } else {
            for why in &c.unsupported {
                *unsupported.entry(why).or_default() += 1;
            }
        }
    }
    let supported = cases.iter().filter(|c| c.supported).count();
    let passed = cases
        .iter()
        .filter(|c| c.supported && c.result.is_ok())
        .count();
    let mut s = String::new();
    s.push_str("# ONNX support\n\n");
    s.push_str(
        "Generated by `tests/onnx_node.rs` from the ONNX backend node tests (`make node-data`);\n",
    );
    s.push_str(
        "do not edit. Re-bless with `AOC_BLESS=1 cargo test -p aoc-tests --test onnx_node`.\n\n",
    );
    s.push_str("Each case's model is imported, run in the reference interpreter on the case's inputs and\n");
    s.push_str("compared with its expected outputs (floats: rtol 1e-3, atol 1e-7; f16 2e-3, bf16 1e-2, fp8 0.13;\n");
    s.push_str(
        "integers exactly). A case is supported when the importer maps every op type and element\n",
    );
    s.push_str(&format!("type in its graph and its opset is {MIN_OPSET} or newer; a case counts once under each op type its\n"));
    s.push_str("graph uses. Integer inputs in shape-like positions (Reshape's shape, Slice's bounds, ...)\n");
    s.push_str(
        "are fed as constants, since the importer requires those to be known at import time; a case\n",
    );
    s.push_str(
        "that still needs constant operands (Range, ConstantOfShape, ...) gets all its inputs as\n",
    );
    s.push_str("constants and runs through import-time folding.\n\n");
    let pct = if supported == 0 {
        100.0
    } else {
        passed as f64 * 100.0 / supported as f64
    };
    s.push_str(&format!(
        "**{passed} of {supported} supported cases pass ({pct:.1}%).** {} cases in all; {} are unsupported.\n\n",
        cases.len(),
        cases.len() - supported
    ));
    s.push_str("## Supported op types\n\n| op type | cases | passed | failed |\n| --- | ---: | ---: | ---: |\n");
    for op in supported_ops.iter().copied().collect::<BTreeSet<_>>() {
        let row = per_op.get(op).map_or((0, 0), |r| (r.cases, r.passed));
        s.push_str(&format!(
            "| {op} | {} | {} | {} |\n",
            row.0,
            row.1,
            row.0 - row.1
        ));
    }
    s.push_str("\n## Failing supported cases\n\n");
    let failing: Vec<&Case> = cases
        .iter()
        .filter(|c| c.supported && c.result.is_err())
        .collect();
    if failing.is_empty() {
        s.push_str("None.\n");
    } else {
        s.push_str("| case | reason |\n| --- | --- |\n");
        for c in failing {
            let reason =
                first_line(c.result.as_ref().err().map_or("", |e| e.as_str())).replace('|', "\\|");
            s.push_str(&format!("| {} | {} |\n", c.name, reason));
        }
    }
    s.push_str("\n## Unsupported cases\n\nCases outside what the importer maps (not counted above), by reason;\n");
    s.push_str("a case counts once under each reason.\n\n");
    s.push_str("| reason | cases |\n| --- | ---: |\n");
    for (op, n) in &unsupported {
        s.push_str(&format!("| {} | {n} |\n", op.replace('|', "\\|")));
    }
    s
}
