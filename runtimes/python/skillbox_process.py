"""`subprocess` for scripts in the sandbox, where WebAssembly has no
processes.

`install()` replaces `subprocess.Popen` (and so `run`, `call`,
`check_call`, `check_output`, `getoutput`), `os.system`, `os.popen` and
`shutil.which`. What a child is, is decided by its argv[0]:

- `python`, `python3`, `sys.executable`: a Python child, run here, in
  this interpreter, with its own argv, streams, working folder and
  environment for the time it runs. It shares every limit of the call
  (time, fuel, memory, output, quotas), as the issue of nested runs asks:
  nothing is reset for it.
- anything else: asked of the host through the door, `/run/skillbox`.
  The guest writes `N.request` (JSON) and opens `N.reply`; the host
  answers before the open returns: it runs a program the user granted
  the skill in its OS sandbox, or refuses, in words that say how to grant
  it. `programs.json` in the door lists what is granted.

A child runs when the script first waits for it (`communicate`, `wait`,
`poll`, reading its output), with everything written to its stdin by
then: there is no concurrency between a script and its children.
"""

import base64
import io
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import traceback
import types

DOOR = "/run/skillbox"
# Where a child's own modules come from (the rest stays imported).
_CHILD_FOLDERS = ("/skill/", "/workspace/", "/tmp/")
_PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")
# The last refusal, for the `skillbox:` hint after a failure.
LAST_REFUSAL = [None]
# The programs that ran, by name, and the last that exited non-zero:
# (name, exit code, the last line it printed to stderr).
STARTED = set()
FAILED = [None]
_counter = [0]
_granted = [None]


def granted():
    """The programs the host lets this call start, by name (a dict), or
    None when the call may start none (no door)."""
    if _granted[0] is None:
        try:
            with open(DOOR + "/programs.json", encoding="utf-8") as f:
                _granted[0] = json.load(f).get("programs") or {}
        except (OSError, ValueError):
            _granted[0] = False
    return _granted[0] or None


def _is_python(program):
    name = os.path.basename(program)
    return bool(_PYTHON_NAME.fullmatch(name)) or (sys.executable and program == sys.executable)


def door_exchange(request):
    """Sends one request (a dict) through the door; returns the reply, an
    open binary file already taken out of the door. FileNotFoundError
    when the call has no door."""
    _counter[0] += 1
    path = f"{DOOR}/{_counter[0]}"
    with open(path + ".request", "w", encoding="utf-8") as f:
        json.dump(request, f)
    reply = open(path + ".reply", "rb")
    try:
        os.remove(path + ".reply")
    except OSError:
        pass
    return reply


def _ask_host(argv, cwd, env, stdin, timeout=None):
    """Asks the host to run a program; returns the reply (a dict)."""
    request = {
        "argv": argv,
        "cwd": cwd,
        "env": env,
        "stdin": base64.b64encode(stdin).decode("ascii"),
        "timeout": timeout,
    }
    try:
        with door_exchange(request) as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise refusal(argv[0], "this call cannot start programs (the host gave it no way to ask)")


def program_failure():
    """Words on the last program the script started that failed, or None:
    for the `skillbox:` hint when the script fails after it."""
    if FAILED[0] is None:
        return None
    name, code, said = FAILED[0]
    return (
        f"`{name}`, which the script started, exited with {code}"
        + (f" ({said})" if said else "")
        + "; the script's failure may come from it. It ran in the OS sandbox, with the "
        "workspace and /tmp as this call sees them and no network."
    )


def refusal(program, why):
    """The error a refused request raises; its words are kept for the
    `skillbox:` hint after a failure."""
    LAST_REFUSAL[0] = why
    return PermissionError(13, why, program)


