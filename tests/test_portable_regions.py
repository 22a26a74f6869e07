"""Barrier kernels run as work-group regions on the host (loops over the items between barriers,
offloadrt/compile/_regions.py) instead of fibers: which kernels take that path, and that every
eligible kernel here, in tests/test_portable_barriers.py and in tests/kernels/portable/features.c
gives bit-identical results on the region path and on the fiber path (``-D__OFFLOADRT_HOST_FIBERS``),
over group shapes from Hypothesis. Needs clang 20 or later; skips with the reason without it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_portable_barriers import SOURCE as BARRIERS
from toolchains import needs_clang

import offloadrt
from offloadrt.compile import _portable, _portable_host
from offloadrt.compile._types import Target
from offloadrt.core import _runtime

pytestmark = needs_clang

FEATURES = (Path(__file__).parent / "kernels" / "portable" / "features.c").read_text()
FIBERS = [_portable_host.FIBERS_OPTION]

ELIGIBLE = r"""#include <gpuintrin.h>
#include <stdint.h>
#include <stddef.h>

static inline uint32_t flat_id(void) {
  return __gpu_thread_id_x() + __gpu_num_threads_x() * (__gpu_thread_id_y() + __gpu_num_threads_y() *
                                                        __gpu_thread_id_z());
}

/* a tree sum whose induction variable is declared before the loop (any group size up to 1024) */
__gpu_kernel void tree_before(const float *x, float *sums) {
  static __gpu_local float part[1024];
  uint32_t t = flat_id();
  const uint32_t n = __gpu_num_threads_x() * __gpu_num_threads_y() * __gpu_num_threads_z();
  part[t] = x[__gpu_block_id_x() * n + t];
  uint32_t s;
  for (s = __gpu_num_threads_x() * __gpu_num_threads_y() * __gpu_num_threads_z(); s > 1; s = (s + 1) / 2) {
    __gpu_sync_threads();
    uint32_t h = (s + 1) / 2;
    if (t < h && t + h < s)
      part[t] += part[t + h];
  }
  if (t == 0)
    sums[__gpu_block_id_x()] = part[0] + (float)s;
}

/* a tree sum over x with the induction variable in the loop's header, halving a power of two */
__gpu_kernel void tree_halves(const float *x, float *sums, uint32_t width) {
  static __gpu_local float part[1024];
  uint32_t t = __gpu_thread_id_x();
  float acc = 0.0f;
  for (uint32_t i = t; i < width; i += __gpu_num_threads_x())
    acc += x[__gpu_block_id_x() * width + i];
  part[t] = acc;
  for (uint32_t s = width / 2; s > 0; s >>= 1) {
    __gpu_sync_threads();
    if (t < s && t + s < __gpu_num_threads_x())
      part[t] += part[t + s];
  }
  if (t == 0)
    sums[__gpu_block_id_x()] = part[0];
}

/* items from `live` on return before the first barrier, odd ones after it; three barriers */
__gpu_kernel void early_return(const int32_t *in, int32_t *out, uint32_t live) {
  static __gpu_local int32_t seen[1024];
  uint32_t t = flat_id();
  uint32_t n = __gpu_num_threads_x() * __gpu_num_threads_y() * __gpu_num_threads_z();
  size_t base = (size_t)__gpu_block_id_x() * n;
  out[base + t] = -1;
  if (t >= live)
    return;
  seen[t] = in[base + t] * 3;
  __gpu_sync_threads();
  int32_t mine = seen[(t + 1) % live], pair[2];
  pair[0] = mine;
  pair[1] = (int32_t)t;
  if (t % 2) {
    out[base + t] = mine;
    return;
  }
  __gpu_sync_threads();
  seen[t] = pair[0] + pair[1];
  __gpu_sync_threads();
  out[base + t] = seen[(t + 2) % live] * 7 + mine;
}
"""

INELIGIBLE = r"""#include <gpuintrin.h>
#include <stdint.h>

__gpu_kernel void in_if(int32_t *out) {
  if (__gpu_thread_id_x() < 1000)
    __gpu_sync_threads();
  out[__gpu_thread_id_x()] = 1;
}

