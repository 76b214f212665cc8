# aoc — the two commands a fresh Debian machine needs, and what they stand on.
#
#   make demo    import an example model, verify it, run it in the interpreter,
#                compare with ONNX Runtime's outputs
#   make test    everything `cargo test --workspace` needs, then the tests
#   make gpu-test the GPU suite, on a machine with an NVIDIA GPU (see README)
#
# Everything downloaded or generated lives under build/ (and the venv under
# .venv/); each step leaves a stamp file and runs once. `make clean-build`
# removes them all.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON_SYS   ?= python3
VENV         := $(CURDIR)/.venv
PY           := $(VENV)/bin/python
BUILD        := $(CURDIR)/build
STAMPS       := $(BUILD)/stamps

# Python packages the tests use as oracles. Bump a pin and `make setup`
# reinstalls (the stamp's name carries the versions).
NUMPY_VERSION       := 2.4.6
ONNX_VERSION        := 1.23.2
ONNXRUNTIME_VERSION := 1.31.1
PY_PINS := numpy==$(NUMPY_VERSION) onnx==$(ONNX_VERSION) onnxruntime==$(ONNXRUNTIME_VERSION) nvidia-cuda-nvcc==13.0.88
VENV_STAMP := $(STAMPS)/venv-numpy$(NUMPY_VERSION)-onnx$(ONNX_VERSION)-ort$(ONNXRUNTIME_VERSION)

NODE_DATA  := $(BUILD)/onnx-node
MODELS     := $(BUILD)/models
RAPIDOCR   := rapidocr-onnxruntime==1.4.4

AOC        := target/release/aoc
DEMO       := $(BUILD)/demo
EXAMPLE    := examples/resnet_block

# LLVM 22: the PTX backend links it statically (a prerequisite of every build).
LLVM_CONFIG   := /usr/lib/llvm-22/bin/llvm-config
LLVM_PACKAGES := llvm-22-dev libmlir-22-dev mlir-22-tools libpolly-22-dev libzstd-dev libclang1-22 libclang-common-22-dev
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: python python-test c-lib help setup node-data real-models test demo examples-air llvm clean-build fuzz bench-cpu gpu-test device-bins bench-gpu

help:
	@echo 'make demo         import examples/resnet_block, run it, compare with ONNX Runtime'
	@echo 'make test         set up the Python oracles and test data, then cargo test --workspace'
	@echo 'make setup        Python venv in .venv with $(PY_PINS)'
	@echo 'make node-data    ONNX backend node tests -> build/onnx-node/node/'
	@echo 'make real-models  RapidOCR (PaddleOCR) ONNX models -> build/models/'
	@echo 'make llvm         install LLVM/MLIR 22 dev packages and mlir-opt-22 (apt) if missing'
	@echo 'make examples-air import every examples/*/model.onnx to model.air + model.safetensors'
	@echo 'make fuzz         fuzz the .air parser and the ONNX importer, FUZZ_SECONDS each (default 60)'
	@echo 'make gpu-test     on a GPU machine: every model on the GPU vs the interpreter, CUDA runtime tests'
	@echo 'make device-bins  build the binaries a GPU machine without cargo runs (build/device/)'
	@echo 'make bench-gpu    on a GPU machine: aoc vs PyTorch eager/torch.compile and cuBLAS (bench/gpu/run.py)'
	@echo 'make bench-cpu    build the benchmark models, compare aoc with ONNX Runtime on the CPU (bench/cpu/README.md)'
	@echo 'make python       build the aoc Python package (python/, maturin) and install it into .venv'
	@echo 'make python-test  the Python package'"'"'s pytest suite (python/tests/), after `make python`'
	@echo 'make c-lib        the C runtime library: target/release/libaoc_runtime.a and .so, and build/aoc_run_c (examples/c/main.c)'
	@echo 'make clean-build  remove build/ and .venv/'

# --- Python venv -------------------------------------------------------------

setup: $(VENV_STAMP)

$(VENV_STAMP):
	@if ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  rm -rf $(VENV); \
	  $(PYTHON_SYS) -m venv $(VENV) || { rm -rf $(VENV); echo 'make setup: `$(PYTHON_SYS) -m venv` failed; on Debian install python3-venv' >&2; exit 1; }; \
	fi
	$(PY) -m pip install -q --disable-pip-version-check $(PY_PINS)
	@rm -f $(STAMPS)/venv-*
	@mkdir -p $(STAMPS) && touch $@

