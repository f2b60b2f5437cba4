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


# ---------------------------------------------------------------------------------------------
# The kernel's surface (issue 69). The audit hooks stay on: the payloads step around them as an
# attacker would, by loading the `_ctypes` extension under another module name and calling libc's
# syscall() directly. Run this file as root and as a normal user: the sandbox takes a different
# path in each (root: the run's own uid; a normal user: a user namespace).
# ---------------------------------------------------------------------------------------------

RAW = '''
def _kernel():
    """libc's syscall() through the _ctypes extension loaded as "x._ctypes" (no import for the hook to see)."""
    import importlib.machinery as machinery, importlib.util as util, os, sys
    found = [os.path.join(d, "_ctypes" + s) for d in sys.path for s in machinery.EXTENSION_SUFFIXES]
    path = next(p for p in found if os.path.exists(p))
    C = util.module_from_spec(util.spec_from_loader("x._ctypes", machinery.ExtensionFileLoader("x._ctypes", path)))

    class Long(C._SimpleCData):
        _type_ = "l"

    class Function(C.CFuncPtr):
        _flags_, _restype_ = 1 | 8, Long  # cdecl, errno kept

    class Buffer(C.Array):
        _type_, _length_ = type("Char", (C._SimpleCData,), {"_type_": "c"}), 4096

    class Libc:
        _handle = C.dlopen(None, os.RTLD_NOW)

    syscall = Function(("syscall", Libc()))

    def call(name, *args):
        """(result, errno) of syscall(name, *args): ints go as longs, a Buffer as a pointer."""
        result = syscall(Long(NUMBERS[name]), *(Long(a) if isinstance(a, int) else a for a in args))
        return result, C.get_errno()

    return call, Buffer

syscall, Buffer = _kernel()

def attempt(what, name, *args):
    """Print ESCAPE (the call worked) or held, with the errno."""
    result, error = syscall(name, *args)
    print("ESCAPE" if result >= 0 else "held", what, result, error, flush=True)
    return result
'''


def _raw(code: str) -> str:
    """`code` after the raw-syscall preamble, with this machine's syscall numbers."""
    import platform

    numbers = {
        "x86_64": {
            "keyctl": 250, "add_key": 248, "shmget": 29, "shmat": 30, "msgget": 68, "semget": 64, "socket": 41,
            "unshare": 272, "mount": 165, "ptrace": 101, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
            "memfd_create": 319, "io_uring_setup": 425, "inotify_init1": 294, "write": 1, "clone3": 435, "mq_open": 240,
        },
        "aarch64": {
            "keyctl": 219, "add_key": 217, "shmget": 194, "shmat": 196, "msgget": 186, "semget": 190, "socket": 198,
            "unshare": 97, "mount": 40, "ptrace": 117, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
            "memfd_create": 279, "io_uring_setup": 425, "inotify_init1": 26, "write": 64, "clone3": 435, "mq_open": 180,
        },
    }.get(platform.machine())  # fmt: skip
    if numbers is None:
        pytest.skip(f"no syscall numbers for {platform.machine()} in this test")
    return f"NUMBERS = {numbers!r}\n" + RAW + textwrap.dedent(code)


async def _attack(code: str, **limits: object):
    result = await run_python(_raw(code), _limits(**{"timeout_s": 20.0, **limits}))
    assert "Traceback" not in result.stderr, result.stderr
    return result


KEYRING_DRIVER = """
import asyncio, ctypes, sys
from rlvr.sandbox import SandboxLimits, run_python

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keyctl, add_key = {keyctl}, {add_key}
# a session keyring of this process's own (as pam_keyinit, systemd or runc give), holding a key
assert libc.syscall(keyctl, 1, {name!r}.encode()) > 0, ctypes.get_errno()   # KEYCTL_JOIN_SESSION_KEYRING
assert libc.syscall(add_key, b"user", b"rlvr-key", {secret!r}.encode(), {length}, -3) > 0, ctypes.get_errno()
result = asyncio.run(run_python(sys.argv[1], SandboxLimits(timeout_s=20)))
planted = libc.syscall(keyctl, 10, ctypes.c_long(-3), b"user", b"rlvr-planted", 0)   # KEYCTL_SEARCH
print(result.stdout + result.stderr + ("PLANTED" if planted > 0 else "nothing planted"))
"""


