"""First-class function arguments of the kernels, unboxed in one pointer read.

The kernels take a loss's compiled functions (``dphi``, its block form, psi's
gradient) as first-class functions (:class:`numba.types.FunctionType`), so a
new loss adds no kernel compilation.  numba unboxes a first-class function
argument on *every* call, through Python (the function's address looked up
for the signature): tens of microseconds per argument on a call from Python,
more than the work of a small batch.

A :class:`FunctionRef` does that unboxing once: it is a numba ``StructRef``
(:mod:`numba.experimental.structref`) with one field, ``fn``, the first-class
function, filled by a small compiled constructor when the reference is made.
A kernel takes the reference (its numba type: :func:`RefFunctionType` of the
function's signature), is unboxed as any structref - a pointer read - and
calls ``ref.fn(...)``.  The reference keeps the compiled function it refers
to alive.

:func:`as_ref` turns a plain compiled function (a numba dispatcher, a
``cfunc``) into a reference, memoised, for callers that pass those.
"""
from __future__ import annotations

import functools

from numba import njit, types
from numba.experimental import structref

from .config import CACHE


@structref.register
class FunctionRefType(types.StructRef):
    """numba type of a :class:`FunctionRef`: one field, ``fn``, a first-class function."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(t)) for name, t in fields)


class FunctionRef(structref.StructRefProxy):
    """A compiled function as a first-class function argument of the kernels
    (see the module docstring): ``FunctionRef(dispatcher, signature)``.  In
    compiled code, ``ref.fn`` is the function (``ref.fn(x, y)`` calls it)."""

    def __new__(cls, dispatcher, signature):
        ref = _constructor(signature)(dispatcher, RefFunctionType(signature))
        ref.dispatcher = dispatcher  # keeps the machine code alive
        ref.sig = signature
        return ref

    def signature(self):
        """The function's numba signature."""
        return self.sig

    def __reduce__(self):  # a new reference in the unpickling process (pointers do not travel)
        return as_ref, (self.dispatcher, self.sig)


structref.define_boxing(FunctionRefType, FunctionRef)


@functools.cache
def RefFunctionType(signature) -> types.Type:
    """The numba type of a :class:`FunctionRef` to a function of ``signature``
    (what a kernel declares for such an argument)."""
    return FunctionRefType([("fn", types.FunctionType(signature))])


def _new(fn, ref_type):
    """A reference of ``ref_type`` to the first-class function ``fn`` (compiled per signature)."""
    ref = structref.new(ref_type)
    ref.fn = fn
    return ref


@functools.cache
def _constructor(signature):
    """The compiled :func:`_new` for ``signature`` (cached on disk; one per signature)."""
    T = RefFunctionType(signature)
    return njit(T(types.FunctionType(signature), types.TypeRef(T)), cache=CACHE)(_new)


_REFS: dict = {}


def as_ref(fn, signature):
    """``fn`` itself if it is a :class:`FunctionRef`, else a reference to it
    (a numba dispatcher or ``cfunc`` compiled for ``signature``), made once per
    function and signature."""
    if isinstance(fn, FunctionRef):
        return fn
    key = (fn, signature)
    ref = _REFS.get(key)
    if ref is None:
        ref = _REFS[key] = FunctionRef(fn, signature)
    return ref