static void wait_here(void) { __gpu_sync_threads(); }

__gpu_kernel void through_call(int32_t *out) {
  wait_here();
  out[__gpu_thread_id_x()] = 1;
}

__gpu_kernel void item_bound(int32_t *out) {
  for (uint32_t i = 0; i < __gpu_thread_id_x(); ++i) {
    __gpu_sync_threads();
  }
  out[__gpu_thread_id_x()] = 1;
}

__gpu_kernel void with_lane_op(uint32_t *out) {
  __gpu_sync_threads();
  out[__gpu_thread_id_x()] = __gpu_lane_sum_u32(__gpu_lane_mask(), 1);
}

__gpu_kernel void with_goto(int32_t *out) {
  uint32_t t = __gpu_thread_id_x();
  if (t == 0)
    goto skip;
  out[t] = 2;
skip:
  __gpu_sync_threads();
  out[t] += 1;
}

__gpu_kernel void breaks_out(int32_t *out, uint32_t rounds) {
  uint32_t t = __gpu_thread_id_x();
  for (uint32_t r = 0; r < rounds; ++r) {
    __gpu_sync_threads();
    if (t == r)
      break;
  }
  out[t] = 1;
}

__gpu_kernel void writes_parameter(int32_t *out, uint32_t n) {
  n += __gpu_thread_id_x();
  __gpu_sync_threads();
  out[__gpu_thread_id_x()] = (int32_t)n;
}
"""


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    """The Python layer's runtime for this module only."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


def symbols(source: str, options: list[str], lang: str = "gpu-c") -> set[str]:
    image = _portable.compile_portable(source, options, lang, Target("host")).image
    table = ELFFile(io.BytesIO(image)).get_section_by_name(".symtab")
    return {symbol.name for symbol in table.iter_symbols()} if table else set()


def test_the_eligible_kernels_take_the_region_path() -> None:
    assert _portable_host.kernel_paths(ELIGIBLE, "gpu-c") == {name: "regions" for name in
                                                              ("tree_before", "tree_halves", "early_return")}
    # C++ (references, overloads, methods, constructors, implicit calls) is not analysed: fibers
    assert set(_portable_host.kernel_paths(ELIGIBLE, "gpu-c++").values()) == {"fibers: C++ kernels run as fibers"}
    paths = _portable_host.kernel_paths(BARRIERS)
    assert {name for name, path in paths.items() if path == "regions"} == {"transpose_tiled", "rotate"}
    features = _portable_host.kernel_paths(FEATURES)
    assert features["group_sum"] == features["reverse"] == "regions"
    assert features["scale"] == "loop" and features["lanes"].startswith("fibers")


def test_kernels_outside_the_class_stay_on_fibers() -> None:
    paths = _portable_host.kernel_paths(INELIGIBLE)
    assert set(paths) == {"in_if", "through_call", "item_bound", "with_lane_op", "with_goto", "breaks_out",
                          "writes_parameter"}
    assert all(path.startswith("fibers: ") for path in paths.values()), paths
    assert "not a top-level statement" in paths["in_if"]
    assert "wait_here" in paths["through_call"]
    assert "may differ between items" in paths["item_bound"]
    assert "GotoStmt" in paths["with_goto"]
    assert "break" in paths["breaks_out"]
    assert "parameters" in paths["writes_parameter"]


def test_the_fiber_option_and_the_images_say_which_path_was_built() -> None:
    assert all(path.startswith("fibers") for path in _portable_host.kernel_paths(ELIGIBLE, options=FIBERS).values())
    built = symbols(ELIGIBLE, [])
    assert {"__ol_regions_tree_before", "__ol_regions_early_return"} <= built  # not a silent fall-back
    assert not any(name.startswith("__ol_regions_") for name in symbols(ELIGIBLE, FIBERS))


