"""The worker process of a host-independent FMU: ``python -m mbsd_twin.fmi.worker RESOURCES_DIR``.

The FMU's shared library (``native_fmu/fmi2_shim.c`` or ``fmi3_shim.c``) starts one worker per instance and talks to
it over its stdin/stdout, a Unix socket pair; the frames are described in
``native_fmu/worker_frames.h``. The worker serves the model with :class:`WorkerSlave`, which is the
PythonFMU slave's :class:`~mbsd_twin.fmi.slave_logic.SlaveLogic` without PythonFMU: the same
variable table and value references (registration order), the same step, the same FMU state
format, so the results are bit-identical to the PythonFMU FMU's.

When the library passes a shared page (fd 4, announced in the HELLO request), the steps go through
it instead (:mod:`mbsd_twin.fmi.worker_shm`): no socket message, no frame to parse per step; the
other requests still come over the socket, announced in the page.

Start-up: the model is loaded while stderr is the library's start-up pipe (its text goes into
the message of a failed instantiation); then stdout and stderr move to the host's stderr (fd 3)
and the HELLO request is answered. The worker exits at end of file on stdin (the instance was
freed or the host process ended) or when a reply cannot be written.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .native import FmuInitError
from .slave_logic import FMI2_STATE_FORMAT, FMI3_STATE_FORMAT, Getter, Setter, SlaveLogic
from .worker_shm import SHM_SOCKET, SHM_STEP, SharedPage

OK, WARNING, DISCARD, ERROR, FATAL = range(5)
OP_HELLO, OP_SETUP, OP_EXIT_INIT, OP_RESET, OP_GET_REAL, OP_SET_REAL, OP_DO_STEP, OP_GET_STATE, OP_SET_STATE = \
    range(1, 10)
FLAG_WANT_OUTPUTS, FLAG_SHM = 1, 2
SHM_FD = 4
_HEAD = struct.Struct("=6I")
_REPLY = struct.Struct("=4I")
_LOG = struct.Struct("=2I")


@dataclass
class _Var:
    name: str
    getter: Getter
    setter: Setter
    value_reference: int = -1


class WorkerSlave(SlaveLogic):
    """The slave behaviour (SlaveLogic) with PythonFMU's registration and logging replaced by plain
    Python: value references in registration order, log messages kept for the reply. The FMU's
    metadata says which FMI version it serves: 3.0 as the pythonfmu3 slave (``time`` at value
    reference 0, a bad step size is an error, its state format), else 2.0 as the PythonFMU slave."""

    STATUS_ERROR = ERROR
    STATUS_DISCARD = DISCARD
    STATUS_BAD_STEP = DISCARD  # FMI 2.0, as the PythonFMU FMU
    STATE_FORMAT = FMI2_STATE_FORMAT

    def __init__(self, resources: str) -> None:
        self.vars: dict[int, Any] = {}
        self.logs: list[tuple[int, str]] = []
        meta = self._load(resources)
        if meta.get("fmi_version") == "3.0":  # as MechanismSlave3
            self.STATUS_BAD_STEP = ERROR
            self.STATE_FORMAT = FMI3_STATE_FORMAT
            self.register_variable(_Var("time", lambda: self._sim.time if self._initialized else self._start_time,
                                        None))
        self._register_all(lambda v, getter, setter: _Var(v.name, getter, setter))

    def log(self, msg: str, status: int = OK, category: str | None = None) -> None:
        self.logs.append((int(status), str(msg)))

    def register_variable(self, var: _Var, nested: bool = False) -> None:
        var.value_reference = len(self.vars)
        self.vars[var.value_reference] = var

    def layout(self) -> list[float]:
        """The HELLO reply: input and output value references, the step time limit (s), the
        parameters' value references and the values of the inputs and parameters, as the library
        expects them."""
        params = self.param_vrs()
        return [float(len(self._in_vrs)), *map(float, self._in_vrs), float(len(self._out_vrs)),
                *map(float, self._out_vrs), self._step_limit, float(len(params)), *map(float, params),
                *self.held_values()]

    def param_vrs(self) -> list[int]:
        """The parameters' value references, in registration order."""
        names = {v.name for v in self._table if v.causality == "parameter"}
        return [vr for vr, var in self.vars.items() if var.name in names]

    def held_values(self) -> list[float]:
        """The values of the inputs, then the parameters: the library serves reads of them from
        its copy (sent at the start, after a reset and after a state is restored)."""
        vrs = self._in_vrs + self.param_vrs()
        return self._get_values(vrs) if vrs else []


