"""Escapes from the Python sandbox (issue 15): each test runs an attack and asserts that it is stopped.

The attacks are those that worked against the sandbox that relied on audit hooks: paths resolved
against `dir_fd` or a changed directory, `sys._getframe` reaching the runner and switching its checks
off, `_cffi_backend` calling libc, and reading the parent's `/proc/<pid>/environ`; then the bounds
that must hold for the whole process tree (fork and memory bombs, disk filling, the wall clock, the
death of the parent), sockets, and the overhead of one call.

Where the sandbox has the switch, the attacks run with its audit hooks off (`audit_hooks=False`):
what is tested is what the kernel stops, not what the interpreter happens to catch. Payloads that
meet a hook try libc through `_cffi_backend` next, as an attacker would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from child_process import descendants

from rlvr.sandbox import SandboxLimits, run_python

python_math = pytest.importorskip("python_math")

MiB = 1024 * 1024


def _limits(**values: object) -> SandboxLimits:
    """SandboxLimits with the fields this version of the sandbox has (older ones lack `disk_mb`)."""
    names = {f.name for f in dataclasses.fields(SandboxLimits)}
    return SandboxLimits(**{k: v for k, v in values.items() if k in names})  # type: ignore[arg-type]


async def _run(code: str, limits: SandboxLimits | None = None):
    """Run `code` with the interpreter layer off where the sandbox allows it."""
    hooks_off = {"audit_hooks": False} if "audit_hooks" in inspect.signature(run_python).parameters else {}
    return await run_python(textwrap.dedent(code), limits or _limits(timeout_s=10.0), **hooks_off)


# libc through cffi's backend (installed with cryptography), for payloads that meet an audit hook.
LIBC = """
def libc(name, args, result="int"):
    import _cffi_backend as B
    types = {"int": B.new_primitive_type("int"), "long": B.new_primitive_type("long"),
             "str": B.new_pointer_type(B.new_primitive_type("char"))}
    lib = B.load_library(None, 0)
    return lib.load_function(B.new_function_type(tuple(types[a] for a in args), types[result], False), name)

def fork():
    import os
    try:
        return os.fork()
    except PermissionError:
        return libc("fork", ())()

def spawn(n, child):
    # fork up to n children that run child(); how many started
    import os
    started = 0
    for _ in range(n):
        try:
            pid = fork()
        except OSError:
            break
        if pid == 0:
            try:
                child()
            finally:
                os._exit(0)
        if pid < 0:
            break
        started += 1
    return started
"""

# Paths checked against the current directory but resolved against `dir_fd` (the first escape),
# so that the payloads below get past a path check in the interpreter and meet only the kernel.
PATHS = """
import os
_top = os.open(".", os.O_RDONLY)
_depth = len(os.getcwd().split("/")) - 1
os.makedirs("d/" * (_depth + 4), exist_ok=True)
os.chdir("d/" * (_depth + 4))

def host(path, flags=os.O_RDONLY):
    return os.open("../" * _depth + path.lstrip("/"), flags, dir_fd=_top)

def read(path):
    fd = host(path)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)
