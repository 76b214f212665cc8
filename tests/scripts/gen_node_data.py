#!/usr/bin/env python3
"""Write the ONNX backend node tests to disk, in ONNX's own data layout.

The `onnx` package ships the node-test generators (onnx/backend/test/case/node/)
but not their data, and its `cmd_tools generate-data` command (onnx 1.23)
only writes the `simple` and `real` model cases. This script asks the same
generators for the node cases and writes them as onnx's repository does:

    OUT/node/<test name>/model.onnx
    OUT/node/<test name>/test_data_set_0/input_<i>.pb    (TensorProto,
    OUT/node/<test name>/test_data_set_0/output_<i>.pb    SequenceProto or OptionalProto)

It then writes OUT/node/COUNT with the number of cases. Usage:

    gen_node_data.py OUT
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings

import onnx
from onnx import numpy_helper


def value_proto(value, value_info: onnx.ValueInfoProto) -> bytes:
    """Serialize one input or output the way the graph declares it."""
    kind = value_info.type.WhichOneof("value")
    if isinstance(value, (onnx.TensorProto, onnx.SequenceProto, onnx.OptionalProto, onnx.MapProto)):
        return value.SerializeToString()
    if kind == "sequence_type":
        return numpy_helper.from_list(value, value_info.name).SerializeToString()
    if kind == "optional_type":
        return numpy_helper.from_optional(value, value_info.name).SerializeToString()
    if kind == "map_type":
        return numpy_helper.from_dict(value, value_info.name).SerializeToString()
    return numpy_helper.from_array(value, value_info.name).SerializeToString()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = os.path.join(argv[0], "node")
    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    # The generators compute expected values with numpy and trip its
    # divide-by-zero warnings on purpose (e.g. log(0) = -inf cases).
    warnings.simplefilter("ignore")
    import onnx.backend.test.case.node as node_cases

    cases = node_cases.collect_testcases()
    for case in cases:
        case_dir = os.path.join(tmp, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for n, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = os.path.join(case_dir, f"test_data_set_{n}")
            os.makedirs(data_dir)
            for prefix, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                for i, value in enumerate(values):
                    with open(os.path.join(data_dir, f"{prefix}_{i}.pb"), "wb") as f:
                        f.write(value_proto(value, infos[i]))
    with open(os.path.join(tmp, "COUNT"), "w") as f:
        f.write(f"{len(cases)}\n")

    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"gen_node_data: {len(cases)} node test cases in {out} (onnx {onnx.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
