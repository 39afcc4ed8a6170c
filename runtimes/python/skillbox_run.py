"""What both Python runtimes do around a script or code: sys.path and argv
as `python SCRIPT` and `python -c CODE` lay them out, the exit status, and
the failure report with its `skillbox:` hint.

The light runtime (runner.py, CPython built by componentize-py) and the
full one (runtimes/python-full/runner.py, CPython with compiled packages)
each import this module and say which they are with `configure`.

argv is `SCRIPT [ARGS...]`, SCRIPT a path under /skill. The script's own
folder comes first on sys.path, then the skill's root (for
`python -m scripts.x` style imports), then /packages when the user
prepared pure-Python requirements for the skill. The working folder is
/workspace when one is granted, else /tmp.

`-c CODE [ARGS...]` runs code a model wrote (`run_code`): the skill's root
comes first on sys.path when a skill's folder is mounted, so its helper
modules import as its instructions show, then /packages. The working
folder comes last, as `python -c` has it but behind the standard library
and the skill: a module the code wrote there imports, and cannot shadow
either.

When a script fails for a reason the sandbox decides (a module it cannot
have, a process, a thread, a socket, a path outside its mounts), a line
starting with `skillbox:` after the traceback says why and what to do.
"""

import importlib.util
import io
import linecache
import os
import runpy
import stat
import sys
import traceback
import types

import skillbox_http
import skillbox_process

SKILL = "/skill"
PACKAGES = "/packages"
WORKSPACE = "/workspace"
SCRATCH = "/tmp"

# Parts of CPython neither WebAssembly build has.
MISSING_FROM_PYTHON = {
    "ssl", "_ssl", "_hashlib", "ctypes", "_ctypes", "readline", "curses", "_curses",
    "tkinter", "_tkinter", "multiprocessing", "_multiprocessing", "_posixsubprocess",
    "fcntl", "termios", "pty", "resource",
}
# ... and the parts only the full runtime has.
MISSING_FROM_LIGHT = {"bz2", "_bz2", "lzma", "_lzma"}
# The modules the full runtime has beyond the standard library (its
# packages.json, which an end-to-end test holds this list to): the host
# runs a script in that runtime when it imports one of them.
BUILT_INTO_FULL = {
    "PIL", "attr", "attrs", "bs4", "charset_normalizer", "cloudpickle", "contourpy", "cycler",
    "dateutil", "defusedxml", "et_xmlfile", "fontTools", "formulaic", "html5lib",
    "interface_meta", "isympy", "jinja2", "joblib", "kiwisolver", "lxml", "markupsafe",
    "matplotlib", "more_itertools", "mpl_toolkits", "mpmath", "narwhals", "networkx", "numpy",
    "openpyxl", "packaging", "pandas", "patsy", "pylab", "pyparsing", "pypdf", "regex",
    "reportlab", "reportlab_mods", "reportlab_settings", "scipy", "seaborn", "six", "sklearn",
    "soupsieve", "statsmodels", "sympy", "tabulate", "threadpoolctl", "tlz", "tomli_w",
    "toolz", "tqdm", "typing_extensions", "tzdata", "webencodings", "wrapt", "xlrd",
    "xlsxwriter", "xmltodict", "yaml",
}
# Popular packages that are compiled code, so no pure-Python wheel exists.
C_EXTENSION_PACKAGES = {
    "numpy", "pandas", "scipy", "lxml", "PIL", "cv2", "torch", "sklearn", "matplotlib",
    "pydantic_core", "cryptography", "psycopg2", "grpc", "_cffi_backend", "regex",
    "orjson", "ujson", "markupsafe", "_yaml",
}
# Where an import's name and its PyPI project's differ, for popular ones.
PROJECT_OF_IMPORT = {
    "yaml": "PyYAML", "PIL": "Pillow", "bs4": "beautifulsoup4", "docx": "python-docx",
    "pptx": "python-pptx", "dateutil": "python-dateutil", "sklearn": "scikit-learn",
    "cv2": "opencv-python", "Crypto": "pycryptodome", "jwt": "PyJWT",
    "dotenv": "python-dotenv", "fitz": "PyMuPDF", "git": "GitPython", "magic": "python-magic",
    "serial": "pyserial", "usb": "pyusb", "OpenSSL": "pyOpenSSL", "attr": "attrs",
    "google.protobuf": "protobuf", "markdown_it": "markdown-it-py", "frontmatter": "python-frontmatter",
}
# Projects whose wheels on PyPI are all compiled: `prepare` cannot install
# them, whatever the version.
NO_PURE_WHEEL = {"PyYAML", "Pillow", "opencv-python", "pycryptodome", "PyMuPDF", "scikit-learn"}
PROCESS_FUNCTIONS = {
    "system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execl",
    "execlp", "spawnv", "spawnl", "posix_spawn", "posix_spawnp", "wait", "waitpid", "kill",
}