"""


@pytest.fixture
def secret_files(tmp_path: Path):
    """Files the sandbox must not read: one in $HOME, one in a temporary directory, with a marker."""
    marker = f"rlvr-secret-{uuid.uuid4().hex}"
    home_file = Path.home() / f".rlvr-sandbox-test-{uuid.uuid4().hex[:8]}"
    tmp_file = tmp_path / "secret.txt"
    for f in (home_file, tmp_file):
        f.write_text(marker)
    try:
        yield marker, [str(home_file), str(tmp_file)]
    finally:
        home_file.unlink()


async def test_dir_fd_and_chdir_cannot_reach_host_files(secret_files) -> None:
    """A relative path checked against the current directory but resolved against `dir_fd`."""
    marker, files = secret_files
    escape = f"/tmp/rlvr-escape-{uuid.uuid4().hex[:8]}"
    code = f"""
        import os
        depth = len(os.getcwd().split("/")) - 1
        top = os.open(".", os.O_RDONLY)
        os.makedirs("d/" * (depth + 4), exist_ok=True)
        os.chdir("d/" * (depth + 4))       # '..' x depth stays inside the working directory from here
        up = "../" * depth
        for path in {["/etc/passwd", "/etc/shadow", *files]!r}:
            try:
                fd = os.open(up + path.lstrip("/"), os.O_RDONLY, dir_fd=top)
                print("READ", path, os.read(fd, 200))
            except OSError as e:
                print("denied", path, type(e).__name__)
        try:
            fd = os.open(up + {escape.lstrip("/")!r}, os.O_WRONLY | os.O_CREAT, dir_fd=top)
            os.write(fd, b"x")
            print("WROTE")
        except OSError as e:
            print("denied write", type(e).__name__)
        os.chdir("/")
        for path in {["etc/passwd", *(f.lstrip("/") for f in files)]!r}:
            try:
                print("READ", path, open(path).read(200))
            except OSError as e:
                print("denied", path, type(e).__name__)
        """
    result = await _run(code)
    try:
        assert result.ok, result.stderr
        assert "READ" not in result.stdout and marker not in result.stdout, result.stdout
        assert not Path(escape).exists()
    finally:
        Path(escape).unlink(missing_ok=True)


async def test_getframe_cannot_switch_the_checks_off(secret_files) -> None:
    """Reach the runner's frame and replace the path check's code: the files stay out of reach."""
    marker, files = secret_files
    code = f"""
        import sys

        def allow_all():
            real = fsdecode = sep = None
            def inside(path, roots):
                return real or fsdecode or sep or True
            return inside

        frame = sys._getframe(1)
        while frame is not None:
            for value in list(frame.f_locals.values()):
                code = getattr(value, "__code__", None)
                if code is not None and code.co_name == "inside":
                    value.__code__ = allow_all().__code__
                    print("patched")
            frame = frame.f_back
        for path in {["/etc/passwd", "/etc/shadow", *files]!r}:
            try:
                print("READ", path, open(path).read(200))
            except OSError as e:
                print("denied", path, type(e).__name__)
        """
    # with the hooks on: this attack is against them
    result = await run_python(textwrap.dedent(code), _limits(timeout_s=10.0))
    assert "READ" not in result.stdout and marker not in result.stdout, result.stdout


async def test_cffi_libc_runs_nothing_as_root_and_reads_nothing(secret_files) -> None:
    """libc's system/open/getuid through `_cffi_backend`, or plain os calls where it is not there."""
    marker, files = secret_files
    code = (
        LIBC
        + f"""
import os
try:
    getuid, system = libc("getuid", ()), libc("system", ("str",))
    opener, read = libc("open", ("str", "int")), libc("read", ("int", "str", "long"), "long")
    print("uid", getuid())
    print("system", system(b"id; cat /etc/shadow"))
    for path in {["/etc/shadow", "/etc/passwd", *files]!r}:
        fd = opener(path.encode(), 0)
        print("open", path, fd)
except ImportError as e:
    print("no cffi:", e)
    print("uid", os.getuid())
    print("system", os.system("id"))
"""
    )
    result = await _run(code)
    assert "uid 0" not in result.stdout and "uid=0" not in result.stdout, result.stdout
    assert "root:" not in result.stdout and marker not in result.stdout
    assert all(f"open {p} -1" in result.stdout for p in files) or "no cffi" in result.stdout, result.stdout


async def test_runs_as_an_unprivileged_user_with_no_capabilities() -> None:
    result = await _run(
        "import os\nprint(os.getuid(), os.geteuid(), os.getgid())\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])"
    )
    uid, euid, gid, caps = result.stdout.split()
    assert result.ok and uid != "0" and euid != "0" and gid != "0" and int(caps, 16) == 0, result.stdout