@pytest.fixture(scope="module")
def programs(layer: None) -> dict[str, tuple[offloadrt.Program, offloadrt.Program]]:
    """(region path, fiber path) programs of each source."""
    host = offloadrt.device("host")
    sources = {"eligible": (ELIGIBLE, "gpu-c"), "barriers": (BARRIERS, "gpu-c"), "features": (FEATURES, "gpu-c"),
               "eligible++": (ELIGIBLE, "gpu-c++")}
    return {key: (host.compile(text, [], lang=lang), host.compile(text, FIBERS, lang=lang))
            for key, (text, lang) in sources.items()}


def both(programs: dict[str, tuple[offloadrt.Program, offloadrt.Program]], key: str, name: str,
         grid: int | tuple[int, ...], block: int | tuple[int, ...],
         make: Callable[[], list[object]]) -> list[np.ndarray]:
    """The arrays ``make()`` returns after running ``name`` on the region path and on the fiber path,
    side by side (the results of the two runs)."""
    host = offloadrt.device("host")
    results = []
    for program in programs[key]:
        args = make()
        with host.queue() as queue:
            queue.launch(program.kernel(name), grid, block, *args)
        results.append([arg.numpy() for arg in args if isinstance(arg, offloadrt.Array)])
    assert len(results[0]) == len(results[1])
    for region, fiber in zip(*results, strict=True):
        assert region.tobytes() == fiber.tobytes()
    return results[0]


SHAPES = st.tuples(st.integers(1, 12), st.integers(1, 6), st.integers(1, 4))
EXAMPLES = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@EXAMPLES
@given(block=SHAPES, lang=st.sampled_from(["eligible", "eligible++"]))
def test_tree_sums_match_fibers_bit_for_bit(programs: dict[str, tuple[offloadrt.Program, offloadrt.Program]],
                                            block: tuple[int, int, int], lang: str) -> None:
    host, groups = offloadrt.device("host"), 3
    size = block[0] * block[1] * block[2]
    x = np.random.default_rng(size).random(groups * size, dtype=np.float32)
    sums, = both(programs, lang, "tree_before", groups, block,
                 lambda: [offloadrt.asarray(x, host), offloadrt.asarray(np.zeros(groups, np.float32), host)])[1:]
    assert np.allclose(sums, x.reshape(groups, size).sum(axis=1) + 1, rtol=1e-4)
    width = 1 << (block[0] - 1).bit_length()
    y = np.random.default_rng(width).random(groups * width, dtype=np.float32)
    halves, = both(programs, lang, "tree_halves", groups, block[0],
                   lambda: [offloadrt.asarray(y, host), offloadrt.asarray(np.zeros(groups, np.float32), host),
                            np.uint32(width)])[1:]
    assert np.allclose(halves, y.reshape(groups, width).sum(axis=1), rtol=1e-4)


@EXAMPLES
@given(block=SHAPES, live=st.integers(1, 60), lang=st.sampled_from(["eligible", "eligible++"]))
def test_early_returns_match_fibers(programs: dict[str, tuple[offloadrt.Program, offloadrt.Program]],
                                    block: tuple[int, int, int], live: int, lang: str) -> None:
    host, groups = offloadrt.device("host"), 2
    size = block[0] * block[1] * block[2]
    live = min(live, size)  # the items that stay read only what items of the group wrote
    values = np.arange(groups * size, dtype=np.int32)
    out = both(programs, lang, "early_return", groups, block,
               lambda: [offloadrt.asarray(values, host), offloadrt.asarray(np.zeros(groups * size, np.int32), host),
                        np.uint32(live)])[1].reshape(groups, size)
    assert (out[:, live:] == -1).all() and (out[:, :live] != -1).all()