def test_the_callers_keyrings_are_out_of_reach() -> None:
    """The caller's session keyring held an API key: read it (KEYCTL_SEARCH + KEYCTL_READ), plant
    one back (add_key), join it by name, and read the user keyrings; /proc/keys lists nothing of it."""
    secret = f"sk-{uuid.uuid4().hex}"
    name = f"rlvr-test-{uuid.uuid4().hex[:8]}"
    code = _raw(f"""
        buffer = Buffer()
        for ring in (-3, -4, -5):  # @s, @u, @us
            key = attempt(f"search {{ring}}", "keyctl", 10, ring, b"user", b"rlvr-key", 0)
            if key > 0:
                size = attempt("read", "keyctl", 11, key, buffer, 4096)
                print("READ", bytes(buffer)[:max(size, 0)])
        attempt("plant", "add_key", b"user", b"rlvr-planted", b"x", 1, -3)
        attempt("join by name", "keyctl", 1, {name!r}.encode())
        try:
            print("proc keys", open("/proc/keys").read())
        except OSError as e:
            print("proc keys denied", e.errno)
        """)
    import platform

    keyctl, add_key = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
    driver = KEYRING_DRIVER.format(keyctl=keyctl, add_key=add_key, name=name, secret=secret, length=len(secret))
    done = subprocess.run([sys.executable, "-c", driver, code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "search" in out, out
    assert secret not in out and "ESCAPE" not in out and "PLANTED" not in out, out
    assert "rlvr-key" not in out and name not in out, out


async def test_sysv_ipc_cannot_hold_memory_outside_the_limit() -> None:
    """shmget 64 MiB segments, up to 8 x memory_mb's 64: each held memory that RLIMIT_AS did not
    count; SysV message queues and semaphores, and POSIX message queues, likewise."""
    result = await _attack(
        """
        import os
        for i in range(8):
            segment = attempt("shmget", "shmget", 0, 64 << 20, 0o1000 | 0o600)   # IPC_PRIVATE, IPC_CREAT
            if segment < 0:
                break
        attempt("msgget", "msgget", 0, 0o1000 | 0o600)
        attempt("semget", "semget", 0, 1, 0o1000 | 0o600)
        attempt("mq_open", "mq_open", b"q", 0o102, 0o600, 0)   # O_CREAT | O_RDWR, default size
        """,
        memory_mb=64,
    )
    assert "held shmget" in result.stdout and "ESCAPE" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    "family,kind",
    [(2, 2), (10, 2), (16, 3), (17, 3), (38, 5), (40, 1)],
    ids="inet inet6 netlink packet alg vsock".split(),
)
async def test_only_unix_sockets_open(family: int, kind: int) -> None:
    """A network namespace isolates IP; AF_VSOCK (the VM's port space), AF_NETLINK and AF_ALG reach
    the kernel past it. Every family but AF_UNIX is refused; AF_UNIX still works."""
    result = await _attack(f"""
        attempt("socket", "socket", {family}, {kind}, 0)
        print("unix works" if syscall("socket", 1, 1, 0)[0] >= 0 else "unix refused")
        """)
    assert "held socket" in result.stdout and "unix works" in result.stdout, result.stdout


async def test_no_new_namespaces_mounts_or_clone3() -> None:
    """Run by root, a nested user namespace gave full capabilities inside it, and with them mounts."""
    result = await _attack("""
        attempt("userns", "unshare", 0x10000000)             # CLONE_NEWUSER
        attempt("mountns", "unshare", 0x20000)               # CLONE_NEWNS
        attempt("mount", "mount", b"none", b"/tmp", b"tmpfs", 0, 0)
        attempt("clone3", "clone3", 0, 0)
        """)
    assert result.stdout.count("held") == 4, result.stdout


async def test_kernel_interfaces_past_the_namespaces_are_closed() -> None:
    """ptrace, bpf, perf events, userfaultfd (user-mode only needs no privilege), io_uring (whose
    requests skip the syscall filter) and inotify on shared files: each refused."""
    result = await _attack("""
        buffer = Buffer()
        attempt("ptrace", "ptrace", 0, 0, 0, 0)              # PTRACE_TRACEME
        attempt("bpf", "bpf", 0, buffer, 72)                 # BPF_MAP_CREATE (zeroed attributes)
        buffer[4:8] = (128).to_bytes(4, "little")            # perf_event_attr: type SOFTWARE 1, size 128, TASK_CLOCK 1
        buffer[0:4] = (1).to_bytes(4, "little")
        buffer[8:16] = (1).to_bytes(8, "little")
        attempt("perf", "perf_event_open", buffer, 0, -1, -1, 0)
        attempt("userfaultfd", "userfaultfd", 1)             # UFFD_USER_MODE_ONLY
        attempt("io_uring", "io_uring_setup", 1, Buffer())
        attempt("inotify", "inotify_init1", 0)
        """)
    assert result.stdout.count("held") == 6 and "ESCAPE" not in result.stdout, result.stdout


async def test_memfd_cannot_hold_memory_outside_the_limit() -> None:
    """memfd_create and write 256 MiB into it with memory_mb=64 (the pages are not in RLIMIT_AS)."""
    result = await _attack(
        """
        import os
        fd = attempt("memfd", "memfd_create", b"x", 0)
        if fd >= 0:
            block, total = b"x" * (1 << 20), 0
            try:
                for _ in range(256):
                    total += os.write(fd, block)
            except OSError as e:
                print("stopped", e)
            print("MiB", total >> 20)
        """,
        memory_mb=64,
    )
    assert "held memfd" in result.stdout, result.stdout


async def test_the_working_directory_caps_its_files() -> None:
    """Empty files cost no bytes of `disk_mb` but a kernel inode each: 20,000 of them."""
    result = await _attack(
        """
        import os
        made = 0
        try:
            for i in range(20000):
                os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY))
                made += 1
        except OSError as e:
            print("stopped", e.errno)
        print("made", made)
        """,
        max_files=1000,
    )
    assert "stopped" in result.stdout and int(result.stdout.split("made ")[1]) < 1000, result.stdout


async def test_dev_holds_no_files() -> None:
    """In a user namespace /dev (a tmpfs of no size) belonged to the code: any number of files
    under RLIMIT_FSIZE, outside `disk_mb` (with the hooks off: they refuse writes outside the
    working directory; the kernel must too)."""
    result = await _run("""
        import os
        for path in ("/dev/shm/x", "/dev/x"):
            try:
                with open(path, "wb") as f:
                    f.write(b"x" * (8 << 20))
                print("ESCAPE wrote", path)
            except OSError as e:
                print("held", path, e.errno)
        with open("/dev/null", "wb") as f:
            f.write(b"x")
        """)
    assert result.stdout.count("held") == 2 and result.ok, result.stdout + result.stderr


def test_locks_on_shared_files_tell_nothing_to_another_run() -> None:
    """A run that locks a file it shares read-only with other runs (the standard library, /dev/null)
    signals them: here the test holds the locks, and the code looks for them (flock, F_GETLK)."""
    import fcntl

    target = os.path.realpath(os.__file__)
    held = [os.open(target, os.O_RDONLY), os.open("/dev/null", os.O_RDONLY)]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)
    lock = os.open(target, os.O_RDONLY)
    fcntl.lockf(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a POSIX read lock on the whole file
    code = f"""
        import fcntl, os, struct
        for path in ({target!r}, "/dev/null"):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                print("free", path)
            except OSError as e:
                print("SEEN" if e.errno in (11, 35) else "held", path, e.errno)
            try:
                query = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
                print("SEEN" if struct.unpack("hhqqi", query)[0] != fcntl.F_UNLCK else "free", "getlk", path)
            except OSError as e:
                print("held getlk", path, e.errno)
        """
    try:
        result = asyncio.run(_run(code))
    finally:
        for fd in [*held, lock]:
            os.close(fd)
    assert result.ok, result.stderr
    assert "SEEN" not in result.stdout and result.stdout.count("held") == 4, result.stdout


async def test_proc_names_no_host_path_of_the_caller() -> None:
    """bwrap's command line (the sandbox's /proc/1/cmdline) listed every bind, and the runner's bind
    named the checkout in mountinfo: the repository and the virtual environment stay unnamed (the
    interpreter's own paths are what sys.executable says anyway)."""
    import rlvr

    hidden = {str(Path(rlvr.__file__).resolve().parents[1])}  # the checkout's src/ (or site-packages)
    if sys.prefix != sys.base_prefix:
        hidden.add(sys.prefix)  # the virtual environment (bwrap from the sandbox extra lives there)
    result = await _run("""
        for path in ("/proc/1/cmdline", "/proc/self/cmdline", "/proc/1/mountinfo", "/proc/self/mountinfo"):
            print(path, open(path, "rb").read().replace(b"\\0", b" ").decode())
        """)
    assert result.ok and "/proc/1/cmdline" in result.stdout, result.stderr
    assert not [path for path in hidden if path in result.stdout], (hidden, result.stdout)