def test_parent_environ_and_other_processes_are_out_of_sight() -> None:
    """Walk /proc from the code up through its parents, reading each environment and command line.

    The key is in the initial environment of the process that runs the sandbox (what
    /proc/<pid>/environ shows), as OPENAI_API_KEY is for `rlvr eval`.
    """
    secret = f"sk-{uuid.uuid4().hex}"
    code = (
        PATHS
        + """
pid = "self"
while pid:
    for what in ("environ", "cmdline"):
        try:
            print(pid, what, [v for v in read(f"/proc/{pid}/{what}").split(b"\\0") if b"KEY" in v], flush=True)
        except OSError as e:
            print(pid, what, "denied", type(e).__name__, flush=True)
    status = dict(line.split(":", 1) for line in read(f"/proc/{pid}/status").decode().splitlines())
    pid = int(status["PPid"])
print("pids", sorted(int(p) for p in os.listdir(host("/proc")) if p.isdigit()), flush=True)
print("env", sorted(os.environ), flush=True)
"""
    )
    driver = (
        "import asyncio, inspect, sys\nfrom rlvr.sandbox import SandboxLimits, run_python\n"
        "off = {'audit_hooks': False} if 'audit_hooks' in inspect.signature(run_python).parameters else {}\n"
        f"r = asyncio.run(run_python({code!r}, SandboxLimits(timeout_s=10), **off))\n"
        "print(r.stdout, r.stderr, str(r.ok))\n"
    )
    out = _with_key(driver, secret)
    assert secret not in out, out
    assert out.endswith("True"), out
    visible = json.loads(out.split("pids ")[1].split("\n")[0])
    assert len(visible) <= 3, visible  # its own /proc: a handful of pids
    names = set(json.loads(out.split("env ")[1].split("\n")[0].replace("'", '"')))
    assert names <= {"HOME", "TMPDIR", "PWD", "LANG", "LC_CTYPE", "PATH"} | {
        f"{x}_NUM_THREADS" for x in ("OMP", "OPENBLAS", "MKL")
    }


def test_tool_messages_carry_no_key_end_to_end() -> None:
    """The scripted model of the report: python_math's run_python walks /proc to its parents' environ."""
    secret = f"sk-{uuid.uuid4().hex}"
    steal = (
        PATHS
        + """
pid = "self"
while pid:
    try:
        print([v for v in read(f"/proc/{pid}/environ").split(b"\\0") if b"KEY" in v], flush=True)
    except OSError as e:
        print(e, flush=True)
    pid = int(dict(l.split(":", 1) for l in read(f"/proc/{pid}/status").decode().splitlines())["PPid"])
"""
    )
    driver = f"""
import asyncio, json
import python_math
from rlvr import Policy
from rlvr.engine import run_rollouts
from rlvr.types import Completion, ToolCall

def model(messages, rng):
    if not any(m["role"] == "tool" for m in messages):
        call = ToolCall("c0", "run_python", json.dumps({{"code": {steal!r}}}))
        return Completion(text="", tool_calls=[call], finish_reason="tool_calls")
    return "<answer>0</answer>"

env = python_math.load_environment(num_eval_examples=2)
rollouts = asyncio.run(run_rollouts(env, Policy(model), env.tasks(), concurrency=2))
print(json.dumps([m["content"] for r in rollouts for m in r.completion if m["role"] == "tool"]))
"""
    tool_messages = json.loads(_with_key(driver, secret))
    assert len(tool_messages) == 2 and not any(secret in m for m in tool_messages), tool_messages


def _with_key(driver: str, secret: str) -> str:
    """Run `driver` in a new interpreter whose initial environment holds an API key; its stdout."""
    env = {**os.environ, "OPENAI_API_KEY": secret, "RLVR_TEST_KEY": secret}
    done = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_fork_bomb_is_bounded() -> None:
    code = LIBC + "import time\nprint('children', spawn(40, lambda: time.sleep(3)))\n"
    result = await _run(code, _limits(timeout_s=10.0, max_processes=0))
    assert "children 0" in result.stdout or not result.stdout, result.stdout + result.stderr
    result = await _run(code, _limits(timeout_s=10.0, max_processes=3))
    assert result.stdout.startswith("children ") and int(result.stdout.split()[1]) <= 3, result.stdout


