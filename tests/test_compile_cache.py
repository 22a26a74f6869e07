"""The compile cache: hits and misses, what the key covers, damaged entries recompiled, two processes
compiling at once, the folder it uses, a folder that cannot be written, and list/clear."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from offloadrt import ErrorCode, OffloadError, OffloadWarning
from offloadrt import compile as compiler
from offloadrt.compile import Compiled, Target, _cache, build

SOURCE = r"""
#include <offloadrt/host_kernel.h>
struct args { double a; float *out; };
OL_HOST_KERNEL k(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_ARGS(k, struct args);
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The languages of the compiles that really ran (cache misses)."""
    ran: list[str] = []
    real = compiler._compile

    def counted(source: str, options: tuple[str, ...], lang: str, target: Target, name: str) -> Compiled:
        ran.append(lang)
        return real(source, options, lang, target, name)

    monkeypatch.setattr(compiler, "_compile", counted)
    return ran


def test_a_second_compile_is_a_hit_with_the_same_image_and_signatures(compiles: list[str], cache_dir: Path) -> None:
    first = build(SOURCE)
    second = build(SOURCE)
    assert compiles == ["c"]
    assert second.image == first.image and second.kernels == first.kernels == {"k": ("float64", "ptr")}
    assert len(list(cache_dir.glob("*.olrtc"))) == 1
    build(SOURCE, cache=False)
    assert compiles == ["c", "c"]


def test_the_key_covers_source_options_and_compiler(compiles: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    build(SOURCE)
    build(SOURCE + "\n")
    build(SOURCE, ["-O3"])
    build(SOURCE, ["-O3"])
    assert compiles == ["c"] * 3
    monkeypatch.setattr(compiler, "_identity", lambda lang, target: "another compiler 99.0")
    build(SOURCE)
    assert compiles == ["c"] * 4
    key = _cache.key(SOURCE, (), "c", Target("host"), "x")
    assert key != _cache.key(SOURCE, (), "gpu-c", Target("host"), "x")
    assert _cache.key(SOURCE, (), "cuda", Target("cuda", "sm_80"), "x") != \
        _cache.key(SOURCE, (), "cuda", Target("cuda", "sm_90"), "x")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header"])
def test_a_damaged_entry_is_compiled_again(compiles: list[str], cache_dir: Path, damage: str) -> None:
    good = build(SOURCE)
    entry, = cache_dir.glob("*.olrtc")
    data = entry.read_bytes()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data = data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:]
    elif damage == "garbage":
        data = os.urandom(len(data))
    elif damage == "empty":
        data = b""
    else:  # a well-formed entry whose header is not what a reader expects
        header = b'{"format": 1, "kernels": 5}'
        data = _cache.MAGIC + len(header).to_bytes(8, "little") + header
    entry.write_bytes(data)
    again = build(SOURCE)
    assert compiles == ["c", "c"] and again.image == good.image
    assert _cache.load(entry.stem) is not None  # rewritten whole


def test_two_processes_compiling_at_once_both_succeed(cache_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "compile_once.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from offloadrt.compile import build
        for round in range(3):
            compiled = build({SOURCE!r} + "// round %d" % round)
            assert compiled.kernels == {{"k": ("float64", "ptr")}}, compiled.kernels
        print("ok")
    """))
    env = dict(os.environ, OFFLOADRT_CACHE_DIR=str(cache_dir))
    workers = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0 and out.strip() == "ok", err
    assert len(list(cache_dir.glob("*.olrtc"))) == 3 and not list(cache_dir.glob(".*.tmp"))
    assert all(_cache.load(path.stem) is not None for path in cache_dir.glob("*.olrtc"))