def _has_c_extension(top):
    for folder in sys.path:
        candidates = [os.path.join(folder, top)]
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.startswith(top + ".") and name.endswith((".so", ".pyd")):
                return True
        for candidate in candidates:
            if os.path.isdir(candidate):
                for _, _, files in os.walk(candidate):
                    if any(f.endswith((".so", ".pyd")) for f in files):
                        return True
    return False


def _importable(top):
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _frames(error):
    return [frame.filename for frame in traceback.extract_tb(error.__traceback__)]


def _chain(error):
    """The error and those it was raised from or during, outermost first: a
    library that turns a failed subprocess into its own error
    (pdf2image's PDFInfoNotInstalledError) keeps the cause in the chain."""
    seen = []
    while error is not None and error not in seen and len(seen) < 16:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _no_processes(error):
    if type(error).__name__ in ("CalledProcessError", "TimeoutExpired"):
        return False
    return (
        isinstance(error, OSError)
        and "does not support processes" in str(error)
        or any(f.endswith("subprocess.py") for f in _frames(error))
    )


def hint(error):
    """Why the sandbox made this fail and what to do, or None."""
    frames = _frames(error)
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.split(".")[0]
        if top in MISSING_FROM_PYTHON or error.name in MISSING_FROM_PYTHON:
            return (
                f"module `{error.name}` is part of Python but not of the WebAssembly build this "
                "sandbox runs (it has no OpenSSL, ctypes, curses, processes). The script "
                "cannot use it here; do that step another way."
            )
        project = PROJECT_OF_IMPORT.get(top, top)
        named = f"`{top}`" if project == top else f"`{top}` (the PyPI project `{project}`)"
        if _FULL[0] and _importable(top):
            # The package is here; the name below it is not one of its
            # modules, which its own error says.
            return None
        if (top in BUILT_INTO_FULL or top in MISSING_FROM_LIGHT) and not _FULL[0]:
            return (
                f"{named} runs in skillbox's full Python runtime, which has it built in. "
                f"skillbox chooses that runtime when the script, the code or a module of the "
                f"skill imports `{top}` in a plain import line (`import {top}` or `from {top} "
                "import ...`); if one does, the full runtime is not installed here: the user "
                "can install it with scripts/install (scripts/build-python-full in a source "
                "checkout)."
            )
        if _FULL[0] and (top in C_EXTENSION_PACKAGES or _has_c_extension(top)):
            return (
                f"{named} is compiled (C-extension) code that skillbox's full Python runtime "
                "does not have built in, and compiled code cannot be installed for the "
                "sandbox. The compiled packages it has are numpy, pandas, scipy, "
                "scikit-learn, statsmodels, matplotlib, Pillow, lxml, PyYAML and regex; use "
                "one of them, a pure-Python alternative, or a WebAssembly tool of the skill."
            )
        if top in C_EXTENSION_PACKAGES or _has_c_extension(top):
            return (
                f"{named} is compiled (C-extension) code, which this sandbox cannot load: only "
                "pure-Python packages run here. Use a pure-Python alternative, or a WebAssembly "
                "tool of the skill."
            )
        project = PROJECT_OF_IMPORT.get(error.name) or PROJECT_OF_IMPORT.get(top, top)
        if project in NO_PURE_WHEEL:
            return (
                f"module `{top}` comes from the PyPI project `{project}`, which publishes only "
                "compiled wheels, so it cannot be installed for this sandbox: only pure-Python "
                "packages run here. Do that step another way, or with a tool of the skill."
            )
        if _CODE[0] is not None and not _isdir(SKILL):
            return (
                f"module `{top}` is not in the standard library, and code run without a skill "
                "has the standard library only. If a skill's steps import it, run the code as "
                "that skill's (give run_code its `skill`): it then gets the packages the user "
                "prepared for the skill."
            )
        return (
            f"module `{top}` is not installed for this skill, and a script never downloads. "
            f"It comes from the PyPI project `{project}`; if that project has a pure-Python "
            "wheel, the user can install it once with "
            f"`skillbox prepare {_skill_name()} --with {project}==VERSION` (VERSION: the "
            "release the skill needs), or the skill can list it in its requirements.txt."
        )
    refusal = skillbox_process.LAST_REFUSAL[0]
    if refusal and any(isinstance(cause, PermissionError) for cause in _chain(error)):
        return refusal
    no_process = (
        "WebAssembly has no processes: subprocess runs Python children and the programs the "
        "user granted the skill, but os.fork, os.exec*, multiprocessing and os.spawn* are not "
        "available. Do the step in Python, or with subprocess."
    )
    if any(_no_processes(cause) for cause in _chain(error)):
        return no_process
    if isinstance(error, AttributeError) and error.name in PROCESS_FUNCTIONS:
        return no_process
    if isinstance(error, NotImplementedError) and "multiprocessing" in str(error):
        return no_process
    if isinstance(error, RuntimeError) and "thread" in str(error):
        return (
            "this sandbox runs one thread: threading and concurrent.futures thread pools "
            "cannot start threads. Do the work in sequence."
        )
    program = _program_named()
    no_socket_names = isinstance(error, AttributeError) and (error.name or "").startswith(
        ("AF_", "SOCK_", "socketpair")
    )
    socket_failed = no_socket_names or isinstance(error, OSError) and any(
        f.endswith(("socket.py", "client.py", "request.py", "connection.py")) for f in frames
    )
    if socket_failed and program:
        return _drives(program)
    if socket_failed:
        return (
            "scripts get no network sockets in this sandbox. HTTP goes through the host: "
            "urllib.request, http.client, requests and httpx reach the hosts the user granted the "
            "skill (http and https); other protocols cannot be used."
        )
    if isinstance(error, OSError) and isinstance(error.filename, str):
        path = os.path.abspath(error.filename)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return (
                f"`{error.filename}` is a FIFO, socket or device, which the sandbox never opens "
                "(opening one can wait for ever). Use a regular file."
            )
        mounts = [SCRATCH] + [m for m in (SKILL, WORKSPACE, PACKAGES) if os.path.isdir(m)]
        if not any(path == m or path.startswith(m + "/") for m in mounts):
            seen = (["/skill (the skill, read-only)"] if SKILL in mounts else []) + [
                "/tmp (its own scratch folder)"
            ]
            return (
                f"`{error.filename}` is outside what this {_what_runs()} may see: "
                + ", ".join(seen)
                + (", /workspace" if WORKSPACE in mounts else "; no workspace was granted")
                + "."
            )
        if isinstance(error, PermissionError) or error.errno in (30, 63, 76):
            if path == SKILL or path.startswith(SKILL + "/"):
                return "/skill is read-only: write to /tmp, or to /workspace when granted."
            if (path == WORKSPACE or path.startswith(WORKSPACE + "/")) and _CODE[0] is not None:
                return (
                    "/workspace is read-only for this call. run_code writes there only when "
                    "the user allows writing: --allow-write (as a skill's code, when the "
                    "skill's skillbox.yaml asks for it too), or a write grant the user gave "
                    "the skill (skillbox grant); never on a read-only server. Otherwise "
                    "write to /tmp and print the result."
                )
            if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
                return (
                    "/workspace is read-only for this script. A skill's scripts may write "
                    "there when its skillbox.yaml asks (grants: {workspace: write}) and the "
                    "user allows it (--allow-write), or when the user grants it: "
                    f"`skillbox grant {_skill_name()} --workspace write`. Otherwise write to "
                    "/tmp and print the result."
                )
    return None


