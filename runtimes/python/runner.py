"""The light Python runtime's entry point: CPython built by componentize-py,
pre-initialized with the standard library, running one script as
`python SCRIPT` would, or code as `python -c CODE` would. What both
runtimes do around the script is in skillbox_run.py.
"""

import io
import os
import sys

import stdlib_bundle

stdlib_bundle.install()
# Modules scripts commonly import, imported now, at build time: each run
# starts from the snapshot with them initialized, instead of executing
# them again. Nothing here reads the clock, the environment or random
# state at import (random, tempfile, uuid and secrets stay out: their
# seeds would be baked into the snapshot). The argparse warm-up below
# reads the terminal's size, the language and the colour settings, and
# keeps nothing derived from them.
import argparse, base64, collections, csv, dataclasses, datetime, fnmatch, functools  # noqa: E401,F401
import glob, hashlib, html, itertools, json, math, pathlib, re, shutil, statistics  # noqa: E401,F401
import string, struct, textwrap, typing, unicodedata, urllib.parse, zipfile  # noqa: E401,F401
import xml.dom.minidom, xml.etree.ElementTree  # noqa: E401,F401
# What runpy.run_path imports on each call (it runs every script), done
# once here: measured at about 8 ms of a 14 ms warm `print(1)` script.
import pkgutil  # noqa: E401,F401
# What skillbox_process.install patches on every run (the Unix socket
# probe): imported from source at each run, it was 7 ms of a print(1).
import socket  # noqa: E401,F401


def _warm_argparse():
    """Builds and uses one parser of the shapes scripts declare, so the
    regular expressions argparse compiles on first use (its help
    formatter's, its option and nargs patterns) sit in `re`'s cache in the
    snapshot, and what gettext imports on its first message is imported:
    the first parser of each run took 2.5-2.8 ms to build and 0.4-0.5 ms
    to parse, a second one 0.25 ms. The cache maps a pattern to its
    compiled form, which nothing about a run changes."""
    parser = argparse.ArgumentParser(prog="warm", description="warm")
    parser.add_argument("source")
    parser.add_argument("rest", nargs="*")
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("-n", "--count", type=int, default=1)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--tags", nargs="+", default=[])
    parser.add_argument("--mode", choices=["a", "b"], default="a")
    parser.add_argument("--maybe", nargs="?", const="c")
    commands = argparse.ArgumentParser(prog="warm")
    sub = commands.add_subparsers(dest="command")
    sub.add_parser("one").add_argument("value", nargs="?")
    parser.parse_args(["in", "x", "-o", "out", "--count", "2", "-v", "--tags", "t", "--maybe"])
    parser.parse_args(["in", "--mode=b", "--", "-1"])
    commands.parse_args(["one", "v"])
    parser.format_help()
    parser.format_usage()


_warm_argparse()
from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import environment
from wit_world.imports import exit as wasi_exit

import skillbox_run

skillbox_run.configure(full=False)
WORKSPACE = skillbox_run.WORKSPACE
SCRATCH = skillbox_run.SCRATCH
# The finders of the build's folders, emptied now rather than at each run:
# freeing them there wrote to the pages of every object they held, 2 to
# 3 ms of a print(1), every page a copy in the run's copy-on-write memory.
sys.path_importer_cache.clear()


def _stdio():
    # The snapshot's streams are text wrappers over raw files, which drop
    # what a short write leaves (a print over 64 KiB loses its tail).
    def wrap(fd):
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            buffered,
            encoding="utf-8",
            errors="backslashreplace" if fd == 2 else "strict",
            line_buffering=fd == 2,
        )

    sys.stdin, sys.stdout, sys.stderr = wrap(0), wrap(1), wrap(2)


def _os_exit(code):
    """`os._exit`: ends the run at once with `code`, as in CPython."""
    _exit_with_code(skillbox_run._status(int(code)))


# Taken now: a script that replaces it must not change how the run ends.
_exit_with_code = wasi_exit.exit_with_code


class Run(exports.Run):
    def run(self) -> None:
        _stdio()
        stdlib_bundle.install()
        argv = environment.get_arguments()
        # What pre-initialization baked in at build time is refreshed.
        os.environ.clear()
        os.environ.update(dict(environment.get_environment()))
        sys.path_importer_cache.clear()
        sys.dont_write_bytecode = True
        os.chdir(WORKSPACE if os.path.isdir(WORKSPACE) else SCRATCH)
        if not skillbox_run.usable(argv[1:]):
            print(skillbox_run.USAGE, file=sys.stderr)
            raise Err(None)
        os._exit = _os_exit
        code = skillbox_run.run(argv[1:])
        if code != 0:
            _exit_with_code(code)