@EXAMPLES
@given(shape=st.tuples(st.integers(1, 40), st.integers(1, 40)))
def test_the_barrier_tests_kernels_match_fibers(programs: dict[str, tuple[offloadrt.Program, offloadrt.Program]],
                                               shape: tuple[int, int]) -> None:
    host = offloadrt.device("host")
    rows, cols = shape
    matrix = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    out = both(programs, "barriers", "transpose_tiled", (-(-cols // 16), -(-rows // 16)), (16, 16),
               lambda: [offloadrt.asarray(matrix, host), offloadrt.asarray(np.full((cols, rows), -1, np.float32), host),
                        np.uint32(rows), np.uint32(cols)])[1]
    assert np.array_equal(out, matrix.T)
    block, size = (rows % 5 + 1, cols % 3 + 1, 2), (rows % 5 + 1) * (cols % 3 + 1) * 2
    values = np.arange(3 * size, dtype=np.int32) * 5
    both(programs, "barriers", "rotate", 3, block,
         lambda: [offloadrt.asarray(values, host), offloadrt.asarray(np.zeros(3 * size, np.int32), host),
                  np.uint32(rows % 4), np.uint32(cols)])


@pytest.mark.parametrize("group", [1, 2, 64, 256])
def test_the_features_kernels_match_fibers(programs: dict[str, tuple[offloadrt.Program, offloadrt.Program]],
                                           group: int) -> None:
    host, groups = offloadrt.device("host"), 3
    x = np.random.default_rng(group).random(groups * group, dtype=np.float32)
    sums = both(programs, "features", "group_sum", groups, group,
                lambda: [offloadrt.asarray(x, host), offloadrt.asarray(np.zeros(groups, np.float32), host)])[1]
    assert np.allclose(sums, x.reshape(groups, group).sum(axis=1), rtol=1e-4)
    if group <= 64:
        data = np.arange(groups * group, dtype=np.uint32)
        reversed_, = both(programs, "features", "reverse", groups, group, lambda: [offloadrt.asarray(data, host)])
        assert np.array_equal(reversed_.reshape(groups, group), data.reshape(groups, group)[:, ::-1])


# ---- what an adversarial review found (each broke the region path before it was excluded) -------------

HEAD = "#include <gpuintrin.h>\n#include <stdint.h>\n"
REVIEWED = {
    # memory of a local that a pointer carries into a later region (it must last: per-item storage)
    "address": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                "  int32_t x = (int32_t)t * 10; int32_t *p = &x;\n  __gpu_sync_threads();\n"
                "  out[t] = *p + (int32_t)t; }\n", "regions"),
    "array_pointer": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                      "  int32_t a[2]; a[0] = 0; a[1] = (int32_t)t; int32_t *q = a + 1;\n  __gpu_sync_threads();\n"
                      "  out[t] = *q; }\n", "regions"),
    "compound_literal": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                         "  int32_t *p = (int32_t[]){t, t + 1, t + 2, t + 3};\n  __gpu_sync_threads();\n"
                         "  out[t] = p[0] + p[3] * 100; }\n", "fibers: the kernel has a CompoundLiteralExpr"),
    # writes the tree does not show as assignments
    "asm_output": ("__gpu_kernel void k(int32_t *out, int32_t n) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                   "  __asm__(\"addl %1, %0\" : \"+r\"(n) : \"r\"(t));\n  __gpu_sync_threads();\n"
                   "  out[t] = n; }\n", "fibers: the kernel has a GCCAsmStmt"),
    # a barrier reached through a function pointer
    "pointer_call": ("static void (*const sync_ptr)(void) = __gpu_sync_threads;\n"
                     "__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                     "  __gpu_local static int32_t s[64]; s[t] = (int32_t)t;\n  __gpu_sync_threads();\n"
                     "  int32_t v = s[(t + 1) % __gpu_num_threads_x()] + 1;\n  sync_ptr();\n  out[t] = v; }\n",
                     "fibers: the kernel calls a function through a pointer"),
    "pointer_call_in_helper": ("static void (*const sync_ptr)(void) = __gpu_sync_threads;\n"
                               "static void helper(void) { sync_ptr(); }\n"
                               "__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                               "  __gpu_local static int32_t s[64]; s[t] = (int32_t)t;\n  __gpu_sync_threads();\n"
                               "  int32_t v = s[(t + 1) % __gpu_num_threads_x()] + 1;\n  helper();\n"
                               "  out[t] = v; }\n", "fibers: the kernel reaches a call through a function pointer"),
    # a per-item local's name inside a type or an array bound (it would name a global afterwards)
    "name_in_type": ("static char v;\n__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                     "  int32_t v = (int32_t)t * 1000;\n  __gpu_sync_threads();\n"
                     "  __typeof__(v) w = v + 1; out[t] = w; }\n", "fibers: the local 'v'"),
    "name_in_bound": ("static char v;\n__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                      "  double v = t;\n  __gpu_sync_threads();\n  char buf[sizeof v];\n"
                      "  out[t] = (int32_t)sizeof buf + (int32_t)v; }\n", "fibers: the local 'v'"),
    # a pragma at the top of the body would govern only the first region
    "pragma": ("__gpu_kernel void k(float *out, const float *a) {\n#pragma clang fp contract(off)\n"
               "  uint32_t t = __gpu_thread_id_x(); float x = a[t] * a[t + 8] + a[t + 16];\n"
               "  __gpu_sync_threads();\n  out[t] = x - a[t] * a[t + 8]; }\n",
               "fibers: the source has a pragma"),
    # an alignment the slot would not keep
    "aligned": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                "  _Alignas(64) int32_t x = (int32_t)t;\n  __gpu_sync_threads();\n"
                "  out[t] = (int32_t)((uintptr_t)&x % 64) + x * 1000; }\n", "fibers: the local 'x'"),
    # a second review round: pointers made without a plain `&x`, names that moved code would change,
    # slot types, cleanups
    "member_address": ("struct S { int32_t x, y; };\n__gpu_kernel void k(int32_t *out) {\n"
                       "  uint32_t t = __gpu_thread_id_x(); struct S s; s.x = (int32_t)t * 10; s.y = 0;\n"
                       "  int32_t *p = &s.x;\n  __gpu_sync_threads();\n  out[t] = *p; }\n", "regions"),
    "member_decay": ("struct A { int32_t a[2]; };\n__gpu_kernel void k(int32_t *out) {\n"
                     "  uint32_t t = __gpu_thread_id_x(); struct A s; s.a[0] = (int32_t)t * 7; int32_t *p = s.a;\n"
                     "  __gpu_sync_threads();\n  out[t] = p[0]; }\n", "regions"),
    "builtin_addressof": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                          "  int32_t v = (int32_t)t * 3; int32_t *p = __builtin_addressof(v);\n"
                          "  __gpu_sync_threads();\n  out[t] = *p; }\n", "regions"),
    "parameter_addressof": ("__gpu_kernel void k(int32_t *out, int32_t n) { uint32_t t = __gpu_thread_id_x();\n"
                            "  int32_t *p = __builtin_addressof(n); if (t == 0) *p = 100;\n"
                            "  __gpu_sync_threads();\n  out[t] = n; }\n", "fibers: the kernel writes one of its"),
    "induction_addressof": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x(); int32_t c = 0;\n"
                            "  for (int32_t i = 0; i < 8; i++) { c += 1;\n    __gpu_sync_threads();\n"
                            "    (*__builtin_addressof(i))++; }\n  out[t] = c; }\n",
                            "fibers: a barrier loop's induction variable is written"),
    "static_names_local": ("static char x;\n__gpu_kernel void k(int32_t *out) {\n"
                           "  int32_t t = (int32_t)__gpu_thread_id_x(); int64_t x = t; (void)x;\n"
                           "  static int32_t s = sizeof(x);\n  __gpu_sync_threads();\n  out[t] = s + t * 100; }\n",
                           "fibers: a static local's declaration names the local 'x'"),
    "enum_in_body": ("enum { K = 1 };\n__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                     "  (void)sizeof(enum E { K = 5 });\n  __gpu_sync_threads();\n  out[t] = K + t * 100; }\n",
                     "fibers: the kernel's body has 'enum'"),
    "const_local": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                    "  const int32_t c = t * 2;\n  __gpu_sync_threads();\n"
                    "  out[t] = _Generic(&c, const int32_t *: c, default: -1); }\n",
                    "fibers: the kernel has a GenericSelectionExpr"),  # (before: "... has a const" type)
    "aligned_typedef": ("typedef int32_t A64 __attribute__((aligned(64)));\n"
                        "__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                        "  A64 x = t;\n  __gpu_sync_threads();\n"
                        "  out[t] = (int32_t)((uintptr_t)&x % 64) + x * 1000; }\n", "fibers: the local 'x'"),
    "cleanup": ("struct W { int32_t *dst; int32_t v; };\nstatic void flush(struct W *w) { *w->dst = w->v; }\n"
                "__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                "  struct W w __attribute__((cleanup(flush))); w.dst = out + t; w.v = 1;\n"
                "  __gpu_sync_threads();\n  out[t] += 10; }\n", "fibers: the kernel's body has 'cleanup'"),
    # a third round: what runs once per group, the floating-point environment, what the copy loses
    "return_and_loop": ("__gpu_kernel void k(int32_t *out, int32_t n) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                        "  out[t] = 1; if (n == 0) return;\n"
                        "  for (int32_t i = 0; i < 8 / n; ++i) { out[t] += i; __gpu_sync_threads(); } }\n",
                        "fibers: the kernel returns early and has a barrier loop"),
    "alloca": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
               "  volatile char *p = (volatile char *)__builtin_alloca(64); p[0] = (char)t; out[t] = p[0];\n"
               "  __gpu_sync_threads();\n  out[t] += 1000; }\n", "fibers: the kernel allocates on the stack"),
    "rounding_mode": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                      "  int32_t g = (int32_t)__gpu_block_id_x(); volatile float a = 1.0f, b = 3.0f;\n"
                      "  float q = a / b; int32_t bits; __builtin_memcpy(&bits, &q, 4); out[g * 8 + t] = bits & 0xff;\n"
                      "  __gpu_sync_threads();\n"
                      "  if (t == 1) __builtin_ia32_ldmxcsr((__builtin_ia32_stmxcsr() & ~0x6000u) | 0x2000u); }\n",
                      "regions"),
    "file_pragma": ("#pragma clang fp contract(off)\n__gpu_kernel void k(float *out, const float *a) {\n"
                    "  uint32_t t = __gpu_thread_id_x(); float x = a[t] * a[t + 8] + a[t + 16];\n"
                    "  __gpu_sync_threads();\n  out[t] = x - a[t] * a[t + 8]; }\n#pragma clang fp contract(on)\n",
                    "fibers: the source has a pragma"),
    "function_name": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                      "  out[t] = (int32_t)sizeof(__func__);\n  __gpu_sync_threads();\n  out[t] += __func__[0]; }\n",
                      "fibers: the kernel has a PredefinedExpr"),
    "mixed_declaration": ("__gpu_kernel void k(int32_t *out) { int32_t t = (int32_t)__gpu_thread_id_x();\n"
                          "  int32_t a = t, b __attribute__((aligned(64))) = 1;\n"
                          "  out[t] = (int32_t)__alignof__(b) + b;\n  __gpu_sync_threads();\n  out[t] += a * 1000; }\n",
                          "fibers: a declaration of a local kept across a barrier declares others"),
    "kernel_attribute": ("__attribute__((optnone, noinline)) __gpu_kernel void k(int32_t *out) {\n"
                         "  int32_t t = (int32_t)__gpu_thread_id_x(); int32_t x = t * 2;\n  __gpu_sync_threads();\n"
                         "  out[t] = x; }\n", "fibers: the kernel has attributes of its own"),
    # a fourth round: a barrier behind a function alias, a string-initialised array kept per item
    "function_alias": ("static void sync_impl(void) { __gpu_sync_threads(); }\n"
                       "void my_sync(void) __attribute__((alias(\"sync_impl\")));\n"
                       "__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                       "  static __gpu_local int32_t sh[64]; sh[t] = (int32_t)t;\n  __gpu_sync_threads();\n"
                       "  int32_t v = sh[(t + 1) % __gpu_num_threads_x()];\n  my_sync();\n  sh[t] = v * 2;\n"
                       "  __gpu_sync_threads();\n  out[t] = sh[(t + 1) % __gpu_num_threads_x()]; }\n",
                       "fibers: the source declares a function alias"),
    "string_array": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                     "  char s[] = \"abcd\"; s[t % 4] = 'z';\n  __gpu_sync_threads();\n"
                     "  out[t] = s[0] + s[1] * 3 + s[2] * 5 + s[3] * 7; }\n", "fibers: the local 's'"),
    # a fifth round: lvalues behind _Generic, __builtin_choose_expr, __extension__ and __real__
    "generic_lvalue": ("__gpu_kernel void k(int32_t *out, int32_t n) { uint32_t t = __gpu_thread_id_x();\n"
                       "  static __gpu_local int32_t sh[64]; _Generic(0, int: n) += 1; sh[t] = n;\n"
                       "  __gpu_sync_threads();\n  out[t] = sh[t]; }\n",
                       "fibers: the kernel has a GenericSelectionExpr"),
    "extension_lvalue": ("__gpu_kernel void k(int32_t *out, int32_t n) { uint32_t t = __gpu_thread_id_x();\n"
                         "  static __gpu_local int32_t sh[64]; (__extension__ n) += 1; sh[t] = n;\n"
                         "  __gpu_sync_threads();\n  out[t] = sh[t]; }\n", "fibers: the kernel writes one of its"),
    "real_part_pointer": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x();\n"
                          "  _Complex float z = (float)t * 7; float *p = &__real__ z;\n  __gpu_sync_threads();\n"
                          "  out[t] = (int32_t)*p; }\n", "regions"),
    "float_header": ("__gpu_kernel void k(int32_t *out) { uint32_t t = __gpu_thread_id_x(); int32_t c = 0;\n"
                     "  for (float f = 0; f < 4.0f; f += 1.0f) { c += 1;\n    __gpu_sync_threads(); }\n"
                     "  out[t] = c; }\n", "fibers: a barrier loop's header computes in floating point"),
}


