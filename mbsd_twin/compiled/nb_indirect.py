"""Calls through an address table: the stepper's right-hand side and projection compiled once.

numba compiles every function a caller uses into the caller's machine code, and each entry point
of the stepper (``start``, ``restart``, ``advance``) that unpacked the model (some sixty array
views) or called the physics paid for it again on a cold start. The stepper's own code therefore
calls the right-hand side and the projection through C function pointers (numba ``cfunc``,
compiled and cached once: ``nb_entries``) read from a small table at the head of the context
buffer ``cb``; the entry points pass the buffer on as an untyped pointer and never unpack the
model. An indirect call costs what the direct, not inlined, call did.

Layout of ``cb`` (int64), the table first (:data:`N_FN` words):

    RHS, PROJECT    the addresses of the two functions (``nb_entries.addresses``)
    CB              address and length (words) of ``cb`` itself
    U, IB, FB, WB   address and length of the inputs, the packed model and the scratch

then the context that ``nb_stepper.bind`` pins ((inputs, model, workspace) as owner-less views).
The functions behind the table take the table's address only: they find the arrays there, from
which numba derives the context's type (so their C signature is the same for every mechanism and
no type is needed to look them up in the cache). The owner (``fastpath.CompiledStepper``) fills
the table before a stepper entry point runs on the buffer, and keeps the arrays.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .nb_kernels import borrowed_value

__all__ = ["CB", "FB", "IB", "N_FN", "PROJECT", "RHS", "U", "WB", "call_project", "call_rhs", "f64_at", "i64_at",
           "pin_context", "pinned_context", "table"]

RHS, PROJECT, CB, U, IB, FB, WB = 0, 1, 2, 4, 6, 8, 10
N_FN = 12
_I64, _F64 = ir.IntType(64), ir.DoubleType()
_PF64, _PVOID = _F64.as_pointer(), ir.IntType(8).as_pointer()


def _data(context, builder, ty, value):  # noqa: ANN001, ANN202
    return context.make_array(ty)(context, builder, value=value).data


def _after_table(builder, base):  # noqa: ANN001, ANN202
    """The address of the context behind the table starting at ``base``."""
    return builder.gep(builder.bitcast(base, _I64.as_pointer()), [ir.Constant(_I64, N_FN)])


@intrinsic
def table(typingctx, cb):  # noqa: ANN001, ANN201
    """The head of the buffer ``cb`` (the address table, then the context) as an untyped pointer."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.bitcast(_data(context, builder, signature.args[0], args[0]), _PVOID)

    return types.voidptr(cb), codegen


@intrinsic
def pin_context(typingctx, cb, x):  # noqa: ANN001, ANN201
    """Store owner-less views of ``x`` in ``cb`` behind the table (``cb`` must hold
    ``8·N_FN + byte_size(x)`` bytes); their owner keeps the arrays while ``cb`` is used."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        at = _after_table(builder, _data(context, builder, signature.args[0], args[0]))
        ptr = builder.bitcast(at, context.get_value_type(signature.args[1]).as_pointer())
        builder.store(borrowed_value(context, builder, signature.args[1], args[1]), ptr)
        return context.get_dummy_value()

    return types.none(cb, x), codegen


@intrinsic
def pinned_context(typingctx, cb, like):  # noqa: ANN001, ANN201
    """A typed pointer to what :func:`pin_context` stored (``like``: an expression of its type,
    not evaluated at run time beyond what the compiler cannot drop)."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        at = _after_table(builder, _data(context, builder, signature.args[0], args[0]))
        return builder.bitcast(at, context.get_value_type(signature.args[1]).as_pointer())

    return types.CPointer(like)(cb, like), codegen


@intrinsic
def f64_at(typingctx, address):  # noqa: ANN001, ANN201
    """The float64 pointer at the integer ``address`` (for ``numba.carray``)."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.inttoptr(args[0], _PF64)

    return types.CPointer(types.float64)(address), codegen


@intrinsic
def i64_at(typingctx, address):  # noqa: ANN001, ANN201
    """The int64 pointer at the integer ``address``, or at the untyped pointer ``address``."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        if isinstance(signature.args[0], types.RawPointer):
            return builder.bitcast(args[0], _I64.as_pointer())
        return builder.inttoptr(args[0], _I64.as_pointer())

    return types.CPointer(types.int64)(address), codegen


def _entry(builder, base, k, fnty):  # noqa: ANN001, ANN202
    slot = builder.gep(builder.bitcast(base, _I64.as_pointer()), [ir.Constant(_I64, k)])
    return builder.inttoptr(builder.load(slot), fnty.as_pointer())


@intrinsic
def call_rhs(typingctx, t, y, dy, tb):  # noqa: ANN001, ANN201
    """dy/dt at (t, y) into ``dy`` through the :data:`RHS` entry of the table ``tb``
    (:func:`table`); 1 when it succeeded, else 0. ``y``, ``dy``: contiguous float64 vectors of
    equal length."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        tv, yv, dyv, base = args
        fnty = ir.FunctionType(_I64, [_F64, _PF64, _PF64, _I64, _PVOID])
        ya = context.make_array(signature.args[1])(context, builder, value=yv)
        return builder.call(_entry(builder, base, RHS, fnty),
                            [tv, ya.data, _data(context, builder, signature.args[2], dyv), ya.nitems, base])

    return types.intp(t, y, dy, tb), codegen


@intrinsic
def call_project(typingctx, t, y, tol, tb):  # noqa: ANN001, ANN201
    """The projection of y in place (tolerance ``tol``) through the :data:`PROJECT` entry of the
    table ``tb``; 1 when it succeeded, else 0."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        tv, yv, tolv, base = args
        fnty = ir.FunctionType(_I64, [_F64, _PF64, _I64, _F64, _PVOID])
        ya = context.make_array(signature.args[1])(context, builder, value=yv)
        return builder.call(_entry(builder, base, PROJECT, fnty), [tv, ya.data, ya.nitems, tolv, base])

    return types.intp(t, y, tol, tb), codegen

