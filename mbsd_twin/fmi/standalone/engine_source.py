"""The engine as source code for the source FMU (``mbsd-twin fmu build --source``): the LLVM module
the standalone library's object file is emitted from (:func:`.engine_object.linked_ir`),
emitted by llvmlite as assembly, position-independent, for generic 64-bit x86 (``x86-64``: any
x86-64 CPU) and generic AArch64 (ARMv8-A), both ELF/Linux (the System V and AAPCS64 C ABIs), and
wrapped in C (:func:`engine_c`): each target's assembly as top-level ``__asm__`` statements in
``engine_<arch>.inc``, picked by ``engine.c`` with the preprocessor (``#error`` on any other
target). So the engine compiles with the C compiler alone (gcc; any compiler with GNU basic asm
at file scope), with no assembler step for the build tool to know about (fmpy's CMake project, for one,
compiles C only).

LLVM has no C backend: the assembly is the engine's only source form that is the same physics as
the binary (the same optimised module; no second engine written by hand).

The one target-specific piece of the module is ``llvm.x86.atomic.sub.cc.i64``, which X86's
optimisation turned numba's reference-count decrement into; for AArch64 it is rewritten back to a
plain ``atomicrmw sub`` with the comparison with zero (:func:`_portable_ir`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from pathlib import Path

import llvmlite.binding as llvm

from .engine_object import _cache_path, _digest, compile_lock, linked_ir

# arch → (LLVM triple, LLVM CPU, the C compiler's macro for it, assembly comment prefix)
TARGETS = {"x86_64": ("x86_64-unknown-linux-gnu", "x86-64", "__x86_64__", "#"),
           "aarch64": ("aarch64-unknown-linux-gnu", "generic", "__aarch64__", "//")}
_ATOMIC = "llvm.x86.atomic.sub.cc.i64"
_ATOMIC_DEF = """
define internal i8 @mbsd_atomic_sub_cc_i64(ptr %p, i64 %v, i32 %cc) alwaysinline {
  %old = atomicrmw sub ptr %p, i64 %v seq_cst, align 8
  %new = sub i64 %old, %v
  %zero = icmp eq i64 %new, 0
  %r = zext i1 %zero to i8
  ret i8 %r
}
"""
CHUNK = 4000  # characters per __asm__ statement (C99's translation limit for a string literal: 4095)


def _portable_ir(ir: str) -> str:
    """``ir`` without X86 intrinsics: ``llvm.x86.atomic.sub.cc.i64(p, v, 4)`` (atomic subtract,
    condition code 4 = E: whether the result is zero) as a plain function."""
    calls = re.findall(r"@llvm\.x86\.atomic\.sub\.cc\.i64\([^)]*\bi32 (\d+)\)", ir)
    if any(cc != "4" for cc in calls):
        raise RuntimeError(f"unexpected condition codes of {_ATOMIC}: {sorted(set(calls))}")
    ir = re.sub(r"^declare [^\n]*@" + re.escape(_ATOMIC) + r"\([^\n]*\n", "", ir, flags=re.M)
    ir = ir.replace("@" + _ATOMIC, "@mbsd_atomic_sub_cc_i64") + _ATOMIC_DEF
    left = sorted(set(re.findall(r"@llvm\.x86\.[\w.]+", ir)))
    if left:
        raise RuntimeError(f"X86 intrinsics left in the engine's module: {left}")
    return ir


def emit_assembly(ir: str, arch: str) -> str:
    """The module ``ir`` (x86-64 Linux IR, numba's) as position-independent assembly for ``arch``."""
    triple, cpu, _, _ = TARGETS[arch]
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features="", opt=3, reloc="pic",
                                                               codemodel="default")
    mod = llvm.parse_assembly(ir if arch == "x86_64" else _portable_ir(ir))
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return str(tm.emit_assembly(mod))


