"""Bit-reproducibility of the kernels under a moving allocator: every kernel
family, called repeatedly with the same arguments while numpy arrays of
varied sizes are allocated in between, returns the same bits each time (the
network: O1 full and sampled, O2, HVP, loss; the linear model dense and CSR:
the same; the zeroth-order sum).  A kernel that read uninitialised memory or
summed in an order set by addresses would vary here."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpreg.problem import Problem, make_problem
from dpreg.registry import get_registry

REPEATS = 12


def _unit(rng, n, p):
    X = rng.standard_normal((n, p))
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]


def _families():
    reg = get_registry()
    rng = np.random.default_rng(7)
    fams = {}
    X = _unit(rng, 203, 5)
    y = np.where(rng.random(203) < 0.5, 1.0, -1.0)
    pb = make_problem(reg.get("loss", "mlp")(hidden=4), X, y)
    w, wp, V = 0.8 * rng.standard_normal(pb.d), 0.8 * rng.standard_normal(pb.d), rng.standard_normal(pb.d)
    idx = rng.integers(0, 203, 150)
    fams["mlp"] = lambda: [pb.clipped_grad_sum(w, None, 0.2)[0], pb.clipped_grad_sum(w, idx, 0.2)[0],
                           pb.clipped_diff_sum(w, wp, idx, 0.2)[0], pb.hvp(w, V), np.array([pb.value(w)])]
    Xl = _unit(rng, 3000, 23)
    yl = np.where(rng.random(3000) < 0.5, 1.0, -1.0)
    Xs = Xl.copy()
    Xs[np.abs(Xs) < 0.15] = 0.0
    wl, wlp, Vl = 0.3 * rng.standard_normal(23), 0.3 * rng.standard_normal(23), rng.standard_normal(23)
    il = np.sort(rng.integers(0, 3000, 700))
    U = rng.standard_normal((200, 3, 23))
    U /= np.linalg.norm(U, axis=2, keepdims=True)
    for name, data in (("linear dense", Xl), ("linear csr", sp.csr_matrix(Xs))):
        q = Problem(reg.get("loss", "logistic"), data, yl)
        fams[name] = (lambda q=q: [q.clipped_grad_sum(wl, None, 0.5)[0], q.clipped_grad_sum(wl, il, 0.5)[0],
                                   q.clipped_diff_sum(wl, wlp, il, 0.3)[0], np.array([q.value(wl)]),
                                   q.hvp(wl, Vl)])
    qd = Problem(reg.get("loss", "logistic"), Xl, yl)
    fams["zeroth-order"] = lambda: [qd.clipped_zo_sum(wl, wlp, U, il[:200], h=0.01, sgn=1.0, scale=1.0,
                                                      clip=0.5, rec_clip=1.0, sym=True)[0]]
    return fams


FAMILIES = _families()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_repeated_calls_give_the_same_bits_while_the_allocator_moves(name):
    f = FAMILIES[name]
    ref = f()
    keep = []
    for k in range(REPEATS):
        keep.append(np.empty(1 + (k * 37) % 61))  # the allocator's state moves between calls
        for a, b in zip(ref, f()):
            assert np.array_equal(a, b), name
