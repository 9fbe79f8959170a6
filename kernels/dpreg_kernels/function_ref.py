"""First-class function arguments of the kernels, unboxed in one attribute read.

The kernels take a loss's compiled functions (``dphi``, its block form, psi's
gradient) as first-class function arguments, so a new loss adds no kernel
compilation.  numba's own unboxing of a first-class function argument
(``numba.experimental.function_type.unbox_function_type``) runs, on *every*
kernel call and for every such argument, a module import, two unpickled
signatures and two Python calls (the wrapper address, then the JIT address):
about 3 us per argument, 6-7 us of the 7 us a two-function kernel call costs
from Python on a 4-row batch (measured: ``benchmarks/bench_kernels.py``,
``test_function_ref_dispatch``).

:class:`FunctionRef` stores the compiled wrapper's address once, and its numba
type :class:`RefFunctionType` (a :class:`numba.types.FunctionType` with the same
data model and calling convention) is unboxed by reading that address from the
object: one attribute read.  Any other object passed where a
:class:`RefFunctionType` is expected (a plain numba dispatcher, a ``cfunc``)
takes numba's own unboxing, so every caller that passed dispatchers still works.
The kernels' signatures (:data:`dpreg_kernels.linear_model.ScalarFn`,
``BlockFn``, :data:`dpreg_kernels.sgd.PsiFn`) are of this type.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import NativeValue, register_model, typeof_impl, unbox
from numba.experimental.function_type import FunctionModel, unbox_function_type

#: name of the attribute holding the compiled wrapper's address (an int)
ADDRESS_ATTR = "_dpreg_wrapper_address"


class RefFunctionType(types.FunctionType):
    """numba type of a first-class function argument passed as a
    :class:`FunctionRef` (fast unboxing; see the module docstring)."""


register_model(RefFunctionType)(FunctionModel)


class FunctionRef(types.WrapperAddressProtocol):
    """A compiled function as a first-class function argument of the kernels:
    the address of its C wrapper for ``signature``, looked up once here
    (compiling the dispatcher for that signature if needed)."""

    def __init__(self, dispatcher, signature):
        from numba.experimental.function_type import _get_wrapper_address

        self.dispatcher = dispatcher  # keeps the machine code alive
        self._sig = signature
        self._type = RefFunctionType(signature)
        setattr(self, ADDRESS_ATTR, _get_wrapper_address(dispatcher, signature))

    def __wrapper_address__(self):
        return getattr(self, ADDRESS_ATTR)

    def signature(self):
        return self._sig


@typeof_impl.register(FunctionRef)
def _typeof_function_ref(val, c):
    return val._type


@unbox(RefFunctionType)
def _unbox_ref(typ, obj, c):
    """A :class:`FunctionRef`: its stored wrapper address (no JIT address: calls
    go through the C wrapper, as numba's unboxing of a wrapper-address object
    does); anything else: numba's own unboxing."""
    ctx, builder, api = c.context, c.builder, c.pyapi
    out = cgutils.alloca_once(builder, ctx.get_value_type(typ))
    addr = api.object_getattr_string(obj, ADDRESS_ATTR)
    with builder.if_else(cgutils.is_null(builder, addr), likely=False) as (generic, fast):
        with fast:
            s = cgutils.create_struct_proxy(typ)(ctx, builder)
            fields = set(ctx.data_model_manager[typ]._fields)  # noqa: SLF001 - named as numba < 0.61 or >= 0.61 names them
            setattr(s, "c_addr" if "c_addr" in fields else "addr", api.long_as_voidptr(addr))
            api.decref(addr)
            voidptr = ctx.get_value_type(types.voidptr)
            # as numba's unbox_function_type stores it
            setattr(s, "py_addr" if "py_addr" in fields else "pyaddr", builder.ptrtoint(obj, voidptr))
            if "jit_addr" in fields:  # numba >= 0.61: no JIT address, the C wrapper is called
                s.jit_addr = ir.Constant(voidptr, None)
            builder.store(s._getvalue(), out)
        with generic:
            api.err_clear()  # no such attribute: not a FunctionRef
            builder.store(unbox_function_type(typ, obj, c).value, out)
    return NativeValue(builder.load(out))