def test_a_kernel_another_function_calls_keeps_one_set_of_statics() -> None:
    """Before: the region copy of `ka` had its own `count`, so `kb` (calling the original) and `ka`
    counted apart."""
    source = HEAD + ("__gpu_kernel void ka(int32_t *out) { static int32_t count; uint32_t t = __gpu_thread_id_x();\n"
                     "  if (t == 0) count++;\n  __gpu_sync_threads();\n  out[t] = count; }\n"
                     "__gpu_kernel void kb(int32_t *out) { ka(out); }\n")
    assert _portable_host.kernel_paths(source)["ka"].startswith("fibers: another function of the source calls")
    host = offloadrt.device("host")
    program = offloadrt.Program.from_source(host, source, [], cache=False)
    seen = []
    with host.queue() as queue:
        for name in ("ka", "kb", "ka"):
            out = offloadrt.zeros(4, np.int32, host)
            queue.launch(program.kernel(name), 1, 4, out)
            queue.sync()
            seen.append(int(out.get()[0]))
    assert seen == [1, 2, 3]


@pytest.mark.parametrize("case", list(REVIEWED))
def test_what_a_review_found_is_excluded_or_computed_right(case: str) -> None:
    body, expected_path = REVIEWED[case]
    source = HEAD + body
    path = _portable_host.kernel_paths(source)["k"]
    assert path.startswith(expected_path), path
    if path.startswith("fibers"):
        return  # both builds would be the fiber path: nothing more to compare (tests/test_portable_barriers.py)
    host = offloadrt.device("host")
    outputs = []
    for options in ([], FIBERS):
        program = offloadrt.Program.from_source(host, source, options, cache=False)
        out = offloadrt.zeros(64, np.float32 if case in ("pragma", "file_pragma") else np.int32, host)
        args: list[object] = [out]
        if case in ("pragma", "file_pragma"):
            args.append(offloadrt.asarray(np.random.default_rng(1).random(64, dtype=np.float32), host))
        elif case in ("asm_output", "parameter_addressof", "generic_lvalue", "extension_lvalue"):
            args.append(np.int32(100))
        elif case == "return_and_loop":
            args.append(np.int32(0))
        with host.queue() as queue:
            queue.launch(program.kernel("k"), 8 if case == "rounding_mode" else 1, 8, *args)
        outputs.append(out.get().tobytes())
    assert outputs[0] == outputs[1], case