# --- ONNX backend node tests -------------------------------------------------
# onnx ships the generators, not the data. tests/scripts/gen_node_data.py
# asks those generators for every node case and writes ONNX's layout:
# build/onnx-node/node/test_*/{model.onnx,test_data_set_0/*.pb}.

node-data: $(STAMPS)/node-data

$(STAMPS)/node-data: $(VENV_STAMP) tests/scripts/gen_node_data.py
	$(PY) tests/scripts/gen_node_data.py $(NODE_DATA)
	@touch $@

# --- Real third-party models -------------------------------------------------
# PaddleOCR's det/rec/cls exports as shipped in the rapidocr-onnxruntime
# wheel; tests/scripts/real_models.py names them and their input shapes.

real-models: $(STAMPS)/real-models

$(STAMPS)/real-models: $(VENV_STAMP) tests/scripts/real_models.py
	@mkdir -p $(BUILD)/downloads $(MODELS)
	$(PY) -m pip download -q --disable-pip-version-check --no-deps $(RAPIDOCR) -d $(BUILD)/downloads
	$(PY) tests/scripts/real_models.py extract $(BUILD)/downloads/rapidocr_onnxruntime-1.4.4-py3-none-any.whl $(MODELS)
	$(PY) tests/scripts/real_models.py check $(MODELS)
	@touch $@

# --- The two commands ----------------------------------------------------------

test: setup llvm node-data real-models
	AOC_PYTHON=$(PY) AOC_NODE_DATA=$(NODE_DATA) AOC_MODELS=$(MODELS) \
	  cargo test --workspace
	cargo test -p aoc --features mlir --test mlir
	$(MAKE) --no-print-directory python-test

demo: setup llvm
	cargo build --release -p aoc
	@rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(AOC) import $(EXAMPLE)/model.onnx -o $(DEMO)/model.air
	$(AOC) check $(DEMO)/model.air
	$(AOC) run $(DEMO)/model.air --input $(EXAMPLE)/input.npy --output-dir $(DEMO)/out
	$(PY) tests/scripts/compare_npy.py $(EXAMPLE)/expected $(DEMO)/out --atol 1e-4
	$(AOC) opt $(DEMO)/model.air --passes default --timing --verify-rewrites -o $(DEMO)/model.opt.air
	$(AOC) run $(DEMO)/model.opt.air --input $(EXAMPLE)/input.npy --output-dir $(DEMO)/out-opt
	$(PY) tests/scripts/compare_npy.py $(EXAMPLE)/expected $(DEMO)/out-opt --atol 1e-4
	$(AOC) compile $(DEMO)/model.air --target host -o $(DEMO)/model.aoc
	$(AOC) run $(DEMO)/model.aoc --input $(EXAMPLE)/input.npy --output-dir $(DEMO)/out-cpu
	$(PY) tests/scripts/compare_npy.py $(EXAMPLE)/expected $(DEMO)/out-cpu --atol 1e-4
	$(AOC) bench $(DEMO)/model.aoc --iters 100
	$(PY) tests/scripts/make_calib.py $(EXAMPLE)/input.npy $(DEMO)/calib 32
	$(AOC) quantize $(DEMO)/model.air --calib $(DEMO)/calib -o $(DEMO)/model.int8.air --report $(DEMO)/quantize.json
	$(AOC) compile $(DEMO)/model.int8.air --target host -o $(DEMO)/model.int8.aoc
	$(AOC) run $(DEMO)/model.int8.aoc --input $(EXAMPLE)/input.npy --output-dir $(DEMO)/out-int8
	$(PY) tests/scripts/compare_npy.py $(EXAMPLE)/expected $(DEMO)/out-int8 --min-sqnr 25
	$(AOC) bench $(DEMO)/model.int8.aoc --iters 100
	$(AOC) compile $(DEMO)/model.air --target sm_86 -o $(DEMO)/model.sm_86.aoc
	@if $(AOC) run $(DEMO)/model.sm_86.aoc --input $(EXAMPLE)/input.npy --output-dir $(DEMO)/out-gpu; then \
	  $(PY) tests/scripts/compare_npy.py $(EXAMPLE)/expected $(DEMO)/out-gpu --atol 1e-3; \
	  $(AOC) bench $(DEMO)/model.sm_86.aoc --iters 100; \
	else echo "demo: no GPU here, so the sm_86 artifact was compiled but not run"; fi

