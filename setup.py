"""Build of the optional C extension (everything else is in pyproject.toml): the native LP
engine of the LP branch and cut, themis/arbiter/solvers/_simplex.c. ``optional``: a
machine without a C compiler still installs the package and uses HiGHS instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "themis.arbiter.solvers._simplex",
            ["themis/arbiter/solvers/_simplex.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
