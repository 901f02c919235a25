"""Build of the optional C extensions (everything else is in pyproject.toml): the LP
branch and cut's native LP engine (themis/arbiter/solvers/_simplex.c) and the compiled
cores of its cut separation (_separation.c), and the compiled core of the agent's bid
menus (themis/agent/_menu.c). ``optional``: a machine without a C compiler still installs
the package and runs HiGHS and the pure-Python separation and menus instead."""

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
        Extension(
            "themis.agent._menu",
            ["themis/agent/_menu.c"],
            # no fused multiply-add: rho must be rounded as in the Python reference
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
