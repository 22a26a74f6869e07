"""Mutation fuzzing of host program loading: no image may crash or hang the process.

Valid kernel images (tests/kernels/basic.c and lifetime.c, built with cc) are mutated with bit
flips, byte sets, truncations, edits of ELF header, program header, section header, dynamic
table, relocation and symbol fields (to values that matter: 0, -1, sizes, the file size, other
tables' addresses, off-by-one and off-by-a-page), tag changes, removed, duplicated and swapped
entries, runs of random bytes, and stacks of several of these. For each image,
``olCreateProgram`` must return a program (then destroyed) or raise ``OffloadError``, and
``olIsValidBinary`` must agree with it; nothing else may escape. At the end of each batch the
original image is loaded and a kernel launched: the runtime still works.

Each batch runs in a child process (``python tests/test_host_image_fuzz.py batch ...``), so that
a crash or a hang fails the test with the seed, the image's index and its mutation instead of
ending the run; the failing image is written next to the test's temporary files. The CI budget
is 2,000 images (about 10 s on 2 cores); ``OFFLOADRT_FUZZ_IMAGES`` raises it and
``OFFLOADRT_FUZZ_SEED`` picks another seed. ``pytest -rP`` shows the summary: how many images the
structural check rejected, how many the test load in a separate process rejected, how many loaded.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path

CI_IMAGES = 2000
DEFAULT_SEED = 20240607
BATCH_SIZE = 250
BATCH_TIMEOUT = 300.0  # seconds for one batch child; a batch takes about 2 s
CHECK_TIMEOUT = "3"  # OFFLOAD_IMAGE_CHECK_TIMEOUT in the children: a mutated constructor may spin
BASES = ("basic", "lifetime")
PREFIX = "FUZZ "

INTERESTING = (0, 1, 2, 3, 4, 7, 8, 16, 24, 0x40, 0x7F, 0x80, 0xFF, 0x100, 0x1000, 0x7FFF, 0x8000, 0xFFFF,
               0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
DELTAS = (-1, 1, -4, 4, -8, 8, -16, 16, -24, 24, -0x1000, 0x1000, -0x100000, 0x100000)
KNOWN_TAGS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
              28, 29, 30, 32, 33, 35, 36, 37, 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFB,
              0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF, 0x7FFFFFFD, 0x7FFFFFFF)
# ELF64 field layouts: (name, offset, width)
EHDR_FIELDS = [("e_ident", 4, 1), ("ei_data", 5, 1), ("ei_version", 6, 1), ("ei_osabi", 7, 1), ("ei_abiversion", 8, 1),
               ("e_type", 16, 2), ("e_machine", 18, 2), ("e_version", 20, 4), ("e_entry", 24, 8), ("e_phoff", 32, 8),
               ("e_shoff", 40, 8), ("e_flags", 48, 4), ("e_ehsize", 52, 2), ("e_phentsize", 54, 2), ("e_phnum", 56, 2),
               ("e_shentsize", 58, 2), ("e_shnum", 60, 2), ("e_shstrndx", 62, 2)]
PHDR_FIELDS = [("p_type", 0, 4), ("p_flags", 4, 4), ("p_offset", 8, 8), ("p_vaddr", 16, 8), ("p_paddr", 24, 8),
               ("p_filesz", 32, 8), ("p_memsz", 40, 8), ("p_align", 48, 8)]
SHDR_FIELDS = [("sh_name", 0, 4), ("sh_type", 4, 4), ("sh_flags", 8, 8), ("sh_addr", 16, 8), ("sh_offset", 24, 8),
               ("sh_size", 32, 8), ("sh_link", 40, 4), ("sh_info", 44, 4), ("sh_addralign", 48, 8),
               ("sh_entsize", 56, 8)]
DYN_FIELDS = [("d_tag", 0, 8), ("d_val", 8, 8)]
RELA_FIELDS = [("r_offset", 0, 8), ("r_type", 8, 4), ("r_sym", 12, 4), ("r_addend", 16, 8)]
SYM_FIELDS = [("st_name", 0, 4), ("st_info", 4, 1), ("st_other", 5, 1), ("st_shndx", 6, 2), ("st_value", 8, 8),
              ("st_size", 16, 8)]


class Mutator:
    """Knows where a valid ELF64 image keeps its tables, and mutates copies of it."""

    def __init__(self, name: str, image: bytes):
        from elftools.elf.elffile import ELFFile

        self.name = name
        self.image = image
        elf = ELFFile(BytesIO(image))
        header = elf.header
        self.tables: dict[str, tuple[int, int, int, list[tuple[str, int, int]]]] = {
            "ehdr": (0, 1, 64, EHDR_FIELDS),
            "phdr": (header.e_phoff, header.e_phnum, 56, PHDR_FIELDS),
            "shdr": (header.e_shoff, header.e_shnum, 64, SHDR_FIELDS),
        }
        self.regions: dict[str, tuple[int, int]] = {"ehdr": (0, 64), "phdr": (header.e_phoff, header.e_phnum * 56),
                                                    "shdr": (header.e_shoff, header.e_shnum * 64)}
        self.addresses: list[int] = [seg["p_vaddr"] for seg in elf.iter_segments()]
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_NOBITS" or not section.name:
                continue
            offset, size = section["sh_offset"], section["sh_size"]
            self.regions[section.name] = (offset, size)
            if section["sh_addr"]:
                self.addresses.append(section["sh_addr"])
            entry = {"SHT_DYNAMIC": (16, DYN_FIELDS), "SHT_RELA": (24, RELA_FIELDS),
                     "SHT_DYNSYM": (24, SYM_FIELDS)}.get(section["sh_type"])
            if entry and size:
                self.tables[section.name] = (offset, size // entry[0], entry[0], entry[1])
        self.loader_regions = [name for name in self.regions if name in (
            "ehdr", "phdr", "shdr", ".dynamic", ".rela.dyn", ".rela.plt", ".dynsym", ".dynstr", ".gnu.hash",
            ".gnu.version", ".gnu.version_r", ".init_array", ".fini_array", ".note.gnu.build-id",
            ".note.gnu.property", ".eh_frame_hdr", ".got", ".got.plt", ".tdata")]

    # -- helpers -----------------------------------------------------------------------------------

    def value(self, rng: random.Random, original: int, width: int) -> int:
        pick = rng.random()
        if pick < 0.3:
            value = rng.choice(INTERESTING)
        elif pick < 0.55:
            value = original + rng.choice(DELTAS)
        elif pick < 0.7:
            value = len(self.image) + rng.choice((-1, 0, 1, -8, 8, -64))
        elif pick < 0.9:
            value = rng.choice(self.addresses) + rng.choice((0, 0, 4, -4, 8, -8, 16))
        else:
            value = rng.getrandbits(8 * width)
        return value % (1 << (8 * width))

    def position(self, rng: random.Random, data: bytearray) -> int:
        """An offset in ``data``, more often inside a table the loader reads."""
        if rng.random() < 0.6:
            offset, size = self.regions[rng.choice(self.loader_regions)]
            if size and offset + size <= len(data):
                return offset + rng.randrange(size)
        return rng.randrange(len(data))

    # -- mutations ---------------------------------------------------------------------------------

    def flip(self, data: bytearray, rng: random.Random) -> str:
        spots = [(self.position(rng, data), rng.randrange(8)) for _ in range(rng.randint(1, 4))]
        for offset, bit in spots:
            data[offset] ^= 1 << bit
        return "flip " + ",".join(f"{offset:#x}.{bit}" for offset, bit in spots)

    def set_bytes(self, data: bytearray, rng: random.Random) -> str:
        spots = []
        for _ in range(rng.randint(1, 4)):
            offset = self.position(rng, data)
            data[offset] = rng.choice((0, 0xFF, 0x7F, 0x80, 1, rng.randrange(256)))
            spots.append(f"{offset:#x}={data[offset]:#x}")
        return "set " + ",".join(spots)

    def truncate(self, data: bytearray, rng: random.Random) -> str:
        pick = rng.random()
        if pick < 0.3:
            length = len(data) - rng.randint(1, 64)
        elif pick < 0.6:
            offset, size = self.regions[rng.choice(list(self.regions))]
            length = offset + rng.choice((0, size // 2, size - 1, size))
        else:
            length = rng.randrange(len(data))
        length = max(0, min(length, len(data) - 1))
        del data[length:]
        return f"truncate to {length}"

    def field(self, data: bytearray, rng: random.Random) -> str:
        table = rng.choice(list(self.tables))
        offset, count, size, fields = self.tables[table]
        index = rng.randrange(count)
        name, field_offset, width = rng.choice(fields)
        at = offset + index * size + field_offset
        if at + width > len(data):
            return "field (outside)"
        original = int.from_bytes(data[at:at + width], "little")
        value = self.value(rng, original, width)
        data[at:at + width] = value.to_bytes(width, "little")
        return f"{table}[{index}].{name} {original:#x} -> {value:#x}"

    def dynamic_entries(self, data: bytearray, rng: random.Random) -> str:
        if ".dynamic" not in self.tables:
            return self.field(data, rng)
        offset, count, size, _ = self.tables[".dynamic"]
        entries = [bytes(data[offset + i * size:offset + (i + 1) * size]) for i in range(count)]
        used = next((i for i, e in enumerate(entries) if e[:8] == bytes(8)), count)
        index = rng.randrange(max(1, used))
        pick = rng.random()
        if pick < 0.4:
            tag = rng.choice(KNOWN_TAGS)
            entries[index] = struct.pack("<q", tag) + entries[index][8:]
            what = f"tag of entry {index} -> {tag:#x}"
        elif pick < 0.6:
            del entries[index]
            entries.append(bytes(size))
            what = f"remove entry {index}"
        elif pick < 0.8:
            entries.insert(index, entries[rng.randrange(max(1, used))])
            entries.pop()
            what = f"duplicate an entry before {index}"
        else:
            other = rng.randrange(count)
            entries[index], entries[other] = entries[other], entries[index]
            what = f"swap entries {index} and {other}"
        data[offset:offset + count * size] = b"".join(entries)
        return "dynamic " + what

    def swap_headers(self, data: bytearray, rng: random.Random) -> str:
        table = rng.choice(("phdr", "shdr"))
        offset, count, size, _ = self.tables[table]
        if count < 2:
            return "swap (too few)"
        first, second = rng.sample(range(count), 2)
        a, b = offset + first * size, offset + second * size
        data[a:a + size], data[b:b + size] = data[b:b + size], data[a:a + size]
        return f"swap {table} {first} and {second}"

    def random_bytes(self, data: bytearray, rng: random.Random) -> str:
        if rng.random() < 0.05:
            tail = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 4096)))
            data[64:] = tail
            return f"random image of {len(data)} bytes after a valid header"
        start = self.position(rng, data)
        length = min(rng.randint(1, 256), len(data) - start)
        data[start:start + length] = bytes(rng.getrandbits(8) for _ in range(length))
        return f"random {length} bytes at {start:#x}"

    def mutate(self, rng: random.Random) -> tuple[bytes, str]:
        data = bytearray(self.image)
        mutations: list[tuple[float, Callable[[bytearray, random.Random], str]]] = [
            (15, self.flip), (10, self.set_bytes), (7, self.truncate), (35, self.field), (12, self.dynamic_entries),
            (5, self.swap_headers), (6, self.random_bytes)]
        weights = [w for w, _ in mutations]
        steps = 1 if rng.random() < 0.85 else rng.randint(2, 4)
        said = []
        for _ in range(steps):
            mutation = rng.choices([m for _, m in mutations], weights)[0]
            if not data:
                break
            said.append(mutation(data, rng))
        return bytes(data), f"{self.name}: " + "; ".join(said)


def image_for(mutators: list[Mutator], seed: int, index: int) -> tuple[bytes, str]:
    """The ``index``-th mutated image of run ``seed`` (the same bytes every time for the same bases)."""
    rng = random.Random(f"{seed}:{index}")
    return rng.choice(mutators).mutate(rng)


# ---- the batch child -------------------------------------------------------------------------------

def run_batch(seed: int, start: int, count: int, bases: list[Path]) -> int:
    from offloadrt import (
        AllocType,
        DeviceInfo,
        DeviceType,
        Dimensions,
        ErrorCode,
        KernelLaunchSizeArgs,
        OffloadError,
        SymbolKind,
        api,
    )
    from offloadrt.plugins.host import loader as host_loader
    from offloadrt.plugins.host import probe as host_probe

    mutators = [Mutator(path.stem, path.read_bytes()) for path in bases]
    api.olInit()
    devices: list[api.Device] = []
    api.olIterateDevices(lambda device, _: devices.append(device))
    host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
    stats: Counter[str] = Counter()
    for index in range(start, start + count):
        image, description = image_for(mutators, seed, index)
        print(f"{PREFIX}TRY {index} {description}", flush=True)
        checks_before = host_probe.checks_started()
        outcome = "loaded"
        try:
            valid = api.olIsValidBinary(host, image)
            try:
                api.olDestroyProgram(api.olCreateProgram(host, image))
            except OffloadError as exc:
                outcome = "rejected"
                if exc.code not in (ErrorCode.INVALID_BINARY,):
                    print(f"{PREFIX}PROBLEM {index} unexpected error code {exc!r}", flush=True)
        except BaseException as exc:  # noqa: BLE001 - anything but OffloadError is the failure looked for
            print(f"{PREFIX}PROBLEM {index} {type(exc).__name__} escaped: {exc!r}", flush=True)
            stats["leaked"] += 1
            continue
        if valid != (outcome == "loaded"):
            print(f"{PREFIX}PROBLEM {index} olIsValidBinary said {valid}, olCreateProgram {outcome}", flush=True)
        if outcome == "rejected":
            try:
                host_loader.check_image(image)
                outcome = "rejected by the test load"
            except OffloadError:
                outcome = "rejected by the structural check"
        stats[outcome] += 1
        stats["test loads"] += host_probe.checks_started() - checks_before
    # the runtime still works: load the original image and run a kernel
    program = api.olCreateProgram(host, mutators[0].image)
    out = api.olMemAlloc(host, AllocType.HOST, 4 * 12)
    api.olLaunchKernel(None, host, api.olGetSymbol(program, "foo", SymbolKind.KERNEL), struct.pack("P", out),
                       KernelLaunchSizeArgs(1, Dimensions(3, 1, 1), Dimensions(4, 1, 1)))
    works = list((ctypes.c_uint32 * 12).from_address(out)) == list(range(12))
    api.olMemFree(out)
    api.olDestroyProgram(program)
    api.olShutDown()
    print(f"{PREFIX}DONE {json.dumps({'stats': stats, 'works': works})}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["batch", "image"])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--base", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path, help="image mode: write the start-th image here")
    args = parser.parse_args(argv)
    if args.mode == "image":
        mutators = [Mutator(path.stem, path.read_bytes()) for path in args.base]
        image, description = image_for(mutators, args.seed, args.start)
        args.out.write_bytes(image)
        print(description)
        return 0
    return run_batch(args.seed, args.start, args.count, args.base)


# ---- the test --------------------------------------------------------------------------------------

def _batch(seed: int, start: int, count: int, bases: list[Path]) -> tuple[int, str, str, float]:
    command = [sys.executable, "-X", "faulthandler", __file__, "batch", "--seed", str(seed), "--start", str(start),
               "--count", str(count), *(arg for base in bases for arg in ("--base", str(base)))]
    environment = {**os.environ, "OFFLOAD_IMAGE_CHECK_TIMEOUT": CHECK_TIMEOUT}
    began = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BATCH_TIMEOUT, env=environment,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return -1, output, "the batch did not finish (a hang)", time.monotonic() - began
    return done.returncode, done.stdout, done.stderr, time.monotonic() - began


def test_mutated_images_never_crash_the_process(build, tmp_path: Path) -> None:
    total = int(os.environ.get("OFFLOADRT_FUZZ_IMAGES", CI_IMAGES))
    seed = int(os.environ.get("OFFLOADRT_FUZZ_SEED", DEFAULT_SEED))
    bases = []
    for name in BASES:
        path = tmp_path / f"{name}.so"
        path.write_bytes(build(name))
        bases.append(path)
    batches = [(start, min(BATCH_SIZE, total - start)) for start in range(0, total, BATCH_SIZE)]
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(len(batches), os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda batch: _batch(seed, batch[0], batch[1], bases), batches))
    elapsed = time.monotonic() - began
    stats: Counter[str] = Counter()
    problems = []
    for (start, count), (status, stdout, stderr, _seconds) in zip(batches, results):
        lines = [line[len(PREFIX):] for line in stdout.splitlines() if line.startswith(PREFIX)]
        problems += [f"seed {seed} image {line.split()[1]}: {line}" for line in lines if line.startswith("PROBLEM")]
        done = [line for line in lines if line.startswith("DONE ")]
        if status != 0 or not done:
            tried = [line for line in lines if line.startswith("TRY ")]
            last = tried[-1] if tried else f"TRY {start} (before the first image)"
            index = int(last.split()[1])
            saved = tmp_path / f"crash-{seed}-{index}.so"
            subprocess.run([sys.executable, __file__, "image", "--seed", str(seed), "--start", str(index),
                            "--out", str(saved), *(arg for base in bases for arg in ("--base", str(base)))],
                           check=False, capture_output=True)
            problems.append(f"seed {seed}: the batch of images {start}..{start + count - 1} ended with status "
                            f"{status} at image {index} ({last[4:]}); the image is {saved}; stderr: {stderr[-3000:]}")
            continue
        summary = json.loads(done[0][5:])
        stats.update(summary["stats"])
        if not summary["works"]:
            problems.append(f"seed {seed}: after images {start}..{start + count - 1} a kernel of the original "
                            f"image computed a wrong result")
    print(f"host image fuzz: seed {seed}, {total} images in {elapsed:.1f} s: " + ", ".join(
        f"{key} {value}" for key, value in sorted(stats.items())) + f"; crashes {len(problems)}")
    assert not problems, "\n".join(problems[:20])
    assert stats["loaded"] + stats["rejected by the structural check"] + stats["rejected by the test load"] == total
    # The mutations reach every layer: some images load, some fail the structural check, some the test load.
    assert stats["loaded"] and stats["rejected by the structural check"] and stats["rejected by the test load"]


if __name__ == "__main__":
    sys.exit(main())