_RUNTIME_FOLDER = os.path.dirname(__file__) + "/"
# Whether this is the full runtime (`configure`).
_FULL = [False]
# The script being run, or the code given with `-c`, for the hints that
# read it.
_SCRIPT = [None]
_CODE = [None]
# Programs scripts drive over a socket, by the names their sources use.
_PROGRAMS = {"soffice": "LibreOffice (`soffice`)", "libreoffice": "LibreOffice (`soffice`)",
             "chromium": "Chromium", "chrome": "Chrome"}


def _skill_name():
    """The skill's name from /skill/SKILL.md, for a command to copy."""
    try:
        with _open(SKILL + "/SKILL.md", encoding="utf-8") as f:
            lines = f.read(64 * 1024).splitlines()
    except (OSError, ValueError):
        return "SKILL"
    if not lines or lines[0].strip() != "---":
        return "SKILL"
    for line in lines[1:]:
        if line.strip() == "---":
            break
        if line.startswith("name:"):
            name = line[5:].strip().strip("'\"")
            if name and all(c.isalnum() or c in "-_" for c in name):
                return name
    return "SKILL"


def _what_runs():
    return "code" if _CODE[0] is not None else "script"


def _drives(program):
    return (
        f"this {_what_runs()} drives {program}, a program outside Python, over a local "
        "socket, and scripts in this sandbox have no sockets. A program a script starts with "
        "subprocess can run when the user grants it to the skill (`skillbox grant "
        f"{_skill_name()} --program NAME`); talking to it over a socket cannot. Run that step "
        "where the program is installed, or use the skill's Python-only route if it has one."
    )


