"""One nox session per package, each in its own venv with only that package's declared
dependencies (plus pytest), then cross-package integration and the ONNX conformance suite.

    nox                 # every test session (what CI runs)
    nox -s ep_cpu       # one package
    nox -s bench        # benchmarks (not run by default)
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["core", "sdk", "ep_cpu", "ep_openvino", "template", "integration", "conformance", "ep_coreml",
                        "ep_cuda", "reliability", "fuzz", "models_ml", "models_torch", "examples", "pictures", "serve",
                        "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = False

ONNX_PIN = "onnx==1.23.*"  # conformance counts are comparable only on one onnx release
PYTEST = ["pytest>=8", "pytest-xdist>=3"]
# docs/MODEL_ZOO.md lists the ops each exporter writes: it holds for one release of each
EXPORTERS = ["skl2onnx==1.20.*", "onnxmltools==1.16.*"]


def _pytest(session: nox.Session, *paths: str, parallel: bool = False) -> None:
    args = ["-q", "-p", "no:cacheprovider", *paths]
    if parallel:
        args = ["-n", "auto", *args]
    session.run("pytest", *args, *session.posargs)


@nox.session
def core(session: nox.Session) -> None:
    """epoxy-core alone (test-only providers, no ep-cpu; onnxruntime only as an oracle)."""
    session.install("./core", "onnxruntime", *PYTEST)
    _pytest(session, "core/tests", parallel=True)


@nox.session
def sdk(session: nox.Session) -> None:
    """epoxy-sdk: the conformance kit checked against good and broken providers; the scaffold
    (``epoxy sdk new-provider``) checked by installing what it writes into a throwaway venv
    (uv builds that venv in seconds)."""
    session.install("./core", "./sdk[conformance]", ONNX_PIN, "uv", *PYTEST)
    # the kit's pytester runs and the throwaway venv are independent tests: two workers halve it
    _pytest(session, "sdk/tests", parallel=True)


@nox.session
def ep_cpu(session: nox.Session) -> None:
    """epoxy-ep-cpu kernels (onnx.reference and onnxruntime as oracles), with the numba tier on
    (the default); then the tests of the ops that have a compiled kernel again with it off, so
    both paths run in CI."""
    # ./sdk: its onnxruntime_oracle says where onnxruntime multiplies uint8 x int8 exactly here
    session.install("./core", "./sdk", "./plugins/ep-cpu[image]", ONNX_PIN, "onnxruntime", "hypothesis", *PYTEST)
    _pytest(session, "plugins/ep-cpu/tests", parallel=True)
    # the jit-off pass skips the test files whose every session names its ``jit`` setting
    # (they already ran both ways above); test_jit_tier/test_jit_special keep default ones
    explicit = ("test_jit_conv.py", "test_jit_elementwise.py", "test_jit_kernels.py", "test_jit_pool.py")
    session.run("pytest", "-n", "auto", "-q", "-p", "no:cacheprovider", "plugins/ep-cpu/tests",
                *(f"--ignore=plugins/ep-cpu/tests/ep_cpu/{name}" for name in explicit),
                "-k", "norm or softmax or pool or jit or conv", env={"EPOXY_CPU_JIT": "0"})


@nox.session
def ep_openvino(session: nox.Session) -> None:
    """epoxy-ep-openvino: capability, grouping, options, errors, cache; light models vs cpu and
    vs the outputs onnx stores for them; com.microsoft ops against onnxruntime (their
    definition); then the ONNX backend suite with openvino first (cpu fallback).

    The suite's 9 ``real`` cases (the light_* models) are deselected there, not dropped:
    ``test_light_model_runs_entirely_on_openvino`` runs each of them with openvino first on
    the suite's own inputs and checks the suite's expected outputs (as ``run_case`` does), so
    vgg19 & co. are compiled for openvino once per session, not twice (~35 s of CI)."""
    session.install("./core", "./sdk", "./plugins/ep-cpu[image]", "./plugins/ep-openvino", ONNX_PIN, "onnxruntime",
                    *PYTEST)
    _pytest(session, "plugins/ep-openvino/tests", parallel=True)
    session.env["EPOXY_CONFORMANCE_PROVIDERS"] = "openvino,cpu"
    _pytest(session, "tests/conformance/test_backend_suite.py", "-k", "not [real/", parallel=True)


@nox.session
def template(session: nox.Session) -> None:
    """The provider template passes the SDK's API scope."""
    session.install("./core", "./sdk[conformance]", "./sdk/template", *PYTEST)
    _pytest(session, "sdk/template/tests")


