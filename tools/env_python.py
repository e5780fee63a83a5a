#!/usr/bin/env python3
"""env_python: a sandboxed Python code tool, as an rlfuse environment
(docs/environments.md, "The calculator and the code tool", says what holds
where and what the hostile snippets measured).

Usage: tools/py tools/env_python.py --checkpoint CKPT.h5 [--tokenizer-json F] [--chat [--chat-role ROLE]]
           [--sandbox bwrap|rlimits] [--cpu-seconds 5] [--wall-seconds 10] [--memory-mb 512] [--procs 16]
           [--file-mb 16] [--disk-mb 64] [--output-bytes 65536] [--show-chars 2000] [--python /usr/bin/python3]

The code is the last complete <tool_call>CODE</tool_call> of the model's
segment (CODE may be fenced as ```python ... ```, or the Hermes JSON form
{"name": "python", "arguments": {"code": "CODE"}}), else the last fenced
```python ... ``` block. It runs as a fresh program, and the answer is what
it printed (standard output and error together; the first --show-chars
characters, then how many more there were), "(no output)" when nothing,
and, when it did not end normally, one line saying what happened:
  [exit status N]                       (": memory limit of M MiB" after a MemoryError)
  [killed: CPU time limit of S s]       [killed: wall time limit of S s]
  [killed: output limit of B bytes]     [killed: file size limit of M MiB]
  [killed by signal NAME]
Reward 0, not done. A segment without code is the model's answer: done, no
observation. Calls are independent: nothing carries over from one to the
next.

Model-written code is hostile input. Each call runs in a separate process
tree in a fresh temporary directory (removed afterwards) with rlimits:
CPU seconds per process (SIGXCPU, then SIGKILL a second later), address
space per process (--memory-mb), tasks (--procs: processes and threads),
bytes per file written (--file-mb), 64 open files, no core files; a wall
clock limit on the whole call and a cap on the bytes it may print
(--output-bytes), past which it is killed. Run as root, it runs the code
under a user id of its own (2000000000 + this process's pid), so the task
limit counts that call's tasks alone and its files and signals reach
nothing else; run as another user, the task limit is that user's tasks
at the call plus --procs.

--sandbox bwrap (the default) runs it through bubblewrap (Debian's
bubblewrap; make deps installs it) in new user, pid, network, mount, ipc,
uts and cgroup namespaces: it sees /usr read-only (the system's programs
and Python's libraries), /etc/alternatives and /etc/ld.so.cache (shared
library links), a fresh /proc and a minimal read-only /dev, and its
working directory /work, a tmpfs of --disk-mb holding main.py; nothing
else of the machine's files exists for it (no /etc/passwd, /home, /tmp,
the repository), only the loopback network, no further user namespaces;
the whole tree dies with the call. At start a trivial program is run that
way, and a machine where bubblewrap cannot make its namespaces is refused
in one line naming --sandbox rlimits.

--sandbox rlimits: the same limits without namespaces, for a machine where
they are not allowed. The working directory is the temporary directory
itself and Python's audit hooks in the program refuse opening files
outside it and /usr, listing or changing other directories, sockets,
starting programs, signals and ctypes. Audit hooks are no security
boundary (a determined program can get around them), so this protects
against mistakes, not attacks: the uid of its own (as root) is what keeps
it from writing the machine's files, and world-writable places (/tmp)
stay writable to a program that gets around the hooks.
"""
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rlfuse_env import EnvError, Environment, last_tool_call, main  # noqa: E402

