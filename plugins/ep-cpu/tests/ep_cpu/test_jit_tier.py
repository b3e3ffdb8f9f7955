"""The jit tier's switch: option and environment variable, a machine without numba, what
``epoxy providers`` says, and the thread policy. Kernels' values: test_jit_kernels.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from _hostile import one_node
from _jit_cases import run_cpu

import epoxy_ep_cpu.jit as jit_pkg
from epoxy.errors import InvalidArgumentError
from epoxy_ep_cpu import jit
from epoxy_ep_cpu.factory import CpuProviderFactory
from epoxy_ep_cpu.jit import probe
from epoxy_ep_cpu.jit.probe import Availability
from epoxy_ep_cpu.settings import TABLE, building_with

numba = pytest.importorskip("numba")

_MISSING = Availability(False, reason="numba cannot be imported: ModuleNotFoundError: No module named 'numba'")


def _calls(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> list[object]:
    """Record the calls of the compiled wrapper ``module.name`` (still running it)."""
    mod = __import__(f"epoxy_ep_cpu.jit.kernels_{module}", fromlist=[name])
    real = getattr(mod, name)
    seen: list[object] = []

    def spy(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, name, spy)
    return seen


def _softmax_case():
    return one_node("Softmax", [np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)], {}, 13)


def test_option_parses_on_off_and_bools():
    assert TABLE.parse({"jit": "on"}).jit is True
    assert TABLE.parse({"jit": "OFF"}).jit is False
    assert TABLE.parse({"jit": "0"}).jit is False
    assert TABLE.parse({"jit": True}).jit is True
    with pytest.raises(InvalidArgumentError):
        TABLE.parse({"jit": "maybe"})
    with pytest.raises(InvalidArgumentError):
        TABLE.parse({"jit_threads": -1})


def test_environment_variable_sets_the_default_and_an_option_overrides_it(monkeypatch):
    monkeypatch.setenv("EPOXY_CPU_JIT", "0")
    assert TABLE.parse({}).jit is False
    assert TABLE.parse({"jit": "on"}).jit is True
    monkeypatch.setenv("EPOXY_CPU_JIT", "1")
    assert TABLE.parse({}).jit is True


def test_jit_on_runs_the_compiled_kernel_and_off_does_not(monkeypatch):
    seen = _calls(monkeypatch, "softmax", "run_softmax")
    case = _softmax_case()
    on = run_cpu(case, True)
    assert len(seen) == 1
    off = run_cpu(case, False)
    assert len(seen) == 1  # the numpy path ran
    np.testing.assert_allclose(on[0], off[0], rtol=1e-6)


def test_missing_numba_runs_the_numpy_path_and_says_why(monkeypatch):
    seen = _calls(monkeypatch, "softmax", "run_softmax")
    monkeypatch.setattr(jit_pkg, "availability", lambda: _MISSING)
    monkeypatch.setattr(probe, "availability", lambda: _MISSING)
    import epoxy_ep_cpu.provider  # noqa: F401 - the provider resolves threads through the package too

    out = run_cpu(_softmax_case(), True)
    assert not seen and out[0].shape == (3, 7)
    assert jit.kernels("softmax") is None
    line = CpuProviderFactory().options()["jit"]
    assert "unavailable" in line and "No module named 'numba'" in line and "numpy kernels run" in line


def test_providers_listing_says_jit_is_available_here():
    from epoxy.cli.providers_cmd import collect

    cpu = next(p for p in collect("cpu")["providers"] if p["name"] == "cpu")
    assert f"numba {numba.__version__} available" in cpu["options"]["jit"]
    assert "jit_threads" in cpu["options"]


def test_nothing_is_compiled_or_imported_when_building_with_jit_off():
    with building_with(TABLE.parse({"jit": "off"})):
        assert jit.kernels("softmax") is None


def test_thread_count_follows_the_option_and_is_capped_by_numbas_pool():
    ceiling = numba.config.NUMBA_NUM_THREADS
    with building_with(TABLE.parse({"jit_threads": 1})):
        assert jit.thread_count() == 1
    with building_with(TABLE.parse({"jit_threads": 10_000})):
        assert jit.thread_count() == ceiling


def test_thread_count_follows_intra_op_num_threads(monkeypatch):
    """0 (the default) follows the BLAS pool, which the session set from intra_op_num_threads."""
    import epoxy
    from epoxy.run.threads import set_blas_threads
    from epoxy_ep_cpu.jit import kernels_softmax, threads

    before = threads.blas_count() or 1
    set_blas_threads(1)
    try:
        assert threads.resolve(0) == 1
        used: list[int] = []
        monkeypatch.setattr(numba, "set_num_threads", used.append)
        monkeypatch.setattr(threads, "_local", threading.local())
        opts = epoxy.SessionOptions(intra_op_num_threads=1)
        case = _softmax_case()
        sess = epoxy.InferenceSession(case.model.SerializeToString(), opts, providers=[("cpu", {"jit": True})])
        counts: list[int] = []
        real_pick = threads.pick
        monkeypatch.setattr(kernels_softmax, "pick", lambda p, s, n, w: counts.append(n) or real_pick(p, s, n, w))
        sess.run(None, case.feeds)
        assert counts == [1]
        assert used == []  # one thread: the serial twin runs, numba's count is never set
    finally:
        set_blas_threads(before)


def test_small_work_runs_on_one_thread_and_a_count_is_set_only_when_it_changes(monkeypatch):
    from epoxy_ep_cpu.jit import threads

    used: list[int] = []
    monkeypatch.setattr(numba, "set_num_threads", used.append)
    monkeypatch.setattr(threads, "_local", threading.local())
    threads.use(2, 10)
    threads.use(2, threads.GRAIN - 1)
    threads.use(2, 2 * threads.GRAIN)
    threads.use(2, 100 * threads.GRAIN)
    threads.use(4, 3 * threads.GRAIN)
    assert used == [1, 2, 3]


def test_cache_dir_defaults_under_the_user_cache_and_a_users_numba_setting_wins(monkeypatch, tmp_path):
    from numba.core import config as numba_config

    from epoxy_ep_cpu.jit import config

    monkeypatch.setattr(numba_config, "CACHE_DIR", numba_config.CACHE_DIR)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv(config.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.default_cache_dir() == tmp_path / "epoxy" / "numba"
    monkeypatch.setenv(config.CACHE_ENV, str(tmp_path / "mine"))
    config.configure()
    assert numba_config.CACHE_DIR == str(tmp_path / "mine" / f"sources-{config.sources_digest()}")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "users"))
    config.configure()
    assert numba_config.CACHE_DIR == str(tmp_path / "users")


def test_kernel_cache_folder_follows_the_sources(tmp_path):
    """numba keys a cached kernel on its own file only, so a helper edited in another module
    (an activation inlined into every conv kernel) must change the folder: any source change
    does, the same sources elsewhere (a new checkout) give the same folder."""
    import shutil

    from epoxy_ep_cpu.jit import config

    here = Path(config.__file__).parent
    copy = tmp_path / "jit"
    shutil.copytree(here, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert config.sources_digest(copy) == config.sources_digest()
    helper = copy / "activations.py"
    helper.write_text(helper.read_text() + "\n# edited\n")
    assert config.sources_digest(copy) != config.sources_digest()
    assert config.kernel_cache_dir().name == f"sources-{config.sources_digest()}"
    assert config.kernel_cache_dir().parent == config.default_cache_dir()


def test_a_kernels_module_imported_first_still_caches_in_the_sources_folder(tmp_path):
    """numba fixes a dispatcher's cache folder when the module defining it is imported: one
    imported before any session (a test, a user) must not fall back to the package's
    __pycache__, whose entries outlive edits of the helpers the kernels inline."""
    import subprocess
    import sys

    code = ("from epoxy_ep_cpu.jit import config, kernels_conv\n"
            "print(kernels_conv.flat_serial._cache._cache_path)\n"
            "print(config.kernel_cache_dir())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
    env["EPOXY_CPU_JIT_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    used, expected = out.stdout.split()
    assert used == str(Path(expected) / "epoxy_ep_cpu.jit") and expected.startswith(str(tmp_path))


def test_openmp_workers_sleep_unless_the_user_chose_a_wait_policy(monkeypatch):
    """Spinning OpenMP workers fight OpenBLAS's spinning workers for the cores (docs/THREADING.md):
    the tier asks for sleeping workers, and a user's own OMP_WAIT_POLICY wins."""
    from epoxy_ep_cpu.jit import config

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    config.configure()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    config.configure()
    assert os.environ["OMP_WAIT_POLICY"] == "active"


