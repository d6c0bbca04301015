"""Build declaration for fitgate's compiled core (Cython extensions in fitcore/).

Set FITCORE_DEBUG=1 to build with bounds checks and line tracing turned back on.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("FITCORE_DEBUG", "") not in ("", "0")

directives = {
    "language_level": "3",
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "cdivision": not DEBUG,
    "initializedcheck": DEBUG,
    "linetrace": DEBUG,
    "embedsignature": True,
}
macros = [("CYTHON_TRACE_NOGIL", "1")] if DEBUG else []
compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]

EXTENSIONS = ["fitcore._alloc", "fitcore._call", "fitcore._read", "fitcore._load",
              "fitcore._project"]
# fitcore._load reads YAML with libyaml's C parser (Debian: libyaml-dev), linked in
# statically so that the installed package needs no libyaml at run time.
LINK = {"fitcore._load": ["-Wl,-Bstatic", "-lyaml", "-Wl,-Bdynamic"]}

setup(
    ext_modules=cythonize(
        [
            Extension(
                name,
                [name.replace(".", "/") + ".pyx"],
                define_macros=macros,
                extra_compile_args=compile_args,
                extra_link_args=LINK.get(name, []),
            )
            for name in EXTENSIONS
        ],
        compiler_directives=directives,
    ),
)
