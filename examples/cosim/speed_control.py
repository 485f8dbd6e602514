"""PI speed control of the slider crank, co-simulated: the SSP system of cosim_build.py run in OSP
libcosim (libcosimpy) and in a plain C master (cosim_host.c, compiled here with gcc), both writing
a CSV; the figure compares them with the set-point.

    PYTHONPATH=. python examples/cosim/speed_control.py out/cosim

Writes into the output folder: SpeedControl.ssp, libcosim.csv, c_host.csv, speed_control.png (and
the compiled C host with the unpacked SSP it ran, cosim_host and ssp/), and prints the key numbers.
Both masters use the same algorithm (libcosim's fixed-step algorithm, Jacobi: every FMU steps with
the inputs set before the step, then the outputs are transferred) and the same communication step,
read from the .ssd; their results are identical.

The slider-crank FMU is the host-independent one: its worker runs the interpreter recorded at
build time (this one) unless MBSD_TWIN_FMU_PYTHON names another; the C host runs with only PATH
and that variable in its environment (no LD_PRELOAD, PYTHONHOME or PYTHONPATH).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosim_build import FMI2_HEADERS, HERE, NS, Settings, build_ssp, extract_ssp  # noqa: E402

Arrays = dict[str, NDArray[np.float64]]
SPEED, SETPOINT, TORQUE = "mechanism.crank.omega", "profile.speed", "controller.torque"


def write_csv(path: Path, data: Arrays) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(data))
        writer.writerows(zip(*(np.char.mod("%.17g", v) for v in data.values()), strict=True))
    return path


def read_csv(path: Path) -> Arrays:
    with path.open() as f:
        rows = list(csv.reader(f))
    values = np.array(rows[1:], dtype=float)
    return {name: values[:, k] for k, name in enumerate(rows[0])}


def _ssd(ssp: Path) -> ET.Element:
    with zipfile.ZipFile(ssp) as zf:
        return ET.fromstring(zf.read("SystemStructure.ssd"))


def experiment(ssp: Path) -> tuple[float, float, list[tuple[str, str]]]:
    """Stop time, communication step and the connections' (component, output) from the .ssd."""
    root = _ssd(ssp)
    stop = float(root.find("ssd:DefaultExperiment", NS).get("stopTime"))  # type: ignore[union-attr,arg-type]
    step = float(root.find(".//osp:FixedStepAlgorithm", NS).get("baseStepSize"))  # type: ignore[union-attr,arg-type]
    connections = root.iter(f"{{{NS['ssd']}}}Connection")
    sources = [(c.get("startElement", ""), c.get("startConnector", "")) for c in connections]
    return stop, step, sources


def run_libcosim(ssp: Path) -> Arrays:
    """The .ssp in libcosim (``CosimExecution.from_ssp_file``: components, parameter values,
    connections and the fixed-step algorithm from the .ssd), every connection's output recorded
    after each step by a last-value observer."""
    from libcosimpy.CosimExecution import CosimExecution
    from libcosimpy.CosimLogging import CosimLogLevel, log_output_level
    from libcosimpy.CosimObserver import CosimObserver

    stop, step, sources = experiment(ssp)
    log_output_level(CosimLogLevel.WARNING)
    ex = CosimExecution.from_ssp_file(str(ssp))
    observer = CosimObserver.create_last_value()
    ex.add_observer(observer=observer)
    refs = []
    for component, variable in sources:
        index = ex.slave_index_from_instance_name(component)
        vr = {v.name.decode(): v.reference for v in ex.slave_variables(index)}
        refs.append((index, vr[variable]))
    rows = []
    for k in range(round(stop / step)):
        if not ex.step(1):
            raise RuntimeError(f"libcosim step {k} failed")
        rows.append([ex.status().current_time / 1e9, *(observer.last_real_values(i, [r])[0] for i, r in refs)])
    data = np.array(rows)
    return {"time": data[:, 0], **{f"{c}.{v}": data[:, k + 1] for k, (c, v) in enumerate(sources)}}