class _Pipe:
    """What a child's pipes share: they have no file descriptor, and close
    as files do."""

    closed = False

    def close(self):
        self.closed = True

    def fileno(self):
        raise io.UnsupportedOperation("a child's pipe in the sandbox has no file descriptor")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Input(_Pipe):
    """A child's stdin as the script writes it: kept until the child runs."""

    def __init__(self, encoding, errors):
        self.buffer = io.BytesIO()
        self._encoding = encoding
        self._errors = errors

    def write(self, data):
        if isinstance(data, str):
            data = data.encode(self._encoding, self._errors)
        self.buffer.write(data)
        return len(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass


class _Output(_Pipe):
    """A child's stdout or stderr pipe: runs the child when first read."""

    def __init__(self, proc, which):
        self._proc = proc
        self._which = which
        self._stream = None

    def _opened(self):
        if self._stream is None:
            self._proc._finish()
            data = self._proc._captured[self._which] or b""
            self._stream = (
                io.StringIO(self._proc._decode(data)) if self._proc.text_mode else io.BytesIO(data)
            )
        return self._stream

    def read(self, *args):
        return self._opened().read(*args)

    def readline(self, *args):
        return self._opened().readline(*args)

    def readlines(self, *args):
        return self._opened().readlines(*args)

    def __iter__(self):
        return iter(self._opened())

    def __next__(self):
        return next(self._opened())

    def __getattr__(self, name):
        return getattr(self._opened(), name)


class Popen:
    """`subprocess.Popen` for the sandbox (see the module's doc)."""

    _next_pid = [1000]

    def __init__(self, args, bufsize=-1, executable=None, stdin=None, stdout=None, stderr=None,
                 preexec_fn=None, close_fds=True, shell=False, cwd=None, env=None,
                 universal_newlines=None, startupinfo=None, creationflags=0,
                 restore_signals=True, start_new_session=False, pass_fds=(), *, user=None,
                 group=None, extra_groups=None, encoding=None, errors=None, text=None,
                 umask=-1, pipesize=-1, process_group=None):
        self.args = args
        if isinstance(args, (str, bytes, os.PathLike)):
            argv = [os.fsdecode(args)]
        else:
            argv = [os.fsdecode(a) for a in args]
        if shell:
            argv = [executable or "/bin/sh", "-c"] + argv
        elif executable:
            argv[0] = os.fsdecode(executable)
        if not argv or not argv[0]:
            raise ValueError("no program to run")
        self._argv = argv
        self._cwd = os.path.abspath(os.fsdecode(cwd)) if cwd is not None else os.getcwd()
        self._env = None if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
        self.text_mode = bool(text or universal_newlines or encoding or errors)
        self._encoding = encoding or "utf-8"
        self._errors = errors or "strict"
        self._specs = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
        self._captured = {"stdout": None, "stderr": None}
        self.returncode = None
        Popen._next_pid[0] += 1
        self.pid = Popen._next_pid[0]
        self.stdin = _Input(self._encoding, self._errors) if stdin == subprocess.PIPE else None
        self.stdout = _Output(self, "stdout") if stdout == subprocess.PIPE else None
        self.stderr = _Output(self, "stderr") if stderr == subprocess.PIPE else None
        self._python = _is_python(argv[0])
        programs = granted()
        if not self._python and (programs is None or os.path.basename(argv[0]) not in programs):
            # Not granted: the host is asked all the same, so that it
            # records the refusal and words it; nothing runs.
            reply = _ask_host(argv, self._cwd, self._env, b"")
            raise refusal(argv[0], reply.get("error") or f"`{argv[0]}` may not be started here")

    # What the child reads.
    def _input(self, given):
        spec = self._specs["stdin"]
        if given is not None:
            return given.encode(self._encoding, self._errors) if isinstance(given, str) else bytes(given)
        if spec == subprocess.PIPE:
            return self.stdin.buffer.getvalue()
        if spec is None or spec == subprocess.DEVNULL:
            return b""
        if isinstance(spec, int):
            return os.read(spec, 1 << 30)
        data = spec.read()
        return data.encode() if isinstance(data, str) else data

    def _decode(self, data):
        text = data.decode(self._encoding, self._errors)
        return text.replace("\r\n", "\n").replace("\r", "\n")

    def _finish(self, given_input=None, timeout=None):
        if self.returncode is not None:
            return
        stdin = self._input(given_input)
        if self._python:
            code, out, err = _run_python(self._argv, self._cwd, self._env, stdin)
        else:
            code, out, err = self._run_program(stdin, timeout)
        if self._specs["stderr"] == subprocess.STDOUT:
            out, err = out + err, b""
        for which, data in (("stdout", out), ("stderr", err)):
            spec = self._specs[which]
            if spec == subprocess.PIPE:
                self._captured[which] = data
            elif spec is None:
                _write_through(getattr(sys, which), data)
            elif spec == subprocess.DEVNULL or spec == subprocess.STDOUT:
                pass
            elif isinstance(spec, int):
                os.write(spec, data)
            else:
                _write_through(spec, data)
        self.returncode = code

    def _run_program(self, stdin, timeout):
        reply = _ask_host(self._argv, self._cwd, self._env, stdin, timeout)
        if reply.get("error"):
            raise refusal(self._argv[0], reply["error"])
        if reply.get("timed_out"):
            # Killed at the script's timeout, as subprocess would kill it.
            self.returncode = -9
            raise subprocess.TimeoutExpired(
                self.args, timeout,
                output=base64.b64decode(reply.get("stdout") or ""),
                stderr=base64.b64decode(reply.get("stderr") or ""))
        for line in reply.get("refusals") or []:
            print(f"skillbox: {line}", file=sys.stderr)
        out = base64.b64decode(reply.get("stdout") or "")
        err = base64.b64decode(reply.get("stderr") or "")
        name = os.path.basename(self._argv[0])
        STARTED.add(name)
        code = reply.get("returncode", 1)
        if code != 0:
            said = err.decode("utf-8", "replace").strip().splitlines()
            FAILED[0] = (name, code, said[-1][:300] if said else "")
        if reply.get("truncated"):
            # Said where the script's user sees it, not in a pipe the
            # script may parse.
            print(f"skillbox: `{self._argv[0]}` printed more than this call keeps of a "
                  "program's output (its /tmp quota, --scratch-quota-mib); the rest was cut",
                  file=sys.stderr)
        return reply.get("returncode", 1), out, err

    def communicate(self, input=None, timeout=None):
        self._finish(input, timeout)
        result = []
        for which in ("stdout", "stderr"):
            data = self._captured[which]
            if data is None:
                result.append(None)
            else:
                result.append(self._decode(data) if self.text_mode else data)
        return tuple(result)

    def wait(self, timeout=None):
        self._finish(timeout=timeout)
        return self.returncode

    def poll(self):
        self._finish()
        return self.returncode

    def send_signal(self, sig):
        pass

    def terminate(self):
        pass

    def kill(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.wait()

    def __repr__(self):
        return f"<Popen: returncode: {self.returncode} args: {self.args!r}>"


def _write_through(stream, data):
    try:
        stream.flush()
    except Exception:
        pass
    target = getattr(stream, "buffer", None)
    if target is not None:
        target.write(data)
        target.flush()
    else:
        stream.write(data.decode("utf-8", "replace"))


class _Sink(io.RawIOBase):
    """Collects what a Python child writes."""

    def __init__(self, into):
        self._into = into

    def writable(self):
        return True

    def write(self, data):
        self._into.extend(data)
        return len(data)


def _python_argv(argv):
    """(mode, target, args) from a Python command line: mode is `script`,
    `code` or `module`."""
    rest = argv[1:]
    while rest:
        arg = rest[0]
        if arg in ("-c", "-m"):
            if len(rest) < 2:
                raise ValueError(f"python {arg} needs an argument")
            return ("code" if arg == "-c" else "module"), rest[1], rest[2:]
        if arg == "-" or not arg.startswith("-"):
            return "script", arg, rest[1:]
        if arg in ("-W", "-X"):
            rest = rest[2:]
        else:
            rest = rest[1:]
    return "script", "-", []


def _run_python(argv, cwd, env, stdin):
    """Runs a Python child here; returns (exit code, stdout, stderr)."""
    import skillbox_run

    out, err = bytearray(), bytearray()
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd(), dict(os.environ),
             list(sys.path), set(sys.modules), sys.modules.get("__main__"))
    child_out = io.TextIOWrapper(io.BufferedWriter(_Sink(out)), encoding="utf-8", write_through=True)
    child_err = io.TextIOWrapper(io.BufferedWriter(_Sink(err)), encoding="utf-8",
                                 errors="backslashreplace", write_through=True)
    code = 0
    try:
        mode, target, args = _python_argv(argv)
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        sys.stdout, sys.stderr = child_out, child_err
        os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if mode == "script":
            if target == "-":
                source = stdin.decode("utf-8")
                sys.argv = ["-"] + list(args)
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(source, "<stdin>", "exec"), main.__dict__)
            else:
                script = os.path.abspath(target)
                sys.argv = [target] + list(args)
                sys.path.insert(0, os.path.dirname(script))
                skillbox_run.run_file(script)
        elif mode == "code":
            sys.argv = ["-c"] + list(args)
            sys.path.insert(0, "")
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            sys.argv = [target] + list(args)
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as error:
        code = skillbox_run._exit_code(error)
    except BaseException:
        code = 1
        traceback.print_exc(file=child_err)
    finally:
        for stream in (child_out, child_err):
            try:
                stream.flush()
            except Exception:
                pass
        argv_, stdin_, stdout_, stderr_, cwd_, environ, path, modules, main = saved
        sys.argv, sys.stdin, sys.stdout, sys.stderr = argv_, stdin_, stdout_, stderr_
        os.chdir(cwd_)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        # The child's own modules go; the standard library and packages it
        # imported stay (compiled ones cannot be loaded twice).
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(_CHILD_FOLDERS):
                del sys.modules[name]
        if main is not None:
            sys.modules["__main__"] = main
    return code, bytes(out), bytes(err)