def test_the_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _cache.folder() == tmp_path / "cache"
    monkeypatch.delenv("OFFLOADRT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.folder() == tmp_path / "xdg" / "offloadrt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _cache.folder() == tmp_path / "home" / ".cache" / "offloadrt"
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", "")
    with pytest.raises(OffloadError) as info:
        build(SOURCE)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and "OFFLOADRT_CACHE_DIR" in info.value.details


def test_an_unwritable_cache_warns_and_still_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(OffloadWarning, match="not cached"):
        compiled = build(SOURCE)
    assert compiled.kernels == {"k": ("float64", "ptr")}


def test_entries_and_clear(cache_dir: Path) -> None:
    assert _cache.entries() == [] and _cache.clear() == (0, 0)
    build(SOURCE)
    build(SOURCE, ["-O0"])
    shown = _cache.entries()
    assert [(e.lang, e.target, e.kernels) for e in shown] == [("c", "host", ("k",))] * 2
    (cache_dir / "junk.olrtc").write_bytes(b"junk")
    assert [e.lang for e in _cache.entries()].count("?") == 1
    manifests = sum(path.stat().st_size for path in cache_dir.glob("*.olrtm"))  # what each compile read
    assert manifests > 0
    removed, freed = _cache.clear()
    assert removed == 3 and freed == sum(e.size for e in shown) + 4 + manifests
    assert _cache.entries() == [] and list(cache_dir.iterdir()) == []


def test_struct_and_array_signatures_come_back_from_the_cache(compiles: list[str]) -> None:
    source = SOURCE + r"""
typedef struct { int32_t a; double b; } pair_t;
struct packed_args { float c[4]; pair_t p; double *out; };
OL_HOST_KERNEL packed(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_ARGS(packed, struct packed_args);
"""
    first = build(source).kernels["packed"]
    hit = build(source).kernels["packed"]
    assert compiles == ["c"]
    assert first is not None and hit is not None
    assert ctypes.sizeof(hit[0]) == 16 and hit[0]._length_ == 4
    assert [name for name, _ in hit[1]._fields_] == ["a", "b"] and hit[2] == "ptr"
    assert hit[1] is first[1]  # the same ctypes type in one process


def test_threads_compiling_the_same_source_at_once(cache_dir: Path) -> None:
    source = SOURCE + "// threads\n"
    results: list[Compiled] = []
    errors: list[BaseException] = []

    def compile_it() -> None:
        try:
            results.append(build(source))
        except BaseException as exc:  # noqa: BLE001  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=compile_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(results) == 4
    assert all(r.kernels == {"k": ("float64", "ptr")} for r in results)
    assert len(list(cache_dir.glob("*.olrtc"))) == 1 and not list(cache_dir.glob(".*.tmp"))


def test_the_cache_folder_is_made_for_this_user_alone(compiles: list[str], cache_dir: Path) -> None:
    old = os.umask(0)  # even so
    try:
        build(SOURCE)
    finally:
        os.umask(old)
    assert (cache_dir.stat().st_mode & 0o777) == 0o700
    build(SOURCE)
    assert compiles == ["c"]  # and used


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_folder_others_may_write_is_not_used(compiles: list[str], cache_dir: Path, mode: int) -> None:
    """Another user could plant an entry there, whose constructor would run in this process."""
    build(SOURCE)
    cache_dir.chmod(mode)
    _cache._warned_folders.discard(str(cache_dir))
    with pytest.warns(OffloadWarning, match="group or other users may write it"):
        build(SOURCE)
    build(SOURCE)  # warned once
    assert compiles == ["c", "c", "c"]  # compiled each time, not loaded from there
    assert len(list(cache_dir.glob("*.olrtc"))) == 1  # nor written to


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_special_files_under_an_entry_name_are_misses_that_never_hang(cache_dir: Path, kind: str) -> None:
    """A FIFO blocked the compile and `offloadrt cache list` forever; a symbolic link to /dev/zero
    was read until MemoryError. Each is a miss now: the source is compiled, and the entry stored
    anew where that can be done (nothing replaces a folder)."""
    name = _cache.key(SOURCE, (), "c", Target("host"), compiler._identity("c", Target("host")))
    entry = cache_dir / f"{name}.olrtc"  # a source that reads no file of the user's: its entry is its key
    manifest = cache_dir / f"{name}.olrtm"  # and its manifest says so
    cache_dir.mkdir(mode=0o700)
    for path in (entry, manifest):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()
    script = textwrap.dedent(f"""
        import os
        os.environ["OFFLOADRT_CACHE_DIR"] = {str(cache_dir)!r}
        from offloadrt.compile import _cache, build
        print(sorted(build({SOURCE!r}).kernels))
        print([entry.lang for entry in _cache.entries()])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    compiled, listed = result.stdout.splitlines()
    assert compiled == "['k']"
    if kind == "directory":
        assert "not cached" in result.stderr and listed == "['?']", (listed, result.stderr)
    else:
        assert entry.is_file() and not entry.is_symlink() and listed == "['c']", listed
        assert manifest.is_file() and not manifest.is_symlink()


def test_an_entry_of_another_user_or_too_large_is_not_read(compiles: list[str], cache_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    build(SOURCE)
    limit = _cache.MAX_ENTRY_BYTES
    monkeypatch.setattr(_cache, "MAX_ENTRY_BYTES", 16)
    build(SOURCE)  # too large: compiled again
    monkeypatch.setattr(_cache, "MAX_ENTRY_BYTES", limit)
    build(SOURCE)  # a hit
    fstat = os.fstat
    monkeypatch.setattr(_cache.os, "fstat", lambda fd: _Foreign(fstat(fd)))
    build(SOURCE)  # "another user's": compiled again
    assert compiles == ["c", "c", "c"]


class _Foreign:
    """An fstat result as another user's file would give it (a test double)."""

    def __init__(self, info: os.stat_result) -> None:
        self._info = info

    def __getattr__(self, name: str) -> object:
        return os.getuid() + 1 if name == "st_uid" else getattr(self._info, name)