def _source_cache(arch: str) -> Path:
    h = hashlib.sha256(f"{_digest()} {arch}".encode())
    h.update(Path(__file__).read_bytes())
    return _cache_path().with_name(f"mbsd_twin_source_{arch}_{h.hexdigest()[:24]}.s")


@functools.cache
def engine_assembly() -> dict[str, str]:
    """arch → the engine's assembly (:data:`TARGETS`); compiled once (numba and LLVM: about a
    minute and a half on a 2-core machine), then read from beside numba's cache."""
    paths = {arch: _source_cache(arch) for arch in TARGETS}
    if all(p.exists() for p in paths.values()):
        return {arch: p.read_text(encoding="utf-8") for arch, p in paths.items()}
    with compile_lock(paths["x86_64"].parent):
        return _compiled_assembly(paths)


def _compiled_assembly(paths: dict[str, Path]) -> dict[str, str]:
    if all(p.exists() for p in paths.values()):  # compiled by another process while this one waited
        return {arch: p.read_text(encoding="utf-8") for arch, p in paths.items()}
    ir = linked_ir()
    out = {arch: emit_assembly(ir, arch) for arch in TARGETS}
    with contextlib.suppress(OSError):  # a read-only install: compile in every process
        paths["x86_64"].parent.mkdir(parents=True, exist_ok=True)
        for old in paths["x86_64"].parent.glob("mbsd_twin_source_*.s"):
            old.unlink()
        for arch, p in paths.items():
            tmp = p.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(out[arch], encoding="utf-8")
            tmp.replace(p)
    return out


def _c_string(line: str) -> str:
    return '"' + line.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '\\n"'


def asm_as_c(asm: str, comment: str) -> str:
    """``asm`` as file-scope ``__asm__`` statements of at most :data:`CHUNK` characters each (its
    lines in order, comment-only lines and ``.file`` dropped), between ``.pushsection .text`` and
    ``.popsection``: the C compiler's own code after them stays in the section it expects."""
    chunks: list[list[str]] = [[_c_string("\t.pushsection .text")]]
    size = len(chunks[0][0])
    for line in [*asm.splitlines(), "\t.popsection"]:
        if not line.strip() or line.lstrip().startswith((comment, ".file")):
            continue
        text = _c_string(line)
        if size + len(text) > CHUNK and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(text)
        size += len(text)
    return "".join("__asm__(\n" + "\n".join(c) + ");\n" for c in chunks)


ENGINE_C = """/* The engine of mbsd-twin (its compiled stepper: numba kernels optimised by LLVM), as assembly
   emitted by LLVM from the module the binary FMU's object file is emitted from, for the targets
   below (generic CPUs, Linux, ELF); any other target is an error: the engine exists for these only
   (mbsd-twin's fmu/README.md, "Source FMU"). Generated by mbsd_twin.fmi.standalone.engine_source:
   do not edit. */
#include "sa_engine.h"

#if defined(__linux__) && defined(__x86_64__) && defined(__LP64__)
#include "engine_x86_64.inc"
#elif defined(__linux__) && defined(__aarch64__) && defined(__LP64__)
#include "engine_aarch64.inc"
#else
#error "this FMU's engine is provided as x86-64 and AArch64 Linux assembly only"
#endif

/* the assembly is for generic CPUs of its architecture: no feature to check */
const char *mbsd_sa_cpu_missing(void) { return 0; }
"""


def engine_c() -> dict[str, str]:
    """file name → text of the engine's C sources: ``engine.c`` and one ``engine_<arch>.inc`` per
    target (included by ``engine.c``, not compiled on their own)."""
    files = {"engine.c": ENGINE_C}
    for arch, asm in engine_assembly().items():
        head = f"/* engine.c's assembly for {TARGETS[arch][0]}, generic CPU (generated: do not edit) */\n"
        files[f"engine_{arch}.inc"] = head + asm_as_c(asm, TARGETS[arch][3])
    return files
