"""A software prefetch for numba kernels (``replaybank[fast]``): ``prefetch(array, i)`` asks the
CPU to start loading the cache line of ``array[i]`` and returns at once.

Why: a batch of tree walks goes level by level, so as soon as a walk has picked its child at one
level, the address it will read at the next level is known, a whole batch (256 walks) before it
is read. Issuing the load then lets the misses of all 256 walks overlap; without it, out-of-order
execution overlaps only the few walks that fit in its window. A prefetch never faults and has no
effect on results: an index past the array only wastes the hint.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx: Any, arr: Any, index: Any) -> Any:
    """``llvm.prefetch`` of ``arr[index]`` (read, keep in all cache levels)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(index, types.Integer)):
        return None
    sig = types.void(arr, index)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], idxty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i], wraparound=False)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, high locality, data cache
        return context.get_dummy_value()

    return sig, codegen