# --- The Python package --------------------------------------------------------
# python/ (docs/python.md): a PyO3 extension built by maturin in release
# mode into its own target folder (it is its own cargo workspace, outside
# `cargo test --workspace`), installed into the venv as a wheel; then its
# pytest suite, run from the root so that `import aoc` is the installed
# package, not python/aoc/ without its native module. `make python`
# rebuilds what changed each time.

PY_TOOL_PINS  := maturin==1.16.0 pytest==9.2.0
PY_TOOL_STAMP := $(STAMPS)/py-tools-maturin1.16.0-pytest9.2.0
WHEELS        := $(BUILD)/wheels

$(PY_TOOL_STAMP): $(VENV_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check $(PY_TOOL_PINS)
	@rm -f $(STAMPS)/py-tools-*
	@mkdir -p $(STAMPS) && touch $@

python: $(PY_TOOL_STAMP) llvm
	@rm -rf $(WHEELS)
	cd python && CARGO_TARGET_DIR=$(CURDIR)/target/py $(VENV)/bin/maturin build --release -q -i $(PY) -o $(WHEELS)
	$(PY) -m pip install -q --disable-pip-version-check --force-reinstall --no-deps $(WHEELS)/aoc-*.whl

python-test: python
	$(PY) -m pytest -rs -q -p no:cacheprovider python/tests

# --- The C runtime library ----------------------------------------------------
# One place for it: target/release/libaoc_runtime.{a,so} with the header in
# runtime/include/; build/aoc_run_c is examples/c/main.c linked against it.

c-lib:
	cargo build --release -p aoc-runtime --features cuda
	@mkdir -p $(BUILD)
	cc -O2 examples/c/main.c -I runtime/include target/release/libaoc_runtime.a -lpthread -ldl -lm -o $(BUILD)/aoc_run_c
	@echo "C library: target/release/libaoc_runtime.a, target/release/libaoc_runtime.so (header runtime/include/aoc_runtime.h); example: build/aoc_run_c MODEL.aoc"

# --- Examples' .air files ------------------------------------------------------
# Each examples/NAME/model.onnx (made by examples/make_examples.py) imported
# as examples/NAME/model.air + model.safetensors.

examples-air:
	cargo build --release -p aoc
	@for d in examples/*; do \
	  [ -f $$d/model.onnx ] || continue; \
	  shape=; [ "$$(basename $$d)" = dynamic_batch ] && shape='--input-shape input=2x3x32x32'; \
	  echo "$(AOC) import $$d/model.onnx -o $$d/model.air $$shape"; \
	  $(AOC) import $$d/model.onnx -o $$d/model.air $$shape; \
	done

# --- Fuzzing -------------------------------------------------------------------
# libFuzzer over the .air parser and the ONNX importer (tests/fuzz/README.md),
# seeded with the filetests and the example models. cargo-fuzz needs nightly
# flags; RUSTC_BOOTSTRAP=1 allows them on stable.

FUZZ_SECONDS ?= 60

fuzz:
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
	cd tests/fuzz && mkdir -p corpus/parse_air corpus/import_onnx && \
	  find ../filetests -name '*.air' -exec cp {} corpus/parse_air/ \; && \
	  for m in ../../examples/*/model.onnx; do cp "$$m" "corpus/import_onnx/$$(basename "$$(dirname "$$m")").onnx"; done && \
	  RUSTC_BOOTSTRAP=1 cargo fuzz run parse_air corpus/parse_air -- -max_total_time=$(FUZZ_SECONDS) -max_len=8192 && \
	  RUSTC_BOOTSTRAP=1 cargo fuzz run import_onnx corpus/import_onnx -- -max_total_time=$(FUZZ_SECONDS) -max_len=400000

# --- CPU benchmarks -------------------------------------------------------------
# bench/cpu/README.md: seeded random-weight models (bench/models/build_models.py)
# compiled by aoc and timed against ONNX Runtime at the same thread counts.
# BENCH_MODELS picks models (default: all), BENCH_ARGS goes to run.py
# (e.g. BENCH_ARGS='--threads 1,2 --iters 50').

BENCH_MODELS_DIR := $(BUILD)/bench-models
BENCH_MODELS ?=
BENCH_ARGS ?=

bench-cpu: $(STAMPS)/bench-models
	cargo build --release -p aoc
	$(PY) bench/cpu/run.py $(BENCH_MODELS) --models-dir $(BENCH_MODELS_DIR) \
	  --json-out $(BUILD)/bench-cpu/results.json $(BENCH_ARGS)

$(STAMPS)/bench-models: $(VENV_STAMP) bench/models/build_models.py
	$(PY) bench/models/build_models.py $(BENCH_MODELS_DIR)
	@mkdir -p $(STAMPS) && touch $@

# --- GPU ------------------------------------------------------------------------
# `make gpu-test` on a machine with an NVIDIA GPU and driver: with cargo it
# builds and runs compiler/tests/gpu.rs (every example, OCR and zoo model compiled
# for sm_86 and sm_90a, fp32 and fp16, run on the GPU against the
# interpreter) and the runtime's CUDA tests. A GPU machine without cargo
# runs the binaries `make device-bins` built elsewhere: carry build/device
# (and examples/, build/models/) there and run `make gpu-test DEVICE=build/device`.

DEVICE ?=

gpu-test:
ifeq ($(DEVICE),)
	AOC_MODELS=$(MODELS) cargo test --release -p aoc --test gpu -- --test-threads 1
	cargo test --release -p aoc-runtime --features cuda,reference cuda
else
	AOC_BIN=$(DEVICE)/aoc AOC_ROOT=$(CURDIR) AOC_MODELS=$(MODELS) AOC_TEST_TMP=$(BUILD)/gpu-test $(DEVICE)/gpu_tests --test-threads 1
	$(DEVICE)/runtime_tests cuda
endif

device-bins: llvm
	python3 tests/scripts/device_bins.py --gpu-only

# On the GPU machine (PyTorch there): aoc against PyTorch eager, torch.compile
# and cuBLAS, same weights, same run. Needs `aoc` built (or DEVICE=...).
bench-gpu:
	python3 bench/gpu/run.py --aoc $(if $(DEVICE),$(DEVICE)/aoc,$(AOC)) --out $(BUILD)/bench-gpu/results.json

# --- LLVM 22 -------------------------------------------------------------------
# Installs llvm-22-dev, libmlir-22-dev, mlir-22-tools (mlir-opt-22, which the
# MLIR tests run) and friends from apt when llvm-config 22 or mlir-opt-22 is
# missing. The package lists are refreshed first (Debian's mirror here
# carries llvm-22-dev once updated); only when apt still does not know the
# package is apt.llvm.org's bookworm repository added.

llvm:
	@if [ -x $(LLVM_CONFIG) ] && command -v mlir-opt-22 >/dev/null; then echo "llvm: $$($(LLVM_CONFIG) --version) and mlir-opt-22 already installed"; exit 0; fi; \
	$(SUDO) apt-get update -qq; \
	if ! apt-cache show llvm-22-dev >/dev/null 2>&1; then \
	  . /etc/os-release; \
	  key=$$(mktemp); \
	  curl -fsSL -o $$key https://apt.llvm.org/llvm-snapshot.gpg.key; \
	  $(SUDO) install -D -m 644 $$key /etc/apt/keyrings/apt.llvm.org.asc; rm -f $$key; \
	  echo "deb [signed-by=/etc/apt/keyrings/apt.llvm.org.asc] http://apt.llvm.org/$$VERSION_CODENAME/ llvm-toolchain-$$VERSION_CODENAME-22 main" \
	    | $(SUDO) tee /etc/apt/sources.list.d/llvm-22.list >/dev/null; \
	fi; \
	$(SUDO) apt-get update -qq; \
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(LLVM_PACKAGES); \
	$(LLVM_CONFIG) --version

clean-build:
	rm -rf $(BUILD) $(VENV)
