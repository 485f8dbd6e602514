"""The engine as a native object file: the compiled stepper's numba kernels (``nb_stepper``, the
right-hand side and projection of ``nb_entries`` and ``nb_assembly.constrained_state``, the initial
state's assembly for changed geometry, start values and start time, with
``nb_assembly.reference_pose``) emitted by LLVM with position-independent code, for a shared
library without Python (the standalone FMU).

Each entry point is a small ``njit`` function over C pointers and lengths (:data:`ENTRIES`) that
calls the kernel the Simulator calls, with the same argument types, so that numba links the very
same compiled code (from its disk cache when present). Of each entry's library only its native
function is kept (numba's calling convention: ``int32 f(ret*, excinfo**, args...)``, 0 when it
returned normally); its Python and ``cfunc`` wrappers, which call the Python C API, are dropped
before the object is emitted, with everything only they used. ``c/sa_runtime.c`` provides what the
code still references (numba's memory allocation, ``numba_nextafter``); libm the rest.

The object is the same for every mechanism (the model is data: ``nb_flat``), so one build per
process is enough (:func:`engine_object` caches it).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numba
from numba import carray, njit, types

from ...compiled import nb_stepper as ns
from ...compiled.nb_cache import MODULES
from ...compiled.nb_entries import _project_entry, _rhs_entry
from . import nb_assembly as na

CPU_ENV = "MBSD_TWIN_STANDALONE_CPU"
DEFAULT_CPU = "host"
_F = types.CPointer(types.float64)
_I = types.CPointer(types.int64)
_N = types.int64
_D = types.float64


def _bind(cb, ncb, u, nu, ib, nib, fb, nfb, wb, nwb):  # noqa: ANN001, ANN202
    return ns.bind(carray(cb, ncb), carray(u, nu), carray(ib, nib), carray(fb, nfb), carray(wb, nwb))


def _start(S, nS, t0, y0, ny, u, nu, ib, nib, fb, nfb, wb, nwb, ob, nob, cb, ncb):  # noqa: ANN001, ANN202, PLR0913
    ok = ns.start(carray(S, nS), t0, carray(y0, ny), carray(u, nu), carray(ib, nib), carray(fb, nfb),
                  carray(wb, nwb), carray(ob, nob), carray(cb, ncb), False)  # an FMU starts fresh only
    return 1 if ok else 0


def _restart(S, nS, u, nu, ib, nib, fb, nfb, wb, nwb, cb, ncb):  # noqa: ANN001, ANN202, PLR0913
    ok = ns.restart(carray(S, nS), carray(u, nu), carray(ib, nib), carray(fb, nfb), carray(wb, nwb), carray(cb, ncb))
    return 1 if ok else 0


def _advance(S, nS, t_end, clip, wb, nwb, ob, nob, cb, ncb):  # noqa: ANN001, ANN202, PLR0913
    return ns.advance(carray(S, nS), t_end, clip != 0, carray(wb, nwb), carray(ob, nob), carray(cb, ncb))


def _outputs(S, nS, u, nu, ib, nib, fb, nfb, wb, nwb, cb, ncb, ri, nri, er, ner, e0, out, nout):  # noqa: ANN001, ANN202, PLR0913
    vec = ns.outputs(carray(S, nS), carray(u, nu), carray(ib, nib), carray(fb, nfb), carray(wb, nwb),
                     carray(cb, ncb), carray(ri, (nri, 2)), carray(er, ner), e0)
    o = carray(out, nout)
    for i in range(min(nout, vec.shape[0])):
        o[i] = vec[i]
    return vec.shape[0]


def _constrained(t, q, nq, v, nv, fq, nfq, fv, nfv, tol, ib, nib, fb, nfb):  # noqa: ANN001, ANN202, PLR0913
    return na.constrained_state(t, carray(q, nq), carray(v, nv), carray(fq, nfq), carray(fv, nfv), tol,
                                carray(ib, nib), carray(fb, nfb))


def _reference(q, nq, ib, nib, fb, nfb, sd, nsd, rs, nrs):  # noqa: ANN001, ANN202, PLR0913
    return na.reference_pose(carray(q, nq), carray(ib, nib), carray(fb, nfb), carray(sd, nsd), carray(rs, nrs))


# C name → (Python function, numba signature); the C prototypes are in c/sa_engine.h
ENTRIES: dict[str, tuple[Callable[..., Any], Any]] = {
    "mbsd_sa_rhs": (_rhs_entry, types.int64(_D, _F, _F, _N, types.voidptr)),
    "mbsd_sa_project": (_project_entry, types.int64(_D, _F, _N, _D, types.voidptr)),
    "mbsd_sa_bind": (_bind, types.int64(_I, _N, _F, _N, _I, _N, _F, _N, _F, _N)),
    "mbsd_sa_start": (_start, types.int64(_F, _N, _D, _F, _N, _F, _N, _I, _N, _F, _N, _F, _N, _F, _N, _I, _N)),
    "mbsd_sa_restart": (_restart, types.int64(_F, _N, _F, _N, _I, _N, _F, _N, _F, _N, _I, _N)),
    "mbsd_sa_advance": (_advance, types.int64(_F, _N, _D, _N, _F, _N, _F, _N, _I, _N)),
    "mbsd_sa_outputs": (_outputs, types.int64(_F, _N, _F, _N, _I, _N, _F, _N, _F, _N, _I, _N, _I, _N, _I, _N, _D,
                                              _F, _N)),
    "mbsd_sa_constrained": (_constrained, types.float64(_D, _F, _N, _F, _N, _I, _N, _I, _N, _D, _I, _N, _F, _N)),
    "mbsd_sa_reference": (_reference, types.int64(_F, _N, _I, _N, _F, _N, _I, _N, _I, _N)),
}


def _native_ir(fn: Callable[..., Any], sig: Any) -> tuple[str, str]:
    """(LLVM IR of the compiled ``fn`` with everything it calls, the name of its native function)."""
    dispatcher = njit(sig)(fn)
    cres = dispatcher.overloads[sig.args]
    return cres.library.get_llvm_str(), cres.fndesc.mangled_name


_WRAPPER = re.compile(r'^define [^\n]*@"?(?:_ZN7cpython|cfunc\.)[^\n]*\{\n.*?^\}\n', re.M | re.S)


def _strip_wrappers(ir: str) -> str:
    """The module without numba's Python and cfunc wrappers (the only users of the Python C API)."""
    return _WRAPPER.sub("", ir)


