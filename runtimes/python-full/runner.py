"""The full Python runtime's entry point: CPython with compiled packages
built in, started as `python /usr/local/lib/skillbox/runner.py SCRIPT
[ARGS...]` or `... runner.py -c CODE [ARGS...]`. What both runtimes do
around the script is in skillbox_run.py, beside this file.

The interpreter reads its standard library and the packages' Python code
from /usr/local/lib/python315.zip, mounted read-only with this folder.
"""

import os
import sys

# The interpreter starts in safe-path mode (this folder is not on sys.path),
# and this folder is not the script's: it is on the path for this import
# alone.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import skillbox_run  # noqa: E402

sys.path.remove(_HERE)
skillbox_run.configure(full=True)

# matplotlib draws to files (no display here) and keeps its caches in the
# call's scratch folder, which is empty at every call; its data (fonts,
# styles) is mounted read-only where it looks for it.
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MPLCONFIGDIR", skillbox_run.SCRATCH + "/.matplotlib")
os.environ.setdefault("HOME", skillbox_run.SCRATCH)
sys.dont_write_bytecode = True
os.chdir(
    skillbox_run.WORKSPACE if os.path.isdir(skillbox_run.WORKSPACE) else skillbox_run.SCRATCH
)

if not skillbox_run.usable(sys.argv[1:]):
    print(skillbox_run.USAGE, file=sys.stderr)
    sys.exit(2)
sys.exit(skillbox_run.run(sys.argv[1:]))