@nox.session
def examples(session: nox.Session) -> None:
    """The packages ``epoxy sdk new-provider`` writes (examples/: one kernel provider, one
    compiling provider), installed as users would, pass the tests they ship."""
    session.install("./core", "./sdk[conformance]", "./examples/ep-example", "./examples/ep-example-compiler", *PYTEST)
    _pytest(session, "examples/ep-example/tests")
    _pytest(session, "examples/ep-example-compiler/tests")


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package: CLI (incl. bench against onnxruntime), broken plugins, control flow, functions."""
    session.install("./core", "./sdk", "./plugins/ep-cpu", ONNX_PIN, "onnxruntime", *PYTEST)
    _pytest(session, "tests/integration", parallel=True)


@nox.session
def conformance(session: nox.Session) -> None:
    """The ONNX backend test suite (2033 cases) through epoxy with ep-cpu, each plan run as
    generated straight-line code from its first run (``EPOXY_STRAIGHT_LINE=always``; the other
    sessions run each plan once, interpreted)."""
    session.install("./core", "./sdk", "./plugins/ep-cpu[image]", ONNX_PIN, *PYTEST)
    session.env["EPOXY_STRAIGHT_LINE"] = "always"
    _pytest(session, "tests/conformance", parallel=True)


@nox.session
def ep_coreml(session: nox.Session) -> None:
    """epoxy-ep-coreml on any OS: ops converted to MIL, checked by a numpy MIL interpreter against ep-cpu."""
    session.install("./core", "./plugins/ep-cpu", "./plugins/ep-coreml", ONNX_PIN, *PYTEST)
    _pytest(session, "plugins/ep-coreml/tests", parallel=True)


@nox.session
def ep_coreml_macos(session: nox.Session) -> None:
    """epoxy-ep-coreml predictions through Core ML (run on a Mac; not in the default list)."""
    session.install("./core", "./plugins/ep-cpu", "./plugins/ep-coreml", ONNX_PIN, *PYTEST)
    _pytest(session, "plugins/ep-coreml/tests", "-m", "macos")


@nox.session
def ep_cuda(session: nox.Session) -> None:
    """epoxy-ep-cuda without a GPU: plugin listing, capability/partitioning and kernels on a
    simulated device, and NVRTC compiling every kernel source (CuPy + the NVRTC wheel need
    no driver). GPU tests are marked ``gpu`` and skip themselves; plugins/ep-cuda/gpu_check.sh
    runs them on a GPU machine."""
    session.install("./core", "./plugins/ep-cpu", "./plugins/ep-cuda[cuda13]", "nvidia-cuda-nvrtc>=13,<14",
                    ONNX_PIN, *PYTEST)
    _pytest(session, "plugins/ep-cuda/tests", parallel=True)


@nox.session
def reliability(session: nox.Session) -> None:
    """Limits, feeds, external data, threads, broken providers (the fuzzer is ``nox -s fuzz``).
    The soak is a script: tests/reliability/soak.py."""
    session.install("./core", "./sdk", "./plugins/ep-cpu[image]", ONNX_PIN, "hypothesis", *PYTEST)
    _pytest(session, "tests/reliability", parallel=True)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Hostile models and feeds (tests/fuzz): the harness's own tests, the corpus replayed, and a
    short budget on a fixed seed through epoxy (two workers; EPOXY_FUZZ_CASES / _SEED / _WORKERS
    change it). The long budget, next to onnxruntime, is a script: tests/fuzz/fuzz.py run
    (docs/FUZZING.md)."""
    session.install("./core", "./plugins/ep-cpu[image]", ONNX_PIN, "onnxruntime", *PYTEST)
    # the harness's tests mostly wait (hangs, killed workers) while the short budget (its own
    # two worker processes) computes: two xdist workers overlap them
    _pytest(session, "tests/fuzz", parallel=True)


