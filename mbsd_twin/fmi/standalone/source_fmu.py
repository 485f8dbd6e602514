"""The source FMU (``mbsd-twin fmu build --source``): the standalone FMU plus ``sources/``, from which
a target's own C compiler builds the same library: the C FMI layer of ``c/`` and ``native_fmu/``,
the mechanism's data (``model_data.c``) and the engine as C-wrapped assembly
(:mod:`.engine_source`). FMI 3.0 lists the files in ``sources/buildDescription.xml``, FMI 2.0 in
modelDescription.xml (``<SourceFiles>`` under ``<CoSimulation>``).

Every listed file compiles alone, as C99, with the FMI headers of the FMU's version on the include
path (the importer's, as the standard has it: they are not in the FMU); a shared library of them
needs libc and libm. The FMU keeps its ``binaries/`` (the standalone library built here).
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..native_build import SOURCE_DIR
from .engine_source import engine_c

C_DIR = Path(__file__).with_name("c")
# files compiled, in order (``fmu.c``: the version's FMI functions with this FMU's guid)
LAYER = ("sa_core.c", "sa_io.c", "sa_init.c", "sa_state.c", "sa_runtime.c")  # build.C_SOURCES
COMPILED = ("fmu.c", "{misc}", *LAYER, "model_data.c", "engine.c")
HEADERS = ("sa_core.h", "sa_engine.h")
LIBRARIES = ("m",)  # libm (and libc)
_FMU_C = """/* This FMU's FMI {version} functions: {layer} with the modelDescription's {what} (generated) */
#define MBSD_GUID "{guid}"
#include "{layer}"
"""


def compiled_files(version: str) -> list[str]:
    """The C files to compile (and link into one shared library, with libm), in order."""
    misc = "fmi2_misc.c" if version == "2.0" else "fmi3_misc.c"
    return [misc if f == "{misc}" else f for f in COMPILED]


def source_files(version: str, ident: str, guid: str, model_c: str) -> dict[str, bytes]:
    """``sources/`` of the FMU (FMI ``version`` "2.0" or "3.0") of model identifier ``ident`` with
    ``guid`` (its guid or instantiationToken) and model data ``model_c``: file name → content."""
    layer = "sa_fmi2.c" if version == "2.0" else "sa_fmi3.c"
    what = "guid" if version == "2.0" else "instantiationToken"
    texts = {"fmu.c": _FMU_C.format(version=version, layer=layer, what=what, guid=guid), "model_data.c": model_c,
             **engine_c()}
    out = {name: text.encode("utf-8") for name, text in texts.items()}
    for name in (*HEADERS, layer, *LAYER):
        out[name] = (C_DIR / name).read_bytes()
    misc = compiled_files(version)[1]
    for name in (misc, f"log_fmi{version[0]}.h"):  # native_fmu's, shared with the host-independent FMU
        out[name] = (SOURCE_DIR / name).read_bytes()
    if version == "3.0":
        out["buildDescription.xml"] = build_description(ident, compiled_files(version))
    return out


def build_description(ident: str, files: list[str]) -> bytes:
    """``sources/buildDescription.xml`` (FMI 3.0) of model ``ident`` listing ``files``."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<fmiBuildDescription fmiVersion="3.0">',
             f"  <BuildConfiguration modelIdentifier={quoteattr(ident)} description=\"a shared library of the C99 "
             'files below; engine.c holds the engine as x86-64 and AArch64 Linux assembly (GNU basic asm)">',
             '    <SourceFileSet language="C99">']
    lines += [f"      <SourceFile name={quoteattr(f)}/>" for f in files]
    lines += ["    </SourceFileSet>"]
    lines += [f'    <Library name="{lib}" description="the C math library"/>' for lib in LIBRARIES]
    lines += ["  </BuildConfiguration>", "</fmiBuildDescription>", ""]
    return "\n".join(lines).encode("utf-8")


def with_source_list(model_description: str, files: list[str]) -> str:
    """The FMI 2.0 modelDescription.xml text with ``<SourceFiles>`` listing ``files`` in its
    ``<CoSimulation>`` element."""
    listing = "<SourceFiles>" + "".join(f"<File name={quoteattr(f)}/>" for f in files) + "</SourceFiles>"
    tag = re.search(r"<CoSimulation\b[^>]*?(/?)>", model_description)
    if tag is None:
        raise ValueError("modelDescription.xml has no CoSimulation element")
    closed = tag.group(1)  # <CoSimulation .../>
    new = tag.group(0)[:-2].rstrip() + ">" + listing + "</CoSimulation>" if closed else tag.group(0) + listing
    return model_description[:tag.start()] + new + model_description[tag.end():]