class Worker:
    """One request at a time from ``fin``, one reply to ``fout`` (raw file descriptors)."""

    def __init__(self, resources: str, fin: int, fout: int) -> None:
        self.resources = resources
        self.slave = WorkerSlave(resources)
        self.fin, self.fout = fin, fout
        self.page: SharedPage | None = None
        self.ops: dict[int, Callable[[int, list[int], list[float], bytes], tuple[int, Any, bytes]]] = {
            OP_HELLO: self._hello,
            OP_SETUP: self._setup, OP_EXIT_INIT: self._exit_init, OP_RESET: self._reset,
            OP_GET_REAL: lambda f, vr, r, b: (OK, self.slave._get_values(vr), b""),
            OP_SET_REAL: self._set_real, OP_DO_STEP: self._do_step,
            OP_GET_STATE: lambda *a: (OK, (), self.slave._get_fmu_state()),
            OP_SET_STATE: self._set_state}

    def _read(self, n: int) -> bytes:
        buf = os.read(self.fin, n) if n else b""
        if not buf and n:
            raise EOFError
        while len(buf) < n:
            chunk = os.read(self.fin, n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def serve(self) -> None:
        """Answer requests until end of file on the input (after a HELLO that maps the shared
        page, the requests are announced in the page)."""
        try:
            while self.page is None:
                self._serve_frame()
            while True:
                kind = self.page.wait()
                if kind == SHM_STEP:
                    self._serve_step(self.page)
                elif kind == SHM_SOCKET:
                    self._serve_frame()
                else:
                    return
        except EOFError:
            return

    def _serve_frame(self) -> None:
        """One request from the socket, its reply to the socket."""
        op, flags, n_set, n_vr, n_real, n_bytes = _HEAD.unpack(self._read(_HEAD.size))
        body = self._read(12 * n_set + 4 * n_vr + 8 * n_real + n_bytes)
        at, end = 12 * n_set, 12 * n_set + 4 * n_vr
        held = (array("I", body[:4 * n_set]).tolist(), array("d", body[4 * n_set:at]).tolist())
        vr = array("I", body[at:end]).tolist()
        reals = array("d", body[end:end + 8 * n_real]).tolist()
        self._reply(*self._handle(op, flags, held, vr, reals, body[end + 8 * n_real:]))

    def _serve_step(self, page: SharedPage) -> None:
        """A step announced in the shared page; the reply into the page unless it carries logs."""
        flags, set_vr, set_val, th = page.step_request()
        status, outputs, _ = self._handle(OP_DO_STEP, flags, (set_vr, set_val), [], th, b"")
        if self.slave.logs or not page.reply_step(status, outputs):
            self._reply(status, outputs, b"")
            page.reply_on_socket()

    def _handle(self, op: int, flags: int, held: tuple[list[int], list[float]], vr: list[int], reals: list[float],
                data: bytes) -> tuple[int, Any, bytes]:
        slave = self.slave
        try:
            if held[0]:  # the held inputs, sent with this request
                slave._set_values(*held)
            handler = self.ops.get(op)
            if handler is None:
                slave.log(f"unknown request {op} (library and worker of different versions?)", ERROR)
                return ERROR, (), b""
            return handler(flags, vr, reals, data)
        except Exception as exc:  # noqa: BLE001 - any failure is the host's fmi2Error, with the reason
            if not any(status >= ERROR for status, _ in slave.logs):
                slave.log(f"{type(exc).__name__}: {exc}", ERROR)
            return ERROR, (), b""

    def _reply(self, status: int, reals: Any, data: bytes) -> None:
        logs = b""
        if self.slave.logs:
            logs = b"".join(_LOG.pack(s, len(t)) + t for s, t in ((s, m.encode()) for s, m in self.slave.logs))
            self.slave.logs.clear()
        view = memoryview(_REPLY.pack(status, len(reals), len(data), len(logs)) + array("d", reals).tobytes()
                          + data + logs)
        while view:
            view = view[os.write(self.fout, view):]

    def _hello(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        if flags & FLAG_SHM and self.page is None:  # fd 4: the shared page
            self.page = SharedPage(SHM_FD, self.fin)
        return OK, self.slave.layout(), b""

    def _setup(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        self.slave._start_time = float(reals[0])
        return OK, (), b""

    def _exit_init(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        self.slave.exit_initialization_mode()
        return OK, (), b""

    def _reset(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        self.slave = WorkerSlave(self.resources)
        return OK, self.slave.held_values(), b""  # the start values, for the library's copy

    def _set_state(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        self.slave._set_fmu_state(data)  # the library's fmi2LastSuccessfulTime and its copy of the held values
        return OK, [self.slave._sim.time, *self.slave.held_values()], b""

    def _set_real(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        self.slave._set_values(vr, reals)
        return OK, (), b""

    def _do_step(self, flags: int, vr: list[int], reals: list[float], data: bytes) -> tuple[int, Any, bytes]:
        refused = self.slave._step(reals[0], reals[1])
        if refused is not None:
            return int(refused), (), b""
        return OK, (self.slave._outputs() if flags & FLAG_WANT_OUTPUTS else ()), b""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m mbsd_twin.fmi.worker RESOURCES_DIR (started by the FMU's library)", file=sys.stderr)
        return 2
    fin, fout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # print() while loading goes to the start-up pipe too
    try:
        worker = Worker(argv[0], fin, fout)
    except FmuInitError as exc:  # e.g. another mbsd-twin version: the cause in one line, no stack
        print(exc, file=sys.stderr)
        return 1
    try:  # ready: from now on the worker's own output goes to the host's stderr
        os.dup2(3, 2)
        os.dup2(3, 1)
        os.close(3)
    except OSError:
        pass  # started by hand, without fd 3
    with contextlib.suppress(BrokenPipeError):  # the library is gone: nothing to answer
        worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
