"""Random step files and options against `parallel-steps run` and `plan`, as a user runs them (hypothesis).

Whatever the configuration (unknown or valid field names, values of the wrong type, paths with
`..`, absolute paths, URLs, side inputs named `a/b` or `../../up`, odd YAML), the command:
exits 0, 1 or 2, never with a traceback; on exit 2 says one line `parallel-steps: ...`; and
writes nothing outside the run root and the output folder (`plan`: nothing at all). Each example
runs in its own folder, watched whole:

    <example>/a/b/sandbox/   the step file, entry script, inputs, side input; the working folder
    <example>/elsewhere/     where the absolute paths and file:// URLs of the config point
    <example>/tmp/           TMPDIR: only workers' marker files and side-input copies belong there

`..` chains stop at <example>, so every path the config can name is watched. The examples are
derandomized (the same ones in every run). Each command runs in a fresh process forked from one that
imported the CLI once (see `FORK_SERVER`): a process of its own, as `python -m parallel_steps.cli` would
be, without paying Python's start and the imports a hundred times.
"""

import json
import os
import string
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from parallel_steps.config import ParallelRunConfig

pytestmark = pytest.mark.slow  # a hundred and thirty commands

FIELDS = list(ParallelRunConfig.model_fields)
SCRIPT = "import os\n\ndef run(mini_batch):\n    return [os.path.basename(path) for path in mini_batch]\n"
BASE = {"entry_script": "score.py", "inputs": ["data"], "output": "out", "mini_batch_size": 1}
HOME = "home"  # PARALLEL_STEPS_HOME, in the sandbox: the run root when the config names none

# Paths a config may name, relative to the sandbox unless absolute; "@" is the example's folder.
PATHS = [
    "..", "../up", "../../up", "../../../up", "a/b", "./x", ".", "data/../data", "data/f0.txt", "side/model.txt",
    "missing", "out/../../escape", "@/elsewhere/abs", "@/elsewhere/existing.txt", "@/elsewhere/deep/dir/",
    "file://@/elsewhere/url-out", "file://@/a/b/sandbox/side/model.txt", "memory://bucket/x",
    "http://127.0.0.1:9/nothing", "s3://no-such-bucket/x", "${side_inputs.model}", "${env:HOME}", "nul\0byte",
]  # fmt: skip
SIDE_INPUT_NAMES = ["model", "a/b", "../../up", "..", ".", "", "x y", "${env:HOME}", "__init__", "NAME-1"]
ODD_YAML = [
    "", "~", "[]", "- a\n- b\n", "just text", "{a: [}", "entry_script: score.py\nentry_script: other.py\n",
    "!!python/object/apply:os.system ['touch pwned']\n", "\t", "a: b: c", "inputs: !!binary aGVsbG8=\n",
    "name: 2024-01-01\n", "a: &x [1]\nb: *x\n", "1: 2\ncolour: blue\n", "? [a, b]\n: c\n", "null: x\n",
]  # fmt: skip

# Text without digits: a random string never asks for thousands of workers.
text = st.text(alphabet=string.ascii_letters + "-_./:${}* ", max_size=12)
numbers = st.one_of(
    st.integers(-3, 3), st.sampled_from([0.0, 0.001, 2.5, -1.5, float("inf"), float("-inf"), float("nan")])
)
strings = st.one_of(text, st.sampled_from(["2", "-1", "0", "1MB", "10XB", "1e3", "nan", "inf", "true", "null"]))
paths = st.sampled_from(PATHS)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings, paths)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text | paths, inner, max_size=3), max_leaves=5
)
keys = st.one_of(st.sampled_from(FIELDS), text, st.integers(0, 3), st.none(), st.booleans())
# Half the fields changed are those that name paths or variables.
NAMING = ["side_inputs", "environment_variables", "arguments", "output", "run_root", "inputs", "source_directory"]
fields = st.sampled_from(FIELDS) | st.sampled_from(NAMING)


def typed(annotation) -> st.SearchStrategy:
    """Values of a field's own type: small numbers, the paths above, the choices of a Literal (Ray's aside:
    it would start a cluster)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return st.sampled_from([choice for choice in args if choice != "ray"])
    if origin in (Union, types.UnionType):
        return st.one_of([typed(arg) for arg in args])
    if origin is list:
        return st.lists(typed(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(st.sampled_from(SIDE_INPUT_NAMES) | text, typed(args[1]), max_size=2)
    simple = {
        type(None): st.none(),
        bool: st.booleans(),
        int: st.integers(-1, 3),
        float: st.sampled_from([-1, 0.05, 1, 30]),
        str: paths,
    }
    return simple.get(annotation, paths)  # inputs: datasets as paths


@st.composite
def step_files(draw) -> str:
    """A step file: the base config with a few fields set to values of their type or of any type, now and
    then a key that is no field, a base field dropped, or odd YAML instead."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(ODD_YAML))
    config = {key: value for key, value in BASE.items() if draw(st.integers(0, 14))}
    config["process_count_per_node"] = 1
    for field in draw(st.lists(fields, max_size=3, unique=True)):
        annotation = ParallelRunConfig.model_fields[field].annotation
        config[field] = draw(typed(annotation) if draw(st.integers(0, 2)) else values)
    if draw(st.integers(0, 4)) == 0:
        config[draw(keys)] = draw(values)
    return yaml.safe_dump(config, sort_keys=False)