def test_concurrent_runs_from_many_threads_match_serial_runs():
    """Parallel kernels launched from 8 threads at once (the thread-safe layer): bit-identical
    to serial runs, with work large enough to use every numba thread."""
    from concurrent.futures import ThreadPoolExecutor

    from onnx import TensorProto, helper

    import epoxy

    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["p"], axis=-1),
             helper.make_node("GlobalAveragePool", ["x4"], ["g"])]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((256, 512)).astype(np.float32),
             "s": rng.standard_normal(512).astype(np.float32), "b": rng.standard_normal(512).astype(np.float32),
             "x4": rng.standard_normal((2, 64, 32, 32)).astype(np.float32)}
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, f32, v.shape) for k, v in feeds.items()],
                              [helper.make_tensor_value_info("p", f32, None),
                               helper.make_tensor_value_info("g", f32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=[("cpu", {"jit": True, "jit_threads": 2})])
    serial = sess.run(None, feeds)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: sess.run(None, feeds), range(64)))
    for got in results:
        assert all(np.array_equal(a, b) for a, b in zip(got, serial))


_NO_NUMBA_UNTIL_NEEDED = """
import sys
import numpy as np
from onnx import TensorProto, helper
import epoxy
def model(op):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
feeds = {"x": np.ones((2, 3), np.float32)}
epoxy.InferenceSession(model("Relu"), providers=["cpu"]).run(None, feeds)
epoxy.InferenceSession(model("Softmax"), providers=[("cpu", {"jit": "off"})]).run(None, feeds)
print("numba" in sys.modules)
epoxy.InferenceSession(model("Softmax"), providers=["cpu"]).run(None, feeds)
print("numba" in sys.modules)
"""