UID_BASE = 2000000000
NOFILE = 64
MAX_CODE = 64 * 1024
SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/work", "TMPDIR": "/work", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# --sandbox rlimits: the audit hook installed before main.py runs (argv[1]: the directory it may use)
AUDIT_HOOK = r'''
import os, sys, runpy
W = os.path.realpath(sys.argv[1])
READ = tuple(sorted({W, "/usr", os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}))
BLOCK = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
         "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "ctypes.", "os.chroot", "pty.spawn", "os.startfile")
WPATH = ("os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "os.chmod", "os.chown", "os.truncate",
         "os.utime", "os.chflags", "os.lchmod", "os.mkfifo", "os.mknod", "shutil.rmtree", "shutil.copyfile", "shutil.move")
RPATH = ("os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk")
def inside(p, roots):
    if isinstance(p, int) or p is None:
        return True
    p = os.path.realpath(os.fsdecode(p))
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)
def hook(event, args):
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        if not inside(path, (W,) if write else READ):
            raise PermissionError(f"sandbox: {'writing' if write else 'reading'} {path} is not allowed")
    elif event.startswith(BLOCK) and event != "ctypes.dlopen":  # importing ctypes opens the process itself: numpy does
        raise PermissionError(f"sandbox: {event} is not allowed")
    elif event in WPATH:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not inside(a, (W,)):
                raise PermissionError(f"sandbox: {event} {a} is not allowed")
    elif event in RPATH and args and not inside(args[0] if args[0] is not None else ".", READ):
        raise PermissionError(f"sandbox: {event} {args[0]} is not allowed")
sys.argv = ["main.py"]
sys.addaudithook(hook)
runpy.run_path("main.py", run_name="__main__")
'''