@nox.session
def models_ml(session: nox.Session) -> None:
    """The classical-ML zoo: scikit-learn, LightGBM and XGBoost models written by skl2onnx and
    onnxmltools in the tests, each run by epoxy (cpu, and openvino+cpu) and onnxruntime
    (docs/MODEL_ZOO.md).

    xgboost-cpu is XGBoost's CPU-only wheel (same ``xgboost`` import): the ``xgboost`` wheel
    pulls nvidia-nccl-cu12 and ships CUDA code, ~680 MB more to download and install (this
    session's venv: 1.1 GB against 431 MB). scikit-learn<1.11:
    SVC(probability=True), in the zoo because users' models hold it, is removed in 1.11."""
    session.install("./core", "./plugins/ep-cpu", "./plugins/ep-openvino", ONNX_PIN, "onnxruntime", "scikit-learn<1.11",
                    "pandas", *EXPORTERS, "lightgbm", "xgboost-cpu", *PYTEST)
    _pytest(session, "tests/models", parallel=True)


@nox.session(venv_backend="venv")
def models_torch(session: nox.Session) -> None:
    """The torch zoo: CNNs and tiny Hugging Face transformers written by torch.onnx (TorchScript
    and dynamo) and by onnxruntime's optimizer and quantizers, run by epoxy (cpu, openvino+cpu)
    and onnxruntime (docs/MODEL_ZOO_TORCH.md).

    pip in a plain venv, not uv: ``torch==2.13.0`` resolves to the local CPU wheel
    (torch-2.13.0+cpu from pip's find-links) that uv does not see; elsewhere a CUDA torch
    (3+ GB) would come from PyPI: set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
    Where torch cannot be installed the session skips, saying why."""
    import nox.command

    try:
        session.install("torch==2.13.0")
    except nox.command.CommandFailed as failure:
        reason = f"torch==2.13.0 could not be installed here ({failure.reason or 'pip failed'}): the torch zoo needs it"
        print(reason)
        session.skip(reason)
    # ./sdk: onnxruntime_oracle (7-bit weights for onnxruntime's quantizers where its u8s8 saturates)
    session.install("./core", "./sdk", "./plugins/ep-cpu", "./plugins/ep-openvino", ONNX_PIN, "onnxruntime",
                    "transformers", "onnxscript", *PYTEST)
    _pytest(session, "tests/models_torch", parallel=True)


@nox.session(venv_backend="uv")
def serve(session: nox.Session) -> None:
    """epoxy-serve: the Open Inference Protocol codec alone, then each engine end to end with
    tritonclient as the client: Ray Serve / Ray Data on a local 2-CPU Ray cluster started in the
    test module, and Triton through PyTriton's own tritonserver. A few minutes; the engines'
    modules start and stop their servers themselves.

    PyTriton pins numpy<2, and pyarrow 26 (Ray Data's) refuses to import under numpy 1.x
    (unconstrained by its metadata): pyarrow<26 keeps both engines in one venv. A user installing
    only epoxy-serve[ray] gets numpy 2 and the newest pyarrow."""
    session.install("./core", "./plugins/ep-cpu", "./serve[ray,triton,client]", "pyarrow<26", ONNX_PIN, "onnxruntime",
                    *PYTEST)
    # serial on purpose: with two xdist workers (--dist loadfile) the Ray module's 2-CPU cluster
    # shares the two cores and slows down by what the other modules save (measured: 175 s both ways)
    _pytest(session, "serve/tests")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree (rules: pyproject.toml [tool.ruff.lint]); a few seconds."""
    session.install("ruff==0.17.*")  # new ruff releases add checks: bump deliberately
    session.run("ruff", "check", ".", *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the public packages, epoxy and epoxy_sdk (pyproject.toml [tool.mypy]).
    numpy and mypy are pinned to the releases checked: their stubs and checks change."""
    session.install("./core", "./sdk[conformance]", ONNX_PIN, "numpy==2.4.*", "mypy==1.20.*")
    session.run("mypy", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against onnxruntime (and OpenVINO when installable); not a test."""
    session.install("./core", "./plugins/ep-cpu", ONNX_PIN, "onnxruntime", "threadpoolctl")
    session.run("python", "bench/compare.py", *session.posargs)


@nox.session
def pictures(session: nox.Session) -> None:
    """``epoxy partition --html/--svg`` with the ``pictures`` extra (igraph): the graph model,
    writers and layout, then the page rendered by headless Chromium on openvino + cpu (those
    tests skip, saying why, where no ``chromium`` binary is on PATH: ``apt-get install chromium``)."""
    session.install("./core[pictures]", "./plugins/ep-cpu", "./plugins/ep-openvino", ONNX_PIN, "pillow", *PYTEST)
    _pytest(session, "core/tests/core/test_partition_picture.py", "tests/integration/test_partition_page_chromium.py")
