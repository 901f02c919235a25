"""Build of the optional C extensions (everything else is in pyproject.toml) of the LP
branch and cut: its native LP engine (themis/arbiter/solvers/_simplex.c) and the compiled
cores of its cut separation (_separation.c). ``optional``: a machine without a C compiler still
installs the package and runs HiGHS and the pure-Python separation instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "themis.arbiter.solvers._simplex",
            ["themis/arbiter/solvers/_simplex.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "themis.arbiter.solvers._separation",
            ["themis/arbiter/solvers/_separation.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