def tasks_of(uid):
    """The tasks (threads) that user UID runs now, by /proc."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/status") as f:
                    st = dict(line.split(":", 1) for line in f if ":" in line)
                if int(st["Uid"].split()[0]) == uid:
                    n += int(st["Threads"])
            except (OSError, KeyError, ValueError):
                pass  # gone meanwhile
    return n


def become_subreaper():
    """Orphans of this process's children (a sandbox's inner processes once its outer one is killed) become its
    children, so reap() collects them rather than an init that may not (a container's first process)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass  # not Linux: orphans go to init as usual


def reap(seconds):
    """Collect exited children for up to SECONDS, until none is left."""
    end = time.monotonic() + seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > end:
                return
            time.sleep(0.005)


def kill_uid(uid):
    """SIGKILL every process of user UID (a call's own user id) and reap them, until none is left."""
    for _ in range(100):
        found = False
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if os.stat(f"/proc/{p}").st_uid == uid:
                        os.kill(int(p), signal.SIGKILL)
                        found = True
                except OSError:
                    pass
        if not found:
            return
        reap(0.01)


def root_view():
    """bwrap arguments for the top-level links and folders of the machine's /usr layout (merged /usr or not)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ("/etc/alternatives", "/etc/ld.so.cache"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return args


class Sandbox:
    """Runs Python code under the limits (module docstring); run(code) -> (output bytes, status line or None)."""

    def __init__(self, args):
        self.a = args
        self.uid = UID_BASE + os.getpid() if os.geteuid() == 0 else None
        become_subreaper()
        if args.sandbox == "bwrap":
            self.bwrap = shutil.which("bwrap")
            if not self.bwrap:
                raise EnvError("bwrap (bubblewrap) not found: apt-get install bubblewrap (make deps installs it), "
                               "or --sandbox rlimits (weaker: docs/environments.md)")
            self.view = root_view()
        bad = [n for n in ("cpu_seconds", "wall_seconds", "memory_mb", "procs", "file_mb", "disk_mb", "output_bytes", "show_chars")
               if not getattr(args, n) > 0]
        if bad:
            raise EnvError(f"--{bad[0].replace('_', '-')} must be positive, got {getattr(args, bad[0])}")
        if not os.path.isabs(args.python) or not os.access(args.python, os.X_OK):
            raise EnvError(f"--python {args.python}: not an absolute path to an executable")
        if args.sandbox == "bwrap" and not args.python.startswith("/usr/"):
            raise EnvError(f"--python {args.python}: the sandbox sees only /usr; name an interpreter there")
        if args.sandbox == "rlimits" and self.uid is not None:
            t = q = os.path.realpath(tempfile.gettempdir())
            while True:  # every folder on the way must let other users through
                if not os.stat(q).st_mode & 0o001:
                    raise EnvError(f"the temporary folder {t} is closed to other users ({q}), and the code runs as "
                                   f"user id {self.uid}: set TMPDIR to an open folder such as /tmp")
                if q == "/":
                    break
                q = os.path.dirname(q)
        out, status = self.run("print(6 * 7)")
        if out != b"42\n" or status:
            why = (out.decode("utf-8", "replace").strip().splitlines() or [status or "no output"])[-1]
            raise EnvError(f"the {args.sandbox} sandbox cannot run a trivial program here ({why})"
                           + ("; --sandbox rlimits runs without namespaces (weaker: docs/environments.md)" if args.sandbox == "bwrap" else ""))

    def _limits(self):
        a = self.a
        resource.setrlimit(resource.RLIMIT_CPU, (a.cpu_seconds, a.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (a.memory_mb << 20, a.memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (a.file_mb << 20, a.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))
        if self.uid is not None:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

    def _bwrap_command(self, fd_code):
        env = [x for k, v in SANDBOX_ENV.items() for x in ("--setenv", k, v)]
        return ([self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"] + self.view
                + ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--size", str(self.a.disk_mb << 20), "--tmpfs", "/work",
                   "--ro-bind-data", str(fd_code), "/work/main.py", "--remount-ro", "/", "--chdir", "/work", "--clearenv"]
                + env + [self.a.python, "-I", "-u", "main.py"])

    def _kill(self, p):
        """Ends the call's processes; its exit status."""
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass  # already gone
        rc = p.wait()
        if self.uid is not None:
            kill_uid(self.uid)  # whatever left the process group (setsid) or the namespace's parent
        reap(1.0)
        return rc

    def run(self, code):
        a = self.a
        self.nproc = a.procs if self.uid is not None else a.procs + tasks_of(os.getuid())
        data = code.encode("utf-8", "surrogateescape")
        d, fd_code = None, -1
        try:
            if a.sandbox == "bwrap":  # main.py is copied into the sandbox's own tmpfs from a memory file
                fd_code = os.memfd_create("main.py")
                os.write(fd_code, data)
                os.lseek(fd_code, 0, os.SEEK_SET)
                cmd, cwd, env = self._bwrap_command(fd_code), "/", {"PATH": "/usr/bin:/bin"}
            else:  # a fresh directory of the machine's, its user's alone
                d = tempfile.mkdtemp(prefix="rlfuse-env-python.")
                with open(os.path.join(d, "main.py"), "wb") as f:
                    f.write(data)
                if self.uid is not None:
                    os.chown(d, self.uid, self.uid)
                    os.chown(os.path.join(d, "main.py"), self.uid, self.uid)
                cmd, cwd, env = [a.python, "-I", "-u", "-c", AUDIT_HOOK, d], d, dict(SANDBOX_ENV, HOME=d, TMPDIR=d)
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 preexec_fn=self._limits, start_new_session=True, close_fds=True,
                                 pass_fds=(fd_code,) if fd_code >= 0 else ())
            if fd_code >= 0:
                os.close(fd_code)
                fd_code = -1
            out, why = bytearray(), None
            fd = p.stdout.fileno()
            while True:
                left = t0 + a.wall_seconds - time.monotonic()
                if left <= 0:
                    why = f"wall time limit of {a.wall_seconds:g} s"
                    break
                r, _, _ = select.select([fd], [], [], min(left, 0.1))
                if r:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    out += chunk
                    if len(out) > a.output_bytes:
                        why = f"output limit of {a.output_bytes} bytes"
                        break
                elif p.poll() is not None:  # ended: what it wrote last, not what a left-behind process holds open
                    os.set_blocking(fd, False)
                    try:
                        while len(out) <= a.output_bytes:
                            chunk = os.read(fd, 1 << 16)
                            if not chunk:
                                break
                            out += chunk
                    except BlockingIOError:
                        pass
                    break
            rc = self._kill(p)
            p.stdout.close()
            del out[a.output_bytes:]
            return bytes(out), status_line(rc, why, a, bytes(out), time.monotonic() - t0)
        finally:
            if fd_code >= 0:
                os.close(fd_code)
            if d:
                shutil.rmtree(d, ignore_errors=True)


