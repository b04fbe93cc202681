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