def test_numba_is_imported_only_by_a_jit_kernel_being_built():
    """Importing epoxy, and sessions whose kernels have no compiled twin or jit off, leave
    numba unimported (a fresh process: this one imported it already)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "EPOXY_CPU_JIT"}  # the default, whatever this run set
    out = subprocess.run([sys.executable, "-c", _NO_NUMBA_UNTIL_NEEDED], capture_output=True, text=True, check=True,
                         env=env)
    assert out.stdout.split() == ["False", "True"]


_SERIAL_TWINS = """
import numpy as np
from epoxy_ep_cpu.jit import kernels_softmax
x = np.ones((2, 8, 1), np.float32)
kernels_softmax.softmax_serial(x, False, np.empty_like(x))
stats = kernels_softmax.softmax_serial.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_serial_twins_load_from_the_disk_cache(tmp_path) -> None:
    """The serial twins (the kernels one thread runs) are cached like their parallel kernels: a
    second process loads them instead of compiling again (seconds at every first run)."""
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "EPOXY_CPU_JIT": "1"}
    runs = [subprocess.run([sys.executable, "-c", _SERIAL_TWINS], capture_output=True, text=True, check=True,
                           env=env).stdout.split() for _ in range(2)]
    (first_hits, first_misses), (second_hits, second_misses) = ([int(v) for v in run] for run in runs)
    assert (first_hits, first_misses) == (0, 1) and (second_hits, second_misses) == (1, 0), runs