def status_line(rc, why, a, out, seconds):
    """The line saying how the program ended (after SECONDS of wall time), or None for exit status 0."""
    if why:
        return f"[killed: {why}]"
    sig = -rc if rc < 0 else rc - 128 if a.sandbox == "bwrap" and 128 < rc < 128 + 65 else 0  # bwrap exits 128 + the signal
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and seconds >= a.cpu_seconds):
        return f"[killed: CPU time limit of {a.cpu_seconds} s]"  # SIGKILL: the hard limit, a second later (an earlier one is another's)
    if sig == signal.SIGXFSZ:
        return f"[killed: file size limit of {a.file_mb} MiB]"
    if sig:
        return f"[killed by signal {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}]"
    if rc == 0:
        return None
    last = out.decode("utf-8", "replace").rstrip().splitlines()[-1:] or [""]
    return f"[exit status {rc}" + (f": memory limit of {a.memory_mb} MiB]" if last[0].startswith("MemoryError") else "]")


FENCE = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.S)


def extract_code(text):
    """The code of the model's segment TEXT (module docstring), or None."""
    call = last_tool_call(text)
    if call is None:
        blocks = FENCE.findall(text)
        return blocks[-1] if blocks else None
    s = call.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
            args = obj.get("arguments") if isinstance(obj, dict) else None
            args = json.loads(args) if isinstance(args, str) else args
            if isinstance(args, dict) and isinstance(args.get("code"), str):
                return args["code"]
        except ValueError:
            pass  # not the JSON form: run as it is (it fails and says so)
    blocks = FENCE.findall(call)
    return blocks[-1] if blocks else call


def observation(out, status, show_chars):
    text = out.decode("utf-8", "replace")
    if len(text) > show_chars:
        text = text[:show_chars] + f"\n[... {len(text) - show_chars} more characters]"
    if not text and not status:
        return "(no output)"
    if status:
        text += ("" if not text or text.endswith("\n") else "\n") + status
    return text


class PythonTool(Environment):
    """A sandboxed Python code tool: <tool_call>CODE</tool_call> answered with what the code printed."""

    def __init__(self, args=None):
        super().__init__(args)
        self.sandbox = Sandbox(args)

    @classmethod
    def add_arguments(cls, p):
        p.add_argument("--sandbox", choices=("bwrap", "rlimits"), default="bwrap",
                       help="bwrap: namespaces through bubblewrap (default); rlimits: limits and audit hooks only (weaker)")
        for name, default, what in (("cpu-seconds", 5, "CPU seconds per process"), ("memory-mb", 512, "address space per process, MiB"),
                                    ("procs", 16, "tasks (processes and threads)"), ("file-mb", 16, "bytes per file written, MiB"),
                                    ("disk-mb", 64, "the working directory's tmpfs (bwrap), MiB"),
                                    ("output-bytes", 65536, "bytes the program may print before it is killed"),
                                    ("show-chars", 2000, "characters of its output in the answer")):
            p.add_argument("--" + name, type=int, default=default, help=f"{what} (default {default})")
        p.add_argument("--wall-seconds", type=float, default=10.0, help="wall-clock seconds per call (default 10)")
        p.add_argument("--python", default="/usr/bin/python3", help="the interpreter that runs the code (default /usr/bin/python3)")

    def step(self, state, text, ids, turn):
        code = extract_code(text)
        if code is None:
            return None, 0.0, True, None  # no code: the model answered
        if len(code.encode("utf-8", "surrogateescape")) > MAX_CODE:
            return f"[refused: the code is over {MAX_CODE} bytes]", 0.0, False, None
        out, status = self.sandbox.run(code)
        return observation(out, status, self.args.show_chars), 0.0, False, None


if __name__ == "__main__":
    main(PythonTool)
