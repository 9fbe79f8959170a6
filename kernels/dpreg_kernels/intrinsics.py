"""Low-level helpers numba does not expose, written with numba's public
extension API (:func:`numba.extending.intrinsic`, code generated with
llvmlite's IR builder).

:func:`prefetch` emits LLVM's ``llvm.prefetch`` (x86 ``prefetcht0``) for the
cache line holding element ``j`` of a 1-D array.  The gather kernels use it to
ask for the rows of the *next* block of a sampled batch while the current block
is being processed, so random row reads overlap with arithmetic.  A prefetch
never faults and never changes a result: it is a hint.

:func:`float_from_bits` reinterprets an int64 as the float64 with those IEEE-754
bits (LLVM's ``bitcast``: no instruction on x86, and it vectorises), for
:func:`dpreg_kernels.vmath.exp_nonpos`'s ``2^k``.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, j):
    """Hint: bring the cache line of ``arr[j]`` into all cache levels (read)."""
    if not isinstance(arr, types.Array) or not isinstance(j, types.Integer):
        return None
    sig = types.void(arr, j)

    def codegen(context, builder, signature, args):
        a, jj = args
        ary = context.make_array(signature.args[0])(context, builder, a)
        jj = context.cast(builder, jj, signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [jj])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        mod = builder.module
        name = "llvm.prefetch.p0"
        fn = mod.globals.get(name)
        if fn is None:
            fn = ir.Function(mod, fnty, name=name)
        # (address, rw=0 read, locality=3 keep in all levels, cache type=1 data)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def float_from_bits(typingctx, b):
    """The float64 whose IEEE-754 bit pattern is the int64 ``b``."""
    if not isinstance(b, types.Integer):
        return None
    sig = types.float64(b)

    def codegen(context, builder, signature, args):
        v = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.bitcast(v, ir.DoubleType())

    return sig, codegen
