"""Shared pieces of the learning-side tests: a tiny registered model and small synthetic datasets.

The dataset is a linear operator on a periodic grid: ``a`` is a smooth random field (a few
Fourier modes) and ``u`` its heat-kernel smoothing ``u_hat = exp(-k^2 t) a_hat`` plus ``a`` itself
(so a pointwise model can learn part of it and a loss curve has somewhere to go).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from opflow.data.format import Variable, split_variable, write_dataset
from opflow.data.provenance import provenance_attrs, sample_rng
from opflow.models.base import OperatorModel, register
from opflow.models.hparams import Hparams
from opflow.schema import NonNegFloat, PosInt

TEST_ARCH = "_test_point_mlp"


class PointMLPHparams(Hparams):
    width: PosInt = 16
    dropout: NonNegFloat = 0.0


@register(TEST_ARCH)
class PointMLP(OperatorModel):
    """A pointwise MLP on (coordinates, input features); ignores the other points and the mask."""

    Hparams = PointMLPHparams

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, *, width: int, dropout: float) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        self.net = nn.Sequential(
            nn.Linear(in_channels + coord_dim, width), nn.GELU(), nn.Dropout(dropout), nn.Linear(width, width), nn.GELU(), nn.Linear(width, out_channels)
        )

    def forward(self, coords, inputs, query=None, mask=None, grid_shape=None):  # type: ignore[override]
        return self.net(torch.cat([coords, inputs], dim=-1))


def smooth_fields(n: int, s: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``(a, u)`` of shape (n, s, s): smooth random ``a`` and ``u = a + heat-smoothed a``."""
    k = np.fft.fftfreq(s, 1.0 / s)
    kx, ky = np.meshgrid(k, k, indexing="ij")
    k2 = kx**2 + ky**2
    a = np.empty((n, s, s))
    for i in range(n):
        rng = sample_rng(seed, i)
        coef = (rng.standard_normal((s, s)) + 1j * rng.standard_normal((s, s))) * np.exp(-k2 / 8.0)
        a[i] = np.real(np.fft.ifft2(coef)) * s
    u = a + np.real(np.fft.ifft2(np.fft.fft2(a) * np.exp(-0.05 * k2)))
    return a.astype(np.float32), u.astype(np.float32)


def grid_dataset(path: Path, n_train: int = 12, n_test: int = 4, s: int = 16, seed: int = 3, n_val: int = 0) -> Path:
    """A derived-looking grid dataset file with train / val / test splits."""
    n = n_train + n_val + n_test
    a, u = smooth_fields(n, s, seed)
    x = np.linspace(0.0, 1.0, s)
    y = np.linspace(0.0, 2.0, s)  # a different y range: catches axis mix-ups
    codes = np.array([0] * n_train + [2] * n_val + [1] * n_test, dtype=np.int8)
    v = {
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1", "long_name": "x"}),
        "y": Variable(("y",), y, {"role": "coordinate", "units": "1", "long_name": "y"}),
        "sample_index": Variable(("sample",), np.arange(n, dtype=np.int64)),
        "split": split_variable(codes),
        "coeff": Variable(("sample", "x", "y"), a, {"role": "input", "units": "1", "long_name": "input field"}),
        "sol": Variable(("sample", "x", "y"), u, {"role": "output", "units": "1", "long_name": "output field"}),
    }
    attrs = provenance_attrs("test-smooth", {"s": s, "seed": seed}, seed)
    attrs["opflow_resolution"] = s
    return write_dataset(path, v, attrs)


def cloud_dataset(path: Path, counts: list[int], n_test: int = 1, code: bool = False) -> Path:
    """Point clouds of ``counts`` points each (padded storage, ``node_count``), output ``u = sin 3x + y``;
    with ``code`` a 2-value per-sample global input ``code``. Equal counts make a uniform split."""
    rng = np.random.default_rng(0)
    n, pad = len(counts), max(counts)
    xs, ys, us = (np.zeros((n, pad)) for _ in range(3))
    for i, c in enumerate(counts):
        xs[i, :c], ys[i, :c] = rng.uniform(0, 1, c), rng.uniform(0, 1, c)
        us[i, :c] = np.sin(3 * xs[i, :c]) + ys[i, :c]
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - n_test) + [1] * n_test, np.int8)),
        "node_count": Variable(("sample",), np.array(counts, np.int32), {"role": "auxiliary"}),
        "node_x": Variable(("sample", "node"), xs, {"role": "coordinate", "units": "1", "long_name": "x"}),
        "node_y": Variable(("sample", "node"), ys, {"role": "coordinate", "units": "1", "long_name": "y"}),
        "u": Variable(("sample", "node"), us, {"role": "output", "units": "1", "long_name": "u"}),
    }
    if code:
        v["code"] = Variable(("sample", "k"), rng.uniform(0, 1, (n, 2)), {"role": "input", "units": "1", "long_name": "code"})
    return write_dataset(path, v, provenance_attrs("test-cloud", {}, 0))


def trajectory_dataset(path: Path, n: int = 10, n_test: int = 4, frames: int = 9, s: int = 8) -> Path:
    """Advected sine waves on a periodic s x s grid: frame k+1 is frame k shifted by one cell."""
    x = np.arange(s) / s
    ph = np.arange(n)[:, None, None, None] * 0.7
    k = np.arange(frames)[None, :, None, None]
    w = np.sin(2 * np.pi * (x[None, None, :, None] - k / s) + ph) * np.cos(2 * np.pi * x[None, None, None, :])
    grid = {"role": "coordinate", "units": "1", "grid_type": "periodic"}
    v = {
        "t": Variable(("t",), np.arange(frames, dtype=float), {"role": "coordinate", "units": "s"}),
        "x": Variable(("x",), x, grid),
        "y": Variable(("y",), x.copy(), grid),
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - n_test) + [1] * n_test, np.int8)),
        "vorticity": Variable(("sample", "t", "x", "y"), w.astype(np.float32), {"role": "output", "units": "1/s", "long_name": "w"}),
    }
    return write_dataset(path, v, provenance_attrs("test-advect", {}, 0))


def tiny_config(epochs: int = 3, **training) -> dict:
    """A workflow config with one dataset and the tiny model (paths filled in by the tests).

    A whole config, as the workflow checks it (``opflow train --config`` runs the same checks): the
    dataset's source is a real generator's 16 x 16 grid (nothing is generated; the tests write the
    file :func:`grid_dataset`)."""
    return {
        "sources": {"toy_src": {"solver": "darcy_fd", "n_samples": 16, "seed": 0, "params": {"resolution": 16}}},
        "datasets": {"toy": {"source": "toy_src", "resolution": 16, "train": 12, "test": 4}},
        "models": {"mlp": {"arch": TEST_ARCH, "width": 16}},
        "training": {"epochs": epochs, "batch_size": 4, "seed": 0, "device": "cpu", "threads": 1, **training},
    }


#: a tiny ONO for the training tests
ONO_TINY = {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2}


def toy_run(data: Path, model: str = "mlp", dropout: float | None = None, **training) -> dict:
    """The resolved run of ``model`` (the tiny ``mlp`` or :data:`ONO_TINY`) on the toy dataset file ``data``;
    ``dropout`` sets the mlp's (a random stream a resumed or device-fed run must reproduce)."""
    from opflow.config import resolve_run

    cfg = tiny_config(**training)
    cfg["models"]["ono"] = ONO_TINY
    run = resolve_run(cfg, "toy", model, str(data))
    if dropout is not None:
        run["model_config"]["dropout"] = dropout
    return run
