"""Registers N adapters from one PEFT folder into a library, with the index write slowed down so
two processes overlap (run by test_adapter_library.py; argv: LIB FOLDER PREFIX N DELAY)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from replaybank.llm.adapters import library as library_module
from replaybank.llm.adapters.library import AdapterLibrary, Registration


def main() -> None:
    lib_path, folder, prefix, n, delay = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    original = library_module.AdapterLibrary._write_index

    def slow_write(self, index):  # type: ignore[no-untyped-def]
        time.sleep(delay)  # widens the read-modify-write window: without the lock, updates get lost
        original(self, index)

    library_module.AdapterLibrary._write_index = slow_write  # type: ignore[method-assign]
    lib = AdapterLibrary(lib_path, create=True)
    for k in range(n):
        lib.add(folder, Registration(f"{prefix}{k}", skill=f"skill {prefix}"))
    print("done", flush=True)


if __name__ == "__main__":
    main()
