"""The worker's end of the shared page (``native_fmu/worker_shm.c``, layout in ``worker_frames.h``):
DO_STEP requests and replies without socket messages.

The library maps a memfd, passes it as fd 4 and says so in the HELLO request. Then every request is
announced by a bump of the futex word ``req``: a step (inputs, t, h in the page; the reply — status
and outputs — goes back into the page) or a frame waiting on the socket. The worker spins on ``req``
for ``spin_us`` microseconds (set by the library; a host's work between two steps is about that
long), then sleeps on it (futex, in slices: between slices it checks the socket for end of file, so
it ends with its host); after a spin in vain it does not spin for the next SPIN_BACKOFF requests,
twice as many after each further one (a busy machine: the spinning would hold the core the host
needs), SPIN_BACKOFF again after a spin that paid.
Each reply bumps ``rep`` and wakes the library's futex: the futex call is
also the memory barrier between that store and the library's next load (x86-64: a plain store may
pass a later load). Linux x86-64 only, like the library.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import struct
import time
from typing import Any, cast

SHM_SIZE, SHM_MAX = 65536, 2048
SHM_VR = 64
SHM_VAL = SHM_VR + 4 * SHM_MAX
SHM_OUT = SHM_VAL + 8 * SHM_MAX
SHM_STEP, SHM_SOCKET = 1, 2
# ShmHead: uint32 words, then the doubles t and h at byte 48
REQ, REP, WORKER_WAITS, HOST_WAITS, KIND, FLAGS, N_SET, STATUS, ON_SOCKET, N_OUT, SPIN_US = range(11)
T_H = 6  # t and h: doubles 6 and 7
_FUTEX_WAIT, _FUTEX_WAKE, _SYS_FUTEX = 0, 1, 202
_SLICE = 0.2  # s asleep before checking the socket again
SPIN_BACKOFF, SPIN_BACKOFF_MAX = 16, 4096  # waits without spinning after spins in vain (as the library)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class SharedPage:
    """The mapped page: ``wait()`` for the next request, ``reply_step()`` / ``reply_on_socket()``."""

    def __init__(self, fd: int, sock: int) -> None:
        self.map = mmap.mmap(fd, SHM_SIZE)
        os.close(fd)
        self.sock = sock
        self.u32 = memoryview(self.map).cast("I")
        self.f64 = memoryview(self.map).cast("d")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = self._libc.syscall
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self._req_addr = ctypes.c_void_p(base + 4 * REQ)
        self._rep_addr = ctypes.c_void_p(base + 4 * REP)
        self._slice = _Timespec(int(_SLICE), int((_SLICE % 1) * 1e9))
        self.spin = self.u32[SPIN_US] * 1e-6
        self.skip = 0  # requests still to await without spinning (after a spin in vain)
        self.backoff = SPIN_BACKOFF  # how many: doubled after each spin in vain, reset by one that paid
        self.last = self.u32[REQ]

    def wait(self) -> int:
        """The kind of the next request (SHM_STEP, SHM_SOCKET), or 0 once the library is gone."""
        u32, last = self.u32, self.last
        if u32[REQ] == last:
            spinning = self.spin > 0 and not self.skip
            self.skip = max(0, self.skip - 1)
            end = time.perf_counter() + (self.spin if spinning else 0.0)
            k = 0
            while u32[REQ] == last:
                k += 1
                if k & 63 == 0 and time.perf_counter() > end:
                    if spinning:  # in vain
                        self.skip = self.backoff
                        self.backoff, spinning = min(2 * self.backoff, SPIN_BACKOFF_MAX), False
                    if not self._sleep(last):
                        return 0
            if spinning:  # it paid
                self.backoff = SPIN_BACKOFF
        self.last = u32[REQ]
        return int(u32[KIND])

    def _sleep(self, last: int) -> bool:
        """Asleep on ``req`` for one slice; False when the socket shows end of file."""
        u32 = self.u32
        u32[WORKER_WAITS] = 1
        self._syscall(_SYS_FUTEX, self._req_addr, _FUTEX_WAIT, ctypes.c_uint32(last), ctypes.byref(self._slice),
                      None, 0)
        u32[WORKER_WAITS] = 0
        if u32[REQ] != last:
            return True
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not (readable and not _peek(self.sock))

    def step_request(self) -> tuple[int, list[int], list[float], list[float]]:
        """(flags, held input vrs, their values, [t, h]) of a SHM_STEP request."""
        u32, n = self.u32, self.u32[N_SET]
        vrs = u32[SHM_VR // 4:SHM_VR // 4 + n].tolist() if n else []
        vals = cast(list[float], self.f64[SHM_VAL // 8:SHM_VAL // 8 + n].tolist()) if n else []
        return int(u32[FLAGS]), vrs, vals, [float(self.f64[T_H]), float(self.f64[T_H + 1])]

    def reply_step(self, status: int, outputs: Any) -> bool:
        """Status and outputs into the page (False: they do not fit; reply on the socket)."""
        n = len(outputs)
        if n > SHM_MAX:
            return False
        if n:
            struct.pack_into(f"={n}d", self.map, SHM_OUT, *outputs)
        u32 = self.u32
        u32[STATUS], u32[N_OUT], u32[ON_SOCKET] = status, n, 0
        self._post()
        return True

    def reply_on_socket(self) -> None:
        """The reply has been written to the socket."""
        self.u32[ON_SOCKET] = 1
        self._post()

    def _post(self) -> None:
        u32 = self.u32
        u32[REP] = (u32[REP] + 1) & 0xFFFFFFFF
        self._syscall(_SYS_FUTEX, self._rep_addr, _FUTEX_WAKE, 1, None, None, 0)  # also the store-load barrier


def _peek(sock: int) -> bool:
    """Whether the socket holds data (False at end of file or on an error)."""
    import socket

    try:
        with socket.socket(fileno=os.dup(sock)) as s:
            return bool(s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False