def compile_host(dest: Path) -> Path:
    exe = dest / "cosim_host"
    cmd = ["gcc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", f"-I{FMI2_HEADERS}",
           "-o", str(exe), str(HERE / "cosim_host.c"), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the C host failed ({' '.join(cmd)}):\n{proc.stderr}")
    return exe


def run_c_host(ssp: Path, workdir: Path) -> Arrays:
    """The .ssp unpacked into ``workdir/ssp`` and run by the C host (``workdir/cosim_host``) in a
    clean environment (PATH, and MBSD_TWIN_FMU_PYTHON when set); it writes ``workdir/c_host.csv``."""
    unpacked = extract_ssp(ssp, workdir / "ssp")
    env = {"PATH": "/usr/bin:/bin"}
    if "MBSD_TWIN_FMU_PYTHON" in os.environ:
        env["MBSD_TWIN_FMU_PYTHON"] = os.environ["MBSD_TWIN_FMU_PYTHON"]
    out = workdir / "c_host.csv"
    proc = subprocess.run([str(compile_host(workdir)), str(unpacked), str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the C host failed (exit {proc.returncode}):\n{proc.stderr}")
    return read_csv(out)


def plot(runs: dict[str, Arrays], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_w, ax_u) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    first = next(iter(runs.values()))
    ax_w.plot(first["time"], first[SETPOINT], "k--", lw=1.2, label="set-point (profile.speed)")
    for (name, data), style in zip(runs.items(), ("-", ":"), strict=False):
        ax_w.plot(data["time"], data[SPEED], style, lw=1.2, label=f"crank speed, {name}")
        ax_u.plot(data["time"], data[TORQUE], style, lw=1.0, label=f"torque command, {name}")
    ax_w.set_ylabel("crank.omega [rad/s]")
    ax_u.set_ylabel("motor_torque [N·m]")
    ax_u.set_xlabel("time [s]")
    step_ms = 1e3 * float(first["time"][1] - first["time"][0])
    ax_w.set_title(f"PI speed control of the slider crank: SSP co-simulation, step {step_ms:g} ms, Jacobi")
    for ax in (ax_w, ax_u):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def largest_difference(a: Arrays, b: Arrays) -> float:
    """max |a - b| over every column (same rows required)."""
    if list(a) != list(b) or len(a["time"]) != len(b["time"]):
        raise ValueError("the runs have different columns or rows")
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def main(out: Path, settings: Settings | None = None) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    ssp = build_ssp(out / "SpeedControl.ssp", settings)
    t0 = time.perf_counter()
    runs = {"libcosim": run_libcosim(ssp)}
    t1 = time.perf_counter()
    runs["C host"] = run_c_host(ssp, out)
    t2 = time.perf_counter()
    write_csv(out / "libcosim.csv", runs["libcosim"])
    plot(runs, out / "speed_control.png")
    data = runs["libcosim"]
    late = data["time"] > data["time"][-1] - 0.5
    numbers = {"steps": float(len(data["time"])),
               "max_difference_libcosim_vs_c_host": largest_difference(runs["libcosim"], runs["C host"]),
               "final_speed": float(data[SPEED][-1]), "final_setpoint": float(data[SETPOINT][-1]),
               "mean_error_last_0.5s": float(np.mean(data[SETPOINT][late] - data[SPEED][late])),
               "max_abs_torque": float(np.max(np.abs(data[TORQUE]))),
               "libcosim_run_s": t1 - t0, "c_host_run_s": t2 - t1}  # wall clock, worker start included
    for key, value in numbers.items():
        print(f"{key:40s} {value: .6g}")
    return numbers


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {Path(sys.argv[0]).name} OUTPUT_FOLDER")
    main(Path(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)  # as the importers do: nothing of the FMU libraries runs at interpreter exit
