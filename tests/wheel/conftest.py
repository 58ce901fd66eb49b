"""The wheel suite: run by scripts/test-wheel in fresh environments where the built wheel is installed (not
editable), from a copy outside the source tree. It checks what a user gets: the package files, the entry points
(the `parallel-steps` command, the Airflow provider) and a real run through each way in.

Each environment runs only its own module (Airflow and Prefect cannot share one).
"""

import sysconfig
from pathlib import Path

import pytest

import parallel_steps


@pytest.fixture(scope="session", autouse=True)
def installed_wheel() -> Path:
    """The installed package's folder; the suite stops here if the code would come from a source tree."""
    package = Path(parallel_steps.__file__).resolve().parent
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    if site_packages not in package.parents:
        pytest.fail(
            f"parallel_steps is imported from {package}, not from {site_packages}: "
            "this suite checks the installed wheel (run ./scripts/test-wheel)",
            pytrace=False,
        )
    return package
