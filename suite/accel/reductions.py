"""numpy reductions that equal numpy's own bit for bit, without its Python wrappers.

Why: the shared loop normalises each minibatch's advantages, averages a loss's terms and an update's gradient norms
on arrays of a few hundred values, where ``np.mean``'s and ``np.std``'s Python layers cost several times the
arithmetic. These functions take numpy's own steps (the same pairwise ``add.reduce``, the same float64 divisions
cast back), so every value is numpy's (tested bit for bit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_add_reduce = np.add.reduce

try:
    from numpy._core.umath import clip as fast_clip  # type: ignore[attr-defined]  # np.clip's ufunc, no wrappers
except ImportError:  # pragma: no cover - numpy < 2 or a moved module: the public function, the same values
    fast_clip = np.clip


def fast_mean(a: np.ndarray) -> Any:
    """``a.mean()`` over every element, bitwise: numpy's own steps (the same pairwise ``add.reduce``, the sum divided
    in float64 and cast back to ``a``'s float dtype; booleans and integers summed in float64) without ``np.mean``'s
    Python wrapper, which costs several times these calls (a minibatch takes several means)."""
    if a.dtype.kind in "biu":
        return np.float64(float(_add_reduce(a, axis=None, dtype=np.float64)) / a.size)
    s = _add_reduce(a, axis=None)
    return s.dtype.type(float(s) / a.size)


def fast_std(a: np.ndarray, ddof: int = 0) -> Any:
    """``a.std(ddof=ddof)`` of a float array over every element, bitwise (numpy's ``_var`` step by step: mean as in
    :func:`fast_mean`, squared deviations, their sum divided in float64 by ``n - ddof``, square root in ``a``'s
    dtype)."""
    if a.dtype.kind != "f":
        raise TypeError("fast_std takes a float array")
    x = a - fast_mean(a)
    return _std_from_squares(np.multiply(x, x, out=x), a.size - ddof)


def fast_var(a: np.ndarray, ddof: int = 0) -> Any:
    """``a.var(ddof=ddof)`` of a float array over every element, bitwise (:func:`fast_std` without the square root;
    more elements than ``ddof``)."""
    if a.dtype.kind != "f":
        raise TypeError("fast_var takes a float array")
    x = a - fast_mean(a)
    return _var_from_squares(np.multiply(x, x, out=x), a.size - ddof)


def _var_from_squares(squares: np.ndarray, dof: int) -> Any:
    """The last steps of :func:`fast_var`, from the squared deviations ``(a - mean(a))^2``: their sum divided in
    float64 by ``dof``, in ``a``'s dtype."""
    s = _add_reduce(squares, axis=None)
    return s.dtype.type(float(s) / max(dof, 0))


def _std_from_squares(squares: np.ndarray, dof: int) -> Any:
    """The last steps of :func:`fast_std`, from the squared deviations ``(a - mean(a))^2``."""
    v = _var_from_squares(squares, dof)
    return v.dtype.type(np.sqrt(v))


def fast_normalize(a: np.ndarray, eps: float) -> np.ndarray:
    """``(a - a.mean()) / (a.std(ddof=1) + eps)`` bitwise (:func:`fast_mean`, :func:`fast_std`), with the mean and
    the deviations computed once instead of twice."""
    x = a - fast_mean(a)
    return x / (_std_from_squares(x * x, a.size - 1) + eps)


def fast_normalize_rows(a: np.ndarray, eps: float) -> np.ndarray:
    """:func:`fast_normalize` of every row of a float array ``(m, b)``, ``b > 1``, bitwise, in one set of calls for
    all rows: numpy sums each row of a contiguous array along its last axis as it sums the row alone (the same
    pairwise loop), and the divisions in float64 cast back to ``a``'s dtype are :func:`fast_mean`'s (an update's
    minibatches normalised in one set of calls instead of one per minibatch)."""
    a = np.ascontiguousarray(a)
    b = a.shape[1]
    mean = (_add_reduce(a, axis=1).astype(np.float64) / b).astype(a.dtype)
    x = a - mean[:, None]
    std = np.sqrt((_add_reduce(x * x, axis=1).astype(np.float64) / (b - 1)).astype(a.dtype))
    return x / (std + eps)[:, None]