def _after_quiet_failure():
    """Why a run that failed without an error the sandbox could read (the
    script caught it and printed its own message) may have failed, or
    None: a program it drives, or a workspace it may not write."""
    if skillbox_process.LAST_REFUSAL[0]:
        return skillbox_process.LAST_REFUSAL[0]
    if skillbox_process.program_failure():
        return skillbox_process.program_failure()
    program = _program_named()
    if program:
        return _drives(program)
    if _isdir(WORKSPACE) and not os.access(WORKSPACE, os.W_OK):
        return (
            f"the workspace is read-only for this {_what_runs()}; if it failed writing there, "
            + (
                "run_code writes only when the user allows writing (--allow-write, or a "
                "write grant the user gave the skill)."
                if _CODE[0] is not None
                else "the user can let the skill write with "
                f"`skillbox grant {_skill_name()} --workspace write`."
            )
        )
    return None


def _program_named():
    """A program the script's source names, as words for a person, or None."""
    if _CODE[0] is not None:
        source = _CODE[0].lower()
    elif not _SCRIPT[0]:
        return None
    else:
        try:
            with _open(_SCRIPT[0], encoding="utf-8", errors="replace") as f:
                source = f.read(1024 * 1024).lower()
        except OSError:
            return None
    for name, words in _PROGRAMS.items():
        # A program the script started through subprocess ran; whatever it
        # does over a socket is its own business, in its own sandbox.
        if name in source and name not in skillbox_process.STARTED:
            return words
    return None


# What the failure path needs, taken now: a script that replaces any of
# these (`traceback.TracebackException = None`) must not break the report
# of its own failure.
_write = os.write
_open = open
_TracebackException = traceback.TracebackException
_StackSummary = traceback.StackSummary
_abspath = os.path.abspath
_isdir = os.path.isdir
_dirname = os.path.dirname


def _script_frames(summary):
    # The runtime's own frames (this runner, the bundled importer, runpy)
    # are not the script's concern.
    summary.stack = _StackSummary.from_list(
        [
            frame
            for frame in summary.stack
            if not frame.filename.startswith(_RUNTIME_FOLDER)
            and not frame.filename.startswith("<frozen runpy")
        ]
    )
    for chained in (summary.__cause__, summary.__context__):
        if chained is not None:
            _script_frames(chained)