def _package_copy(folder: Path, edit: str | None = None) -> Path:
    """The installed epoxy_ep_cpu copied under ``folder`` (another install path); ``edit``:
    a line appended to its jit tier's ``activations.py`` (other sources)."""
    import shutil

    import epoxy_ep_cpu

    target = folder / "epoxy_ep_cpu"
    shutil.copytree(Path(epoxy_ep_cpu.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        helper = target / "jit" / "activations.py"
        helper.write_text(helper.read_text() + edit)
    return folder


@pytest.mark.parametrize("users_dir", [False, True], ids=["default-dir", "users-numba-dir"])
def test_the_same_sources_installed_elsewhere_load_the_cached_kernels(tmp_path, users_dir) -> None:
    """numba names a kernel's cache folder after its install path: each venv (each nox session
    in CI) compiled every kernel again. The tier's locator (jit/kernel_cache.py) keys them by
    package and sources instead: a second install of the same sources loads what the first
    compiled, and edited sources (another digest) compile their own."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env["EPOXY_CPU_JIT"] = "1"
    if users_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "users")
    else:
        env["EPOXY_CPU_JIT_CACHE_DIR"] = str(tmp_path / "cache")

    def counts(install: Path) -> tuple[int, int]:
        run = subprocess.run([sys.executable, "-c", _SERIAL_TWINS], capture_output=True, text=True, timeout=600,
                             env={**env, "PYTHONPATH": str(install)}, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        hits, misses = (int(v) for v in run.stdout.split())
        return hits, misses

    first = counts(_package_copy(tmp_path / "venv-a"))
    second = counts(_package_copy(tmp_path / "venv-b"))
    edited = counts(_package_copy(tmp_path / "venv-c", edit="\n# edited\n"))
    assert (first, second, edited) == ((0, 1), (1, 0), (0, 1))


def test_a_numba_without_the_locator_list_keeps_its_own_locators(monkeypatch) -> None:
    """The locator hooks into numba's list of locator classes; a numba that has none (a later
    release reorganizing its cache) must not break the tier: install() says so and changes
    nothing, and numba's own locators serve the kernels (one folder per install, as before)."""
    from epoxy_ep_cpu.jit import kernel_cache

    assert kernel_cache.install()  # this numba has the list, and the locator is in it (once)
    impl = kernel_cache._CACHE_IMPL
    assert impl._locator_classes.count(kernel_cache.InstalledKernelLocator) == 1
    monkeypatch.setattr(kernel_cache, "_CACHE_IMPL", None)
    assert not kernel_cache.install()


#: a child's run of a tier kernel (right values checked), then its cache statistics in ``stats``
_SOFTMAX_RUN = """
x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8, 1)
out = np.empty_like(x)
kernels_softmax.softmax_serial(x, False, out)
e = np.exp(x - x.max(axis=1, keepdims=True))
assert np.allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-7), out
stats = kernels_softmax.softmax_serial.stats
"""

_LOADED_WITHOUT_REFRESH = """
import sys
import numpy as np
from epoxy_ep_cpu.jit import kernels_softmax
""" + _SOFTMAX_RUN + """
loaded = "numba.np.linalg" in sys.modules  # imported by numba's full target refresh only
from numba.core.runtime import rtsys
nrt_compiled = rtsys._init  # NRT's own module: compiled by numba's path and by a compile only
import numba
@numba.njit
def users_own(a):  # compiled after the light load: numba refreshes the context itself
    return np.sqrt(a).sum()
assert abs(users_own(np.full(4, 4.0)) - 8.0) < 1e-12
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()), loaded, nrt_compiled, rtsys._init)
"""


@pytest.mark.parametrize("full_refresh", ["", "1"], ids=["light", "numbas-own-path"])
def test_a_cached_kernel_loads_without_numbas_full_refresh(tmp_path, full_refresh) -> None:
    """A second process loads the tier's cached kernel with the runtime's C functions registered
    but without numba's full target refresh (every lowering registry imported: ~60 ms and ~10 MB
    of a fresh process's first run) and without compiling NRT's own module (~30 MB;
    jit/cached_loading.py): right values, and a function compiled afterwards (one that allocates
    through NRT) still compiles and runs. ``EPOXY_CPU_JIT_FULL_REFRESH=1`` keeps numba's own path."""
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "EPOXY_CPU_JIT": "1",
           "EPOXY_CPU_JIT_FULL_REFRESH": full_refresh}
    runs = [subprocess.run([sys.executable, "-c", _LOADED_WITHOUT_REFRESH], capture_output=True, text=True,
                           env=env, timeout=600) for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    first, second = (run.stdout.split() for run in runs)
    assert first[:2] == ["0", "1"] and second[:2] == ["1", "0"], (first, second)
    assert second[2:4] == (["True", "True"] if full_refresh else ["False", "False"]), second
    assert second[4] == "True" and first[3:] == ["True", "True"], (first, second)


_LIGHT_LOAD_FAILS = """
import numpy as np
from numba.core import caching
import epoxy_ep_cpu.jit.kernel_cache  # noqa: F401 - installs the light loader
from epoxy_ep_cpu.jit import cached_loading, kernels_softmax
real = caching.Cache._load_overload
failed = []
def broken(self, sig, target_context):  # the light path's load fails once (a numba change, a bad entry)
    if not failed:
        failed.append(1)
        raise RuntimeError("light load failed")
    return real(self, sig, target_context)
caching.Cache._load_overload = broken
""" + _SOFTMAX_RUN + """
print(len(failed), sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_a_light_load_that_fails_is_retried_on_numbas_own_path(tmp_path) -> None:
    """When the light path cannot load a cached kernel, numba's own loading takes it from the
    cache (no compile, right values) instead of the session failing."""
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "EPOXY_CPU_JIT": "1", "EPOXY_CPU_JIT_FULL_REFRESH": ""}
    warm = subprocess.run([sys.executable, "-c", _LOADED_WITHOUT_REFRESH], capture_output=True, text=True, env=env,
                          timeout=600)
    assert warm.returncode == 0, warm.stderr[-2000:]
    run = subprocess.run([sys.executable, "-c", _LIGHT_LOAD_FAILS], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1", "1", "0"], run.stdout
