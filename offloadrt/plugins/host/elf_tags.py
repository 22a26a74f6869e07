"""The dynamic table's vocabulary (tags, flags) and the address ranges the loader reads as tables.

Shared by :mod:`.elf_dynamic` (the dynamic table, symbols, versions) and
:mod:`.elf_relocations`.
"""

from __future__ import annotations

import bisect

DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_PLTGOT, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 2, 3, 4, 5, 6
DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT, DT_INIT, DT_FINI = 7, 8, 9, 10, 11, 12, 13
DT_SONAME, DT_RPATH, DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL, DT_TEXTREL, DT_JMPREL = 14, 15, 17, 18, 19, 20, 22, 23
DT_INIT_ARRAY, DT_FINI_ARRAY, DT_INIT_ARRAYSZ, DT_FINI_ARRAYSZ, DT_RUNPATH, DT_FLAGS = 25, 26, 27, 28, 29, 30
DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ, DT_RELRSZ, DT_RELR, DT_RELRENT = 32, 33, 35, 36, 37
DT_GNU_HASH, DT_TLSDESC_PLT, DT_TLSDESC_GOT = 0x6FFFFEF5, 0x6FFFFEF6, 0x6FFFFEF7
DT_CONFIG, DT_DEPAUDIT, DT_AUDIT = 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC
DT_VERSYM, DT_RELACOUNT, DT_RELCOUNT, DT_FLAGS_1 = 0x6FFFFFF0, 0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFB
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
DT_AUXILIARY, DT_FILTER = 0x7FFFFFFD, 0x7FFFFFFF
DF_TEXTREL = 0x4
DF_1_NOOPEN, DF_1_PIE = 0x40, 0x08000000

TAG_NAMES = {value: name for name, value in globals().items() if name.startswith("DT_")}
MULTI_VALUED = {DT_NEEDED, DT_AUXILIARY, DT_FILTER}
STRING_TAGS = {DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH, DT_AUXILIARY, DT_FILTER, DT_CONFIG, DT_DEPAUDIT,
               DT_AUDIT}
ARRAYS = ((DT_INIT_ARRAY, DT_INIT_ARRAYSZ), (DT_FINI_ARRAY, DT_FINI_ARRAYSZ), (DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ))


class Ranges:
    """Address ranges the loader reads as tables: no relocation may write into them."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self._merged: list[tuple[int, int]] | None = None

    def add(self, start: int, size: int) -> None:
        if size:
            self.ranges.append((start, start + size))
            self._merged = None

    def overlaps(self, start: int, end: int) -> bool:
        if self._merged is None:
            merged: list[tuple[int, int]] = []
            for low, high in sorted(self.ranges):
                if merged and low <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], high))
                else:
                    merged.append((low, high))
            self._merged = merged
            self._starts = [low for low, _ in merged]
        index = bisect.bisect_left(self._starts, end) - 1
        return index >= 0 and self._merged[index][1] > start