def _system(command):
    """`os.system`: the command through `/bin/sh -c`, its output passed
    through; returns a wait status."""
    try:
        proc = Popen(command, shell=True)
        code = proc.wait()
    except PermissionError as error:
        print(f"sh: {error.strerror}", file=sys.stderr)
        return 127 << 8
    return (code & 0xFF) << 8 if code >= 0 else -code


_which = shutil.which


def _which_granted(cmd, mode=os.F_OK | os.X_OK, path=None):
    name = os.path.basename(os.fsdecode(cmd))
    if _is_python(os.fsdecode(cmd)):
        return sys.executable
    programs = granted() or {}
    if name in programs:
        return programs[name]
    return _which(cmd, mode, path)


def install():
    """Puts the sandbox's `subprocess` in place."""
    if not sys.executable:
        sys.executable = "/usr/bin/python3"
    subprocess.Popen = Popen
    os.system = _system
    shutil.which = _which_granted
    _install_unix_socket_probe()


class _UnixSocketProbe:
    """What `socket.socket(AF_UNIX, ...)` gives in the sandbox, which has no
    sockets: an object that can be made and closed, and fails every use.

    Scripts that drive LibreOffice ask this way whether the machine
    allows Unix sockets, to decide whether soffice needs a workaround
    (Anthropic's office/soffice.py compiles an LD_PRELOAD shim with gcc).
    The soffice a script starts runs on the host, in its OS sandbox, where
    Unix sockets work: so the question's answer for it is yes. A script
    that talks over one itself gets an error at its first use.
    """

    def __init__(self, family, type=-1, proto=-1, fileno=None):
        self.family, self.type, self.proto = family, type, proto

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name):
        def refused(*args, **kwargs):
            raise OSError(
                95,
                "scripts in this sandbox have no sockets; the programs a script starts with "
                "subprocess have theirs",
            )

        return refused


def _install_unix_socket_probe():
    import socket

    if hasattr(socket, "AF_UNIX"):
        return
    original = socket.socket
    socket.AF_UNIX = 1

    def make(family=-1, type=-1, proto=-1, fileno=None):
        if family == socket.AF_UNIX:
            return _UnixSocketProbe(family, type, proto, fileno)
        return original(family, type, proto, fileno)

    socket.socket = make
