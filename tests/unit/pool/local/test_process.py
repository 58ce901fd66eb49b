"""A local worker starts with the folder that holds the package on its PYTHONPATH, never a folder of the
package itself (whose modules, `config` or `storage`, would shadow an entry script's own)."""

from __future__ import annotations

from pathlib import Path

import parallel_steps
from parallel_steps.pool.local import process


def test_the_workers_path_is_the_folder_holding_the_package() -> None:
    assert Path(process._PACKAGE_ROOT) == Path(parallel_steps.__file__).resolve().parent.parent
