"""Registers one adapter and is killed (SIGKILL) between the folder's rename into the library and
the index write: the state a power cut or an OOM kill leaves (run by test_adapter_trust.py; argv:
LIB FOLDER NAME)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from replaybank.llm.adapters import library as library_module
from replaybank.llm.adapters.library import AdapterLibrary, Registration


def main() -> None:
    lib_path, folder, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    def killed(self, index):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGKILL)  # the folder is renamed into place; the index is not written

    library_module.AdapterLibrary._write_index = killed  # type: ignore[method-assign]
    AdapterLibrary(lib_path, create=True).add(folder, Registration(name, skill="crashed", examples=["list the files"]))
    print("not killed", flush=True)


if __name__ == "__main__":
    main()
