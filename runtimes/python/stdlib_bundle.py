"""The standard library inside the runtime's snapshot.

componentize-py pre-initializes the runtime at build time, with CPython's
standard library mounted at /python, and keeps only what was imported
then. This module runs at that moment: it compiles every standard module
into a table of marshalled code, and at run time a meta-path finder
serves imports from the table. So the runtime needs no standard library
folder when it runs, and a script sees only its own mounts.
"""

import importlib.abc
import importlib.machinery
import marshal
import os
import sys

STDLIB = "/python"
# Folders no script needs: tests, GUIs, the bundled installers.
SKIPPED = {
    "__pycache__", "test", "tests", "idlelib", "tkinter", "turtledemo",
    "ensurepip", "pydoc_data", "site-packages", "lib2to3",
}

# module name -> (is a package, marshalled code, file name)
_CODE = {}


def _collect(root):
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED and "-" not in d)
        relative = os.path.relpath(folder, root)
        package = "" if relative == "." else relative.replace(os.sep, ".")
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            stem = file[:-3]
            if stem == "__init__":
                if not package:
                    continue
                name, is_package = package, True
            else:
                name, is_package = (package + "." + stem) if package else stem, False
            try:
                with open(path, "rb") as source:
                    code = compile(source.read(), path, "exec", dont_inherit=True)
            except SyntaxError:
                continue
            _CODE[name] = (is_package, marshal.dumps(code), path)


class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        hit = _CODE.get(name)
        if hit is None:
            return None
        is_package, _, file_name = hit
        spec = importlib.machinery.ModuleSpec(name, self, origin=file_name, is_package=is_package)
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(file_name)]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _, code, file_name = _CODE[module.__spec__.name]
        module.__file__ = file_name
        exec(marshal.loads(code), module.__dict__)

    def get_source(self, name):
        # Sources are not kept: tracebacks into the standard library show
        # file and line without the text.
        return None


_collect(STDLIB)
_FINDER = _Bundle()


def install():
    """Serves the bundled modules last, after the path finder: a module of
    the script's own folder shadows a standard one of the same name, as it
    does in CPython (except for the modules the snapshot already holds)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