def cpu() -> tuple[str, str]:
    """(CPU name, features) the object is built for: ``$MBSD_TWIN_STANDALONE_CPU`` (an LLVM CPU
    name such as ``x86-64``, ``x86-64-v3``; ``host``: this CPU with all its features, as numba's JIT)."""
    name = os.environ.get(CPU_ENV, DEFAULT_CPU)
    if name == "host":
        return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    return name, ""


# CPU features the engine may use that gcc's __builtin_cpu_supports can check (LLVM spells them alike)
CHECKED_FEATURES = ("popcnt", "sse3", "ssse3", "sse4.1", "sse4.2", "avx", "avx2", "fma", "bmi", "bmi2", "avx512f",
                    "avx512vl", "avx512bw", "avx512dq", "avx512cd")


def cpu_check_source() -> str:
    """``engine_cpu.c``: ``mbsd_sa_cpu_missing``, which names the first feature of the object's
    target (:func:`cpu`) this CPU lacks. A named CPU (``x86-64``…) has no feature list: no check."""
    features = {f[1:] for f in cpu()[1].split(",") if f.startswith("+")}
    checks = "".join(f'    if (!__builtin_cpu_supports("{f}")) return "{f}";\n' for f in CHECKED_FEATURES
                     if f in features)
    return ('#include "sa_engine.h"\n\nconst char *mbsd_sa_cpu_missing(void) {\n    __builtin_cpu_init();\n'
            f"{checks}    return 0;\n}}\n")