def _print_traceback(error):
    summary = _TracebackException.from_exception(error)
    _script_frames(summary)
    sys.stderr.write("".join(summary.format()))


def _status(code):
    """An exit status for `code`; a failing code never reads as success
    (`sys.exit(256)` is 1 here, where a POSIX shell would see 0)."""
    if code == 0:
        return 0
    status = code & 0xFF if -(2**31) <= code < 2**31 else 255
    return status or 1


def _exit_code(error):
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return _status(code)
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _run_script(args):
    script = _abspath(args[0])
    _SCRIPT[0] = script
    sys.argv = [args[0]] + list(args[1:])
    sys.path[:0] = [_dirname(script), SKILL] + ([PACKAGES] if _isdir(PACKAGES) else [])
    run_file(script)


def run_file(path):
    """Runs the script at `path` as `__main__`, with the names runpy.run_path
    gives it. A `.py` file is read once and compiled: run_path first asks
    every import hook whether the file is a zip archive, then reads it
    twice, which was 1.5 to 2.5 ms of a warm `print(1)` script. Anything
    else (a zip, a folder with `__main__.py`, a `.pyc`) goes to runpy.
    `sys.argv` is the caller's, as `python SCRIPT` leaves it (runpy set
    `sys.argv[0]` to the path for the run)."""
    if not path.endswith(".py"):
        runpy.run_path(path, run_name="__main__")
        return
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = None
    main.__package__ = ""
    main.__spec__ = None
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        # As runpy does: the script's module goes when the script ends.
        if saved is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = saved


# The file name tracebacks give code run with `-c`; its lines are kept in
# linecache so a traceback shows them.
_CODE_NAME = "<code>"


def _run_code(code, args):
    _CODE[0] = code
    sys.argv = ["-c"] + list(args)
    sys.path[:0] = ([SKILL] if _isdir(SKILL) else []) + ([PACKAGES] if _isdir(PACKAGES) else [])
    sys.path.append(os.getcwd())
    linecache.cache[_CODE_NAME] = (len(code), None, code.splitlines(True), _CODE_NAME)
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(code, _CODE_NAME, "exec"), main.__dict__)




def configure(full):
    """Says which runtime imports this module: the full one has compiled
    packages and the modules the light one lacks."""
    _FULL[0] = full


def run(argv):
    """Runs `SCRIPT [ARGS...]` or `-c CODE [ARGS...]`; returns the exit
    status, after the failure report when it failed."""
    code = 0
    # Line by line, so that what a script printed before a limit stopped
    # it reaches the host, which returns it with the error.
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass
    skillbox_process.install()
    skillbox_http.install()
    try:
        if argv[0] == "-c":
            _run_code(argv[1], argv[2:])
        else:
            _run_script(argv)
    except SystemExit as error:
        code = _exit_code(error)
        # 1 is what a script that caught an error exits with; 2 is a usage
        # error (argparse), which no hint of the sandbox's explains.
        if code == 1:
            _say(_after_quiet_failure)
    except BaseException as error:
        code = 1
        try:
            _print_traceback(error)
            _say(
                lambda: hint(error)
                or skillbox_process.program_failure()
                or (_drives(p) if (p := _program_named()) else None)
            )
        except BaseException:
            _write(
                2,
                b"skillbox: the script failed, and its error could not be shown: it changed "
                b"or closed what Python reports errors with.\n",
            )
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    return code


def _say(why):
    """Prints the `skillbox:` line `why()` gives, if any; a hint that fails
    itself is left out, never raised over the script's own error."""
    try:
        text = why()
    except Exception:
        return
    if text:
        print(f"skillbox: {text}", file=sys.stderr)


USAGE = "usage: python SCRIPT [ARGS...] | python -c CODE [ARGS...]"


def usable(argv):
    """Whether argv (without the program) names a script or code."""
    return bool(argv) and not (argv[0] == "-c" and len(argv) < 2)