async def test_memory_is_bounded_across_children() -> None:
    """Children that each take 256 MiB: the tree holds at most (1 + max_processes) x memory_mb."""
    code = (
        LIBC
        + """
import os, time

def hog():
    block = bytearray(256 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    os.write(1, b"+")
    time.sleep(1)

for _ in range(spawn(8, hog)):
    os.wait()
"""
    )
    result = await _run(code, _limits(timeout_s=15.0, memory_mb=512, max_processes=2))
    assert result.stdout.count("+") <= 2, result.stdout + result.stderr


async def test_disk_filling_is_bounded() -> None:
    """Many files under the per-file limit: the working directory as a whole is capped."""
    code = """
        import os
        total = 0
        try:
            for i in range(40):
                with open(f"f{i}", "wb") as f:
                    f.write(b"x" * (8 * 1024 * 1024))
                total += 8
        except OSError as e:
            print(type(e).__name__, e.errno)
        print("MiB", total)
        """
    result = await _run(code, _limits(timeout_s=20.0, file_size_mb=16, disk_mb=64))
    assert result.ok, result.stderr
    assert int(result.stdout.split("MiB")[1]) <= 64, result.stdout


async def test_the_wall_clock_holds_for_a_child_that_leaves_the_group() -> None:
    code = (
        LIBC
        + """
import os, time
if fork() == 0:
    try:
        os.setsid()
    except Exception:
        libc("setsid", ())()
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""
    )
    t0 = time.monotonic()
    run = asyncio.create_task(_run(code, _limits(timeout_s=2.0, max_processes=1)))
    await asyncio.sleep(1.0)
    tree = descendants(os.getpid())
    assert any(_is_sandbox(p) for p in tree), {p: _cmdline(p) for p in tree}
    result = await run
    assert result.timed_out and time.monotonic() - t0 < 8
    await asyncio.sleep(0.3)
    assert not _alive(tree)


async def test_sockets_reach_nothing_on_the_host() -> None:
    """A TCP listener on the host's loopback and an abstract Unix socket: neither is reachable."""
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    name = f"\0rlvr-test-{uuid.uuid4().hex}"
    unix.bind(name)
    unix.listen()
    tcp.setblocking(False)
    unix.setblocking(False)
    code = f"""
        import socket
        for family, address in ((socket.AF_INET, ("127.0.0.1", {tcp.getsockname()[1]})), (socket.AF_UNIX, {name!r})):
            try:
                s = socket.socket(family)
                s.settimeout(2)
                s.connect(address)
                print("CONNECTED", address)
            except OSError as e:
                print("denied", type(e).__name__)
        try:
            print("RESOLVED", socket.gethostbyname("pypi.org"))
        except OSError as e:
            print("denied", type(e).__name__)
        """
    try:
        result = await _run(code)
        assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout, result.stdout
        assert result.stdout.count("denied") == 3, result.stdout + result.stderr
        for listener in (tcp, unix):
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        tcp.close()
        unix.close()


# Adopts the processes orphaned under it (a child subreaper), so that nothing the killed caller
# started can leave the test's sight; prints the caller's pid, then reaps until it is killed.
KEEPER = """
import ctypes, os, subprocess, sys, time
if ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise SystemExit("prctl failed")
caller = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]])
print(caller.pid, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.02)
"""


# The caller: one sandboxed run of a minute's sleep. With `die_at_spawn` it SIGKILLs itself as soon
# as the run's settings are in the pipe, while bubblewrap is still setting the sandbox up.
CALLER = """
import asyncio, os, sys
import rlvr.sandbox
from rlvr.sandbox import SandboxLimits, run_python

if sys.argv[1] == "die_at_spawn":
    spawn = rlvr.sandbox.spawn

    async def spawn_and_die(*args, **kwargs):
        proc = await spawn(*args, **kwargs)
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), 9)  # runs once the settings are written
        return proc

    rlvr.sandbox.spawn = spawn_and_die
result = asyncio.run(run_python("import time\\ntime.sleep(60)", SandboxLimits(timeout_s=60)))
print("the sandbox ended early:", repr(result)[:2000], file=sys.stderr)  # (seen only when it did)
"""


@pytest.mark.parametrize("when", ["during_setup", "mid_run"])
def test_kill_9_of_the_parent_kills_the_sandbox_and_leaves_nothing(tmp_path: Path, when: str) -> None:
    """`rlvr` killed with SIGKILL while bubblewrap sets the sandbox up (before bwrap's own
    parent-death signal is armed: the code then ran to its end) or while the code runs: every
    process it started dies within seconds, and no file is left behind."""
    keeper = subprocess.Popen(
        [sys.executable, "-c", KEEPER, CALLER, "die_at_spawn" if when == "during_setup" else "wait"],
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    try:
        assert keeper.stdout is not None
        caller = int(keeper.stdout.readline())
        if when == "mid_run":
            deadline = time.monotonic() + 60  # (20 was once too short: the suite beside two busy loops on 2 cores)
            while time.monotonic() < deadline and not any(_is_runner(p) for p in descendants(caller)):
                time.sleep(0.02)
            assert any(_is_runner(p) for p in descendants(caller)), f"the sandbox never started: {_where(caller)}"
            time.sleep(0.3)
            os.kill(caller, 9)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (_alive({caller}) or _alive(descendants(keeper.pid))):
            time.sleep(0.05)
        assert not _alive({caller}), "the caller did not die"
        assert not _alive(descendants(keeper.pid))
        assert not list(tmp_path.iterdir())
    finally:
        os.killpg(keeper.pid, 9)
        keeper.wait()
        keeper.stdout.close()  # type: ignore[union-attr]


async def test_overhead_of_one_call() -> None:
    """A trivial program, start to finish, costs a few bare interpreter starts (measured in turn
    with it, so a loaded machine slows both alike): about 4 on an idle machine; a regression of
    5x fails. The absolute claim (under 150 ms median, idle) is benchmarks/bench_sandbox.py's."""

    async def bare() -> None:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", "pass")
        await proc.wait()

    await run_python("pass")  # warm-up (the first call checks what the machine allows)
    await bare()
    sandboxed, baseline = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        result = await run_python("pass")
        sandboxed.append(time.perf_counter() - t0)
        assert result.ok
        t0 = time.perf_counter()
        await bare()
        baseline.append(time.perf_counter() - t0)
    ratio = statistics.median(sandboxed) / statistics.median(baseline)
    assert ratio < 20 and statistics.median(sandboxed) < 2.0, (sandboxed, baseline)


def _alive(pids: set[int]) -> dict[int, str]:
    """Those of `pids` still running (zombies waiting for init to reap them are dead), with their command lines."""
    alive = {}
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive[pid] = _cmdline(pid)
    return alive


def _where(root: int) -> dict[int, str]:
    """`root` and the processes under it, each with its state, the kernel function it waits in, and
    its command line: what a sandbox that did not start was stuck on (seen once, in a loaded suite)."""
    found = {}
    for pid in sorted({root} | descendants(root)):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except (OSError, IndexError):
            continue
        found[pid] = f"{state} {wchan or '-'} {_cmdline(pid)[:300]}"
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_runner(pid: int) -> bool:
    """The sandbox's interpreter itself (not bubblewrap, whose command line names the runner too)."""
    line = _cmdline(pid)
    return "runner.py" in line and "bwrap" not in line.split(" ", 1)[0]


def _is_sandbox(pid: int) -> bool:
    """A sandbox's interpreter: the runner file, or (the first sandbox) a temporary directory in its config."""
    line = _cmdline(pid)
    return "rlvr-sandbox-" in line or "runner.py" in line