def target_machine() -> Any:
    """The target machine of :func:`cpu` with position-independent code for a shared library."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    name, features = cpu()
    return target.create_target_machine(cpu=name, features=features, opt=3, reloc="pic", codemodel="default")


def _link(modules: list[Any], keep: set[str]) -> Any:
    """One module of ``modules``, every function but ``keep`` internal, unused code removed."""
    main = modules[0]
    for m in modules[1:]:
        main.link_in(m)
    for fn in main.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = llvm.Linkage.internal
        elif not fn.is_declaration:
            fn.visibility = llvm.Visibility.hidden  # the library exports the FMI functions only
    for g in main.global_variables:
        if not g.is_declaration:
            g.linkage = llvm.Linkage.internal
    tm = target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.add_strip_dead_prototype_pass()
    pm.run(main, pb)
    _optimize(main, tm)
    main.verify()
    return main


def _optimize(module: Any, tm: Any) -> None:
    """LLVM's O3 pipeline over the linked module (as numba's own final pass, with SLP and loop
    vectorisation): the kernels are internal now, so calls across numba's libraries inline. No
    fast-math flag is added, so every floating-point operation keeps its IEEE result (bit for bit
    the Simulator's: the tests compare)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


def _digest() -> str:
    """What the object depends on: the kernels' sources, this file, numba's and llvmlite's
    versions and the CPU."""
    h = hashlib.sha256()
    folder = Path(ns.__file__).parent
    for name in (*MODULES, "nb_entries.py"):
        h.update((folder / name).read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(Path(na.__file__).read_bytes())
    h.update(f"{numba.__version__} {llvmlite.__version__} {cpu()}".encode())
    return h.hexdigest()[:24]


def _cache_path() -> Path:
    """Where the object is kept between processes: beside numba's cache of the kernels."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    folder = Path(base) if base else Path(ns.__file__).parent / "__pycache__"
    return folder / f"mbsd_twin_standalone_{_digest()}.o"


@contextlib.contextmanager
def compile_lock(folder: Path) -> Iterator[None]:
    """One process at a time compiles what is cached in ``folder`` (the engine's object and
    assembly): the others wait for it, then read its result, instead of compiling the same minute
    in parallel (the test workers of one run, FMU builds started together). Without a writable
    folder or ``fcntl`` (not POSIX): no lock, each process compiles."""
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        fh = open(folder / "mbsd_twin_standalone.lock", "a")  # noqa: SIM115 - closed below
    except (ImportError, OSError):
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def warm() -> float:
    """Compile the engine's object into its cache now (``make`` runs it after installing, so that the
    first standalone FMU build takes a second, not a minute); returns the wall time [s]."""
    t0 = time.perf_counter()
    engine_object()
    return time.perf_counter() - t0


@functools.cache
def engine_object() -> bytes:
    """The engine's object file (ELF, this CPU): the C functions of :data:`ENTRIES`; compiled once
    (about a minute on a 2-core machine; one process at a time, :func:`compile_lock`), then read
    from beside numba's cache."""
    path = _cache_path()
    if path.exists():
        return path.read_bytes()
    with compile_lock(path.parent):
        return _compiled_object(path)


def _compiled_object(path: Path) -> bytes:
    if path.exists():  # compiled by another process while this one waited
        return path.read_bytes()
    obj = _compile()
    with contextlib.suppress(OSError):  # a read-only install: compile in every process
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("mbsd_twin_standalone_*.o"):  # built from other sources: stale
            old.unlink()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(obj)
        tmp.replace(path)
    return obj


@functools.cache
def linked_ir() -> str:
    """The engine's LLVM module (text): the entries of :data:`ENTRIES` and everything they call, the
    rest internal. The object file is emitted from it, and the source FMU's assembly
    (``engine_source``): compiled once per process."""
    modules = []
    for c_name, (fn, sig) in ENTRIES.items():
        ir, native = _native_ir(fn, sig)
        ir = _strip_wrappers(ir).replace(native, c_name)
        modules.append(llvm.parse_assembly(ir))
    return str(_link(modules, set(ENTRIES)))


def _compile() -> bytes:
    return bytes(target_machine().emit_object(llvm.parse_assembly(linked_ir())))