options = st.lists(  # those of both commands
    st.one_of(
        st.tuples(st.just("--set"), st.builds("{}={}".format, st.sampled_from(FIELDS) | text, strings | paths)),
        st.tuples(st.just("--input"), paths),
        st.tuples(st.just("--"), st.sampled_from(["${side_inputs.model}", "${side_inputs.a/b}", "--x"])),
    ),
    max_size=2,
)

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])


def prepare(tmp_path: Path, step_file: str) -> Path:
    """A fresh example folder (see the module docstring); returns the sandbox."""
    top = Path(tempfile.mkdtemp(dir=tmp_path, prefix="example-"))
    sandbox = top / "a" / "b" / "sandbox"
    (sandbox / "data").mkdir(parents=True)
    (sandbox / "side").mkdir()
    for i in range(3):
        (sandbox / "data" / f"f{i}.txt").write_text(f"{i}\n")
    (sandbox / "side" / "model.txt").write_text("weights\n")
    (sandbox / "score.py").write_text(SCRIPT)
    (top / "elsewhere").mkdir()
    (top / "elsewhere" / "existing.txt").write_text("here before\n")
    (top / "tmp").mkdir()
    (sandbox / "step.yaml").write_text(step_file.replace("@", str(top)))
    return sandbox


# Reads one JSON request a line; answers each with the exit status of a fork of itself that left the loop to
# run the command as `python -m parallel_steps.cli ARGS` would: its own working folder, environment, argv
# and files for stdin/stdout/stderr; a traceback and exit 1 for an uncaught exception; at exit, the
# threads joined and the atexit handlers run (the slow rest of an interpreter's shutdown is skipped).
# SIGALRM ends a command that never does (a status of -14).
FORK_SERVER = """
import atexit, json, os, signal, sys, tempfile, threading
import _strptime, yaml  # what the commands import (a speed-up only: a child imports what is missing)
import parallel_steps.azure.pipeline, parallel_steps.cli, parallel_steps.jobs.launch, parallel_steps.pool.local.pool
import parallel_steps.report.render, parallel_steps.run.step, parallel_steps.worker.runtime

for line in sys.stdin:
    request = json.loads(line)
    child = os.fork()
    if child == 0:
        break
    print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
else:
    sys.exit(0)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
tempfile.tempdir = None  # TMPDIR as this command's environment names it
for fd, name in enumerate([os.devnull, request["stdout"], request["stderr"]]):
    os.dup2(os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC), fd)
sys.path[0] = request["cwd"]
sys.argv = [parallel_steps.cli.__file__, *request["argv"]]
signal.alarm(120)  # far beyond any of these runs: a run that never ends fails
try:
    code = parallel_steps.cli.main()
except SystemExit as exc:
    code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    code = code or 0
except BaseException:
    sys.excepthook(*sys.exc_info())
    code = 1
for thread in threading.enumerate():
    if thread is not threading.main_thread() and not thread.daemon:
        thread.join()
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


class Commands:
    """The fork server of FORK_SERVER, started once for this module (the test functions, and so the examples
    hypothesis derives from their source, stay those of one subprocess per command)."""

    def __init__(self) -> None:
        self.server: subprocess.Popen[str] | None = None
        self.streams = Path()

    def start(self, streams: Path) -> None:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        self.streams = streams  # outside the watched examples
        self.server = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def run(self, cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        """`parallel-steps ARGV` in `cwd` with `env` only, in a fresh process; its exit status, stdout, stderr."""
        assert self.server is not None, "started by the module's fixture"
        out = Path(tempfile.mkdtemp(dir=self.streams)) / "out"
        request = {"cwd": str(cwd), "argv": argv, "env": env, "stdout": str(out), "stderr": str(out.with_name("err"))}
        print(json.dumps(request), file=self.server.stdin, flush=True)
        code = int(self.server.stdout.readline())
        return subprocess.CompletedProcess(argv, code, out.read_text(), out.with_name("err").read_text())

    def stop(self) -> None:
        assert self.server is not None
        self.server.stdin.close()
        self.server.wait(timeout=30)


COMMANDS = Commands()


@pytest.fixture(scope="module", autouse=True)
def _commands(tmp_path_factory):
    COMMANDS.start(tmp_path_factory.mktemp("streams"))
    yield
    COMMANDS.stop()


def run_cli(sandbox: Path, command: str, flags: list[tuple[str, str]]) -> subprocess.CompletedProcess:
    top = sandbox.parents[2]
    args, script_args = [], []
    for flag, value in flags:
        value = value.replace("@", str(top))
        (script_args if flag == "--" else args).extend([value] if flag == "--" else [flag, value])
    env = {
        **os.environ,
        "PARALLEL_STEPS_HOME": str(sandbox / HOME),
        "TMPDIR": str(top / "tmp"),
        "PYTHONDONTWRITEBYTECODE": "1",  # Python's own caches beside the entry script are not the run's writes
    }
    return COMMANDS.run(sandbox, [command, "step.yaml", *args, *(["--", *script_args] * bool(script_args))], env)


def snapshot(top: Path) -> dict[Path, tuple]:
    """Every file and folder under `top`: (is a folder, size, modification time) for files."""
    found = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs:
            found[Path(folder, name)] = (True,)
        for name in files:
            path = Path(folder, name)
            stat = path.lstat()
            found[path] = (False, stat.st_size, stat.st_mtime_ns)
    return found


def changed(before: dict, after: dict) -> set[Path]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def named_location(value, sandbox: Path) -> Path | None:
    """Where a configured path (or file:// URL) points, as the CLI resolves it (relative to the sandbox)."""
    if not isinstance(value, str) or not value or ("://" in value and not value.startswith("file://")):
        return None
    return (sandbox / value.removeprefix("file://")).resolve()


def allowed_roots(sandbox: Path, step_file: str, flags: list[tuple[str, str]], with_output: bool) -> list[Path]:
    """The run roots (default and named) and, for a run that got past the checks, the output folder."""
    top = sandbox.parents[2]
    try:
        config = yaml.safe_load(step_file.replace("@", str(top)))
    except yaml.YAMLError:
        config = None
    named = dict(config) if isinstance(config, dict) else {}
    for flag, value in flags:  # the options win over the step file, as in the CLI
        value = value.replace("@", str(top))
        if flag == "--set" and value.partition("=")[0] in ("output", "run_root"):
            named[value.partition("=")[0]] = value.partition("=")[2]
    roots = [sandbox / HOME, named_location(named.get("run_root"), sandbox)]
    if with_output:
        roots.append(named_location(named.get("output"), sandbox))
    return [root for root in roots if root is not None]


def temporary(path: Path, top: Path) -> bool:
    """What may appear in TMPDIR while a run goes: workers' markers and the side-input copies."""
    if not path.is_relative_to(top / "tmp"):
        return False
    parts = path.relative_to(top / "tmp").parts
    marker = len(parts) == 1 and parts[0].startswith("parallel-steps-worker-")
    return marker or parts[:2] in (("parallel_steps",), ("parallel_steps", "side_inputs"))


def check(tmp_path: Path, command: str, step_file: str, flags: list[tuple[str, str]]) -> None:
    sandbox = prepare(tmp_path, step_file)
    top = sandbox.parents[2]
    before = snapshot(top)
    result = run_cli(sandbox, command, flags)
    event(f"exit {result.returncode}")  # pytest --hypothesis-show-statistics: how many got past the checks

    assert result.returncode in (0, 1, 2), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("parallel-steps: "), result.stderr
    roots = allowed_roots(sandbox, step_file, flags, with_output=result.returncode != 2) if command == "run" else []
    outside = [
        path
        for path in changed(before, snapshot(top))
        if not any(path == root or path.is_relative_to(root) for root in roots) and not temporary(path, top)
    ]
    assert not outside, f"written outside the run root and the output folder: {sorted(map(str, outside))}"


@settings(max_examples=80, **SETTINGS)
@given(step_file=step_files(), flags=options)
@example(  # copied from a URL: a name with `..` would put the copy outside the run's side-inputs folder
    step_file=yaml.safe_dump({**BASE, "side_inputs": {"../../up": "file://@/a/b/sandbox/side/model.txt"}}), flags=[]
)
@example(step_file=yaml.safe_dump({**BASE, "side_inputs": {"a/b": "side/model.txt"}}), flags=[])
@example(step_file=yaml.safe_dump({**BASE, "output": "../../../up", "run_root": "@/elsewhere/runs"}), flags=[])
@example(step_file=yaml.safe_dump({**BASE, "environment_variables": {"A=B": "x"}}), flags=[])
def test_run_exits_cleanly_and_writes_only_its_run_root_and_output(tmp_path, step_file, flags):
    check(tmp_path, "run", step_file, flags)


@settings(max_examples=50, **SETTINGS)
@given(step_file=step_files(), flags=options)
@example(step_file="1: 2\ncolour: blue\n", flags=[])
@example(step_file=yaml.safe_dump({**BASE, "side_inputs": [None]}), flags=[])
def test_plan_exits_cleanly_and_writes_nothing(tmp_path, step_file, flags):
    check(tmp_path, "plan", step_file, flags)
