"""The source FMU (``mbsd-twin fmu build --source``): the standalone FMU plus ``sources/`` (the C FMI
layer, the model data and the engine as x86-64 / AArch64 Linux assembly wrapped in C). Its sources
are compiled here as a target's toolchain would (gcc, every file as C99 with -Wall -Werror; fmpy's
CMake project) and the library they give must run the slider crank exactly as the FMU's own binary
(the engine object emitted from the same LLVM module) and the native Simulator: bit for bit. The
AArch64 sources are compiled by aarch64-linux-gnu-gcc when installed, and run under qemu-aarch64
when that is installed too (the same bits again)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

fmpy = pytest.importorskip("fmpy")
pytest.importorskip("pythonfmu")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the source FMU", allow_module_level=True)

from fmpy.model_description import read_build_description  # noqa: E402
from fmu_harness import TESTS, compile_c_host, run_once, unpack  # noqa: E402

from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402

STOP, STEP, TORQUE = 2.0, 1e-3, 2.0
ALLOWED = {"libc.so.6", "libm.so.6"}
CLI = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]
PLATFORM = {"2": "linux64", "3": "x86_64-linux"}
CFLAGS = ["-std=c99", "-Wall", "-Werror", "-fPIC", "-O2"]
AARCH64_CC, QEMU, AARCH64_SYSROOT = "aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled slider crank's source FMUs, FMI 2.0 and 3.0, built by the CLI (``--source``
    alone: it implies ``--standalone``) and checked by fmpy validate and fmutool."""
    tmp = tmp_path_factory.mktemp("source")

    def build(version: str, dest: Path) -> Path:
        proc = subprocess.run([*CLI, "fmu", "build", "--source", "--fmi-version", version, "--check", "-o",
                               str(dest)], capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "(standalone, with sources/)" in proc.stdout
        assert "checks: fmpy validate and fmutool -check passed" in proc.stdout
        return dest

    # built once per run, whichever xdist workers run this file's tests
    return {v: run_once(tmp_path_factory, f"source{v}", lambda dest, v=v: build(v, dest),
                        tmp / f"fmi{v}" / "SliderCrank.fmu") for v in ("2", "3")}


def listed_sources(fmu: Path) -> list[str]:
    """The files the FMU says to compile (FMI 2.0: modelDescription.xml; 3.0: buildDescription.xml,
    validated against fmpy's FMI 3.0 schema)."""
    md = fmpy.read_model_description(str(fmu), validate=True)
    configs = md.buildConfigurations
    if md.fmiVersion == "3.0":  # read from buildDescription.xml, validated against the schema
        read = read_build_description(str(fmu), validate=True)
        assert [c.sourceFileSets[0].sourceFiles for c in read] == [c.sourceFileSets[0].sourceFiles for c in configs]
    assert len(configs) == 1 and configs[0].modelIdentifier == "SliderCrank"
    return list(configs[0].sourceFileSets[0].sourceFiles)


def compile_sources(root: Path, files: list[str], out: Path, cc: str = "gcc") -> Path:
    """``files`` of ``root/sources`` compiled one by one with ``cc`` (C99, -Wall -Werror) against the
    FMI headers, linked into the shared library ``out`` with libm and nothing else."""
    objects = []
    for name in files:
        obj = out.parent / (Path(name).stem + ".o")
        proc = subprocess.run([cc, *CFLAGS, f"-I{SOURCE_DIR}", "-c", str(root / "sources" / name), "-o", str(obj)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        objects.append(str(obj))
    proc = subprocess.run([cc, "-shared", "-o", str(out), *objects, "-lm", "-Wl,--no-undefined"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def needed(lib: Path, readelf: str = "readelf") -> set[str]:
    dynamic = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}


def cross_host(tmp: Path, version: str) -> Path:
    """``tests/fmi<version>_host.c`` compiled for AArch64 Linux."""
    exe = tmp / f"fmi{version}_host_aarch64"
    subprocess.run([AARCH64_CC, "-O1", "-Wall", "-Werror", f"-I{SOURCE_DIR}", "-o", str(exe),
                    str(TESTS / f"fmi{version}_host.c"), "-ldl"], check=True)
    return exe


def host_rows(tmp_path: Path, version: str, root: Path, lib: Path,
              aarch64: bool = False) -> tuple[np.ndarray, list[str]]:
    """Time and every output over 2 s at 2 N·m, from the C host (empty environment) on ``lib``
    (``aarch64``: the host and ``lib`` for AArch64, run by qemu-aarch64 with the cross libc)."""
    md = ET.parse(root / "modelDescription.xml").getroot()
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {v.get("name", ""): v.get("valueReference", "") for v in variables}
    outputs = [v.get("name", "") for v in variables if v.get("causality") == "output"]
    host = cross_host(tmp_path, version) if aarch64 else compile_c_host(tmp_path, f"fmi{version}_host.c", SOURCE_DIR)
    token = md.get("guid" if version == "2" else "instantiationToken", "")
    runner = [shutil.which(QEMU) or QEMU, "-L", AARCH64_SYSROOT] if aarch64 else []
    cmd = ["env", "-i", *runner, str(host), str(lib), "", token, str(round(STOP / STEP)), repr(STEP),
           vr["motor_torque"], repr(10 * STOP), *(vr[n] for n in outputs)]  # the torque stays 2 N·m
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "libpython mapped: 0"
    return np.array([[float(x) for x in line.split()] for line in lines[:-1]]), outputs


@pytest.mark.parametrize("version", ["2", "3"])
def test_sources_compiled_by_gcc_give_the_binary_numbers_bit_for_bit(fmus: dict[str, Path], tmp_path: Path,
                                                                     version: str) -> None:
    files = listed_sources(fmus[version])
    assert "engine.c" in files and "model_data.c" in files and "fmu.c" in files
    root = unpack(fmus[version], tmp_path / "fmu")
    binary = root / "binaries" / PLATFORM[version] / "SliderCrank.so"
    (tmp_path / "built").mkdir()
    built = compile_sources(root, files, tmp_path / "built" / "SliderCrank.so")
    assert needed(built) <= ALLOWED and "libm.so.6" in needed(built)
    rows, outputs = host_rows(tmp_path, version, root, built)
    ref_rows, _ = host_rows(tmp_path, version, root, binary)
    assert rows.shape == (round(STOP / STEP) + 1, len(outputs) + 1)
    np.testing.assert_array_equal(rows, ref_rows)  # θ(2 s) and every output, every step: the same bits
    ref = run_native(load_mechanism(bundled_slider_crank()), rows[:, 0], {"motor_torque": lambda t: TORQUE},
                     ["crank.theta"])
    theta = rows[-1, outputs.index("crank.theta") + 1]
    assert theta == ref["crank.theta"][-1] and 50.0 < theta < 60.0  # θ(2 s) ≈ 53.58 rad


def _fmpy_run(path: Path) -> np.ndarray:
    md = fmpy.read_model_description(str(path))
    outputs = [v.name for v in md.modelVariables if v.causality == "output"]
    return fmpy.simulate_fmu(str(path), stop_time=STOP, output_interval=STEP, start_values={"motor_torque": TORQUE},
                             output=outputs)


@pytest.mark.skipif(not shutil.which("cmake"), reason="fmpy builds source FMUs with CMake")
@pytest.mark.parametrize("version", ["2", "3"])
def test_fmpy_builds_the_library_from_sources_and_runs_it(fmus: dict[str, Path], tmp_path: Path,
                                                         version: str) -> None:
    from fmpy.build import build_platform_binary

    root = unpack(fmus[version], tmp_path / "fmu")
    shutil.rmtree(root / "binaries")
    (tmp_path / "cmake-build").mkdir()
    build_platform_binary(root, build_dir=tmp_path / "cmake-build")
    lib = root / "binaries" / PLATFORM[version] / "SliderCrank.so"
    assert lib.exists() and needed(lib) <= ALLOWED
    built = _fmpy_run(root)
    binary = _fmpy_run(fmus[version])
    assert built["time"][-1] == STOP
    for name in built.dtype.names:
        np.testing.assert_array_equal(built[name], binary[name], err_msg=name)


def test_fmi2_lists_its_sources_under_cosimulation_and_fmi3_has_a_build_description(fmus: dict[str, Path]) -> None:
    with zipfile.ZipFile(fmus["2"]) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
        names = zf.namelist()
        listed = [f.get("name") for f in md.findall("CoSimulation/SourceFiles/File")]
        assert listed and all(f"sources/{f}" in names for f in listed)
        assert "sources/buildDescription.xml" not in names
    with zipfile.ZipFile(fmus["3"]) as zf:
        names = zf.namelist()
        assert b"SourceFiles" not in zf.read("modelDescription.xml")
        assert "sources/buildDescription.xml" in names
    for fmu in fmus.values():  # the importer provides the FMI headers; the binary stays
        with zipfile.ZipFile(fmu) as zf:
            names = zf.namelist()
        assert not [n for n in names if n.startswith("sources/fmi") and n.endswith(".h")], names
        assert any(n.startswith("binaries/") and n.endswith("SliderCrank.so") for n in names)
        assert {"sources/engine_x86_64.inc", "sources/engine_aarch64.inc"} <= set(names)


@pytest.mark.skipif(not shutil.which(AARCH64_CC), reason="no AArch64 cross compiler (apt-get install "
                    "gcc-aarch64-linux-gnu)")
@pytest.mark.parametrize("version", ["2", "3"])
def test_aarch64_library_from_sources_gives_the_x86_64_numbers(fmus: dict[str, Path], tmp_path: Path,
                                                               version: str) -> None:
    root = unpack(fmus[version], tmp_path / "fmu")
    (tmp_path / "arm").mkdir()
    lib = compile_sources(root, listed_sources(fmus[version]), tmp_path / "arm" / "SliderCrank.so", cc=AARCH64_CC)
    header = subprocess.run(["readelf", "-h", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "AArch64" in header
    assert needed(lib) <= ALLOWED
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout
    assert f"fmi{version}DoStep" in symbols
    if not shutil.which(QEMU) or not Path(AARCH64_SYSROOT).is_dir():
        pytest.skip("built and linked; running it needs qemu-aarch64 (apt-get install qemu-user)")
    rows, _ = host_rows(tmp_path, version, root, lib, aarch64=True)  # emulated: about 0.5 ms per step
    ref_rows, _ = host_rows(tmp_path, version, root, root / "binaries" / PLATFORM[version] / "SliderCrank.so")
    np.testing.assert_array_equal(rows, ref_rows)  # the same bits as x86-64


def test_aarch64_module_gets_the_atomic_decrement_without_x86_intrinsics() -> None:
    from mbsd_twin.fmi.standalone.engine_source import _portable_ir

    ir = ("declare i8 @llvm.x86.atomic.sub.cc.i64(ptr, i64, i32 immarg) #5\n"
          "define i8 @f(ptr %p) {\n  %r = tail call i8 @llvm.x86.atomic.sub.cc.i64(ptr %p, i64 1, i32 4)\n"
          "  ret i8 %r\n}\n")
    out = _portable_ir(ir)
    assert "llvm.x86" not in out and "atomicrmw sub ptr %p, i64 %v seq_cst" in out
    with pytest.raises(RuntimeError, match="condition codes"):
        _portable_ir(ir.replace("i32 4)", "i32 5)"))
    with pytest.raises(RuntimeError, match="llvm.x86.sse2.sqrt.sd"):
        _portable_ir(ir + "declare <2 x double> @llvm.x86.sse2.sqrt.sd(<2 x double>)\n")


def test_fmi2_source_list_goes_into_an_open_or_self_closing_cosimulation() -> None:
    from mbsd_twin.fmi.standalone.source_fmu import with_source_list

    for xml in ('<fmiModelDescription><CoSimulation modelIdentifier="M" canHandleVariableCommunicationStepSize="true"'
                '/><ModelVariables/></fmiModelDescription>',
                '<fmiModelDescription><CoSimulation modelIdentifier="M"></CoSimulation></fmiModelDescription>'):
        md = ET.fromstring(with_source_list(xml, ["a.c", "b&c.c"]))
        assert [f.get("name") for f in md.findall("CoSimulation/SourceFiles/File")] == ["a.c", "b&c.c"]
        assert md.find("CoSimulation").get("modelIdentifier") == "M"  # type: ignore[union-attr]
