"""What the library needs to know about the two array types it accepts, numpy arrays and
torch tensors, in one place: recognising them, their dtype name, their size in bytes, and
a flat contiguous working view."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def is_tensor(x: Any) -> bool:
    """True for a torch tensor (without importing torch when it is not in use)."""
    if "torch" not in sys.modules:
        return False
    import torch

    return isinstance(x, torch.Tensor)


def is_array(x: Any) -> bool:
    """True for a numpy array or a torch tensor."""
    return isinstance(x, np.ndarray) or is_tensor(x)


_DTYPE_NAMES: dict[Any, str] = {}  # numpy builds dtype.name in Python: ~4 µs a call


def dtype_name(x) -> str:
    """The dtype as a plain name, e.g. ``"float32"``, for numpy and torch alike."""
    dtype = x.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = dtype.name if isinstance(x, np.ndarray) else str(dtype).removeprefix("torch.")
        _DTYPE_NAMES[dtype] = name
    return name


def count(x) -> int:
    """Number of elements."""
    return x.size if isinstance(x, np.ndarray) else x.numel()


def nbytes(x) -> int:
    """Size in bytes."""
    return x.nbytes if isinstance(x, np.ndarray) else x.numel() * x.element_size()


def problem(x, name: str = "x", *, written: bool = False) -> str | None:
    """Why the algorithms cannot take ``x`` although its type and dtype are right, or
    ``None``: a numpy subclass whose flat view is not 1-D (``np.matrix``) or that carries
    more than its values (a masked array's mask); bytes in the other byte order, which
    ranks would read as their own; and, for an array the call writes, memory it may not
    write (read-only, or several elements on one address, as ``np.broadcast_to`` and
    ``Tensor.expand`` make)."""
    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray and (isinstance(x, (np.matrix, np.ma.MaskedArray))):
            return (f"{name} must be a plain numpy.ndarray, got {type(x).__name__} "
                    f"(pass np.asarray({name}))")
        if not x.dtype.isnative:
            return (f"{name} has the non-native byte order {x.dtype.str!r}: convert it with "
                    f"{name}.astype({name}.dtype.newbyteorder('='))")
        if written and not x.flags.writeable:
            return f"{name} is read-only, and the call writes into it"
        strides = x.strides
    else:
        import torch

        if x.layout != torch.strided:  # sparse COO has strides (0,) in torch 2.13: not enough
            return (f"{name} must be a dense tensor, got layout {x.layout} (for a sparse "
                    "one, allreduce.sparse_allreduce)")
        try:
            strides = x.stride()
        except RuntimeError:  # another unstrided tensor
            return f"{name} must be a dense tensor, got layout {x.layout}"
    # an empty array may have zero strides (numpy gives them): it has no address to share
    if written and any(stride == 0 and size > 1 for size, stride in zip(x.shape, strides)) \
            and all(x.shape):
        return (f"{name} has several elements on one address (a broadcast or expanded view), "
                "and the call writes into it")
    return None


def overlaps(a, b) -> bool:
    """Whether ``a`` and ``b`` may share memory (a bounds test: it may say yes for
    interleaved views that share no element)."""
    if isinstance(a, np.ndarray):
        return np.may_share_memory(a, b)
    if a.device != b.device or not a.numel() or not b.numel():
        return False
    start_a, start_b = a.data_ptr(), b.data_ptr()
    end_a = start_a + _span(a) * a.element_size()
    end_b = start_b + _span(b) * b.element_size()
    return start_a < end_b and start_b < end_a


def _span(t) -> int:
    """Elements from a tensor's first to one past its last (non-negative strides)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


def is_contiguous(x) -> bool:
    return x.flags.c_contiguous if isinstance(x, np.ndarray) else x.is_contiguous()


def flat_view(x):
    """A 1-D view on the memory of a C-contiguous array or tensor (no copy)."""
    return x.reshape(-1) if isinstance(x, np.ndarray) else x.detach().view(-1)


def host_view(x):
    """A numpy array sharing the memory of ``x`` (a numpy array or a CPU tensor), or
    ``None`` for a tensor on a GPU."""
    if isinstance(x, np.ndarray):
        return x
    return None if x.is_cuda else x.detach().numpy()


def new_like(x):
    """A new contiguous array or tensor of ``x``'s shape, dtype (and device)."""
    if isinstance(x, np.ndarray):
        return np.empty(x.shape, dtype=x.dtype)
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def copy_into(dst, src) -> None:
    """``dst[...] = src`` for two arrays or two tensors of the same shape."""
    if isinstance(dst, np.ndarray):
        np.copyto(dst, src)
    else:
        dst.detach().copy_(src.detach())


def device(x) -> str:
    """``"cpu"`` for numpy arrays, the device of a tensor otherwise."""
    return "cpu" if isinstance(x, np.ndarray) else str(x.device)
