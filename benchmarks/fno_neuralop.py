"""``models.fno_neuralop`` against the NeuralOperator library's FNO that the continuum-attention paper trains.

    python -m benchmarks.fno_neuralop --library DIR --pythonpath DEPS [--out benchmarks/results/fno_neuralop.json]

``DIR`` is a checkout of github.com/neuraloperator/neuraloperator at tag 1.0.0 made *outside* this repository, and
``DEPS`` a folder holding its tensor packages (``pip install --target DEPS tensorly tensorly-torch opt_einsum
--no-deps``); nothing of either is copied here. Only the library's FNO and its layers are loaded: its package
``__init__`` files (which import its datasets, training loops and spherical layers) are not run, and the optional
packages its FNO never calls (``wandb``, ``torch_harmonics``) are empty stand-ins.

1. Parameters: the library's ``FNO(n_modes=(12, 12), hidden_channels=128, in_channels=1, out_channels=1)`` (its
   defaults otherwise: channel MLPs, soft-gating and linear skips, the grid appended) counts a complex weight once;
   the continuum paper's Table 1 gives 5.70e6. Ours counts real and imaginary parts apart.
2. Equivalence: the library's weights set at random (N(0, 0.1^2): every term matters) and copied into ours
   (:func:`copy_library_weights`), one forward of a batch of 2 random fields on 64 x 64 and 48 x 48, our coordinates
   the library's grid (``linspace(0, 1, n + 1)[:-1]`` per axis); the largest difference over the largest output.
   In float32: the library forms its spectral product in complex64 whatever the input. A control copies the two
   frequency blocks swapped: the difference it gives is what a wrong copy looks like.

``--smoke`` (``opflow bench --smoke``, no library needed): our side only, the parameter counts and one forward on
16 x 16, into ``benchmarks/results/smoke/``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic

OUT = Path(__file__).resolve().parent / "results" / "fno_neuralop.json"
#: the library's FNO as the continuum paper configures it (12 modes, width 128), on one input channel
LIBRARY_ARGS = {"n_modes": (12, 12), "hidden_channels": 128, "in_channels": 1, "out_channels": 1}
#: a full run needs the library's checkout (opflow.bench: skipped without it)
BENCH_REQUIRES = ["--library"]
STAND_INS = ("wandb", "torch_harmonics", "torch_harmonics.examples", "torch_harmonics.quadrature")


def load_library_fno(library: Path, pythonpath: list[Path]) -> type:
    """``neuralop.models.fno.FNO`` of the checkout ``library``, without running the package's ``__init__`` files."""
    sys.path[:0] = [str(p) for p in pythonpath]
    for name in STAND_INS:  # imported at module level by layers the FNO does not use
        mod = types.ModuleType(name)
        mod.__getattr__ = lambda attr: None  # type: ignore[method-assign]  # every name they import: a placeholder
        sys.modules.setdefault(name, mod)
    for pkg in ("neuralop", "neuralop.models", "neuralop.layers"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(library / Path(*pkg.split(".")))]
        sys.modules[pkg] = mod
    return importlib.import_module("neuralop.models.fno").FNO


def copy_library_weights(lib: torch.nn.Module, ours: torch.nn.Module, swap_blocks: bool = False) -> None:
    """The library's weights into ours. Its spectral weight ``(in, out, 12, 7)`` holds the first axis's frequencies
    fftshifted, -6 .. 5: indices 6..11 are our non-negative block (0 .. 5), 0..5 our negative one (-6 .. -1). Its
    spectral convolution's bias becomes our linear skip's (its skip has none: the same sum)."""
    with torch.no_grad():
        for mine, theirs in ((ours.lift[0], lib.lifting.fcs[0]), (ours.lift[2], lib.lifting.fcs[1]),
                             (ours.proj[0], lib.projection.fcs[0]), (ours.proj[2], lib.projection.fcs[1])):
            mine.weight.copy_(theirs.weight[..., 0])
            mine.bias.copy_(theirs.bias)
        for i, layer in enumerate(ours.layers):
            w = lib.fno_blocks.convs[i].weight.to_tensor()
            pos, neg = (slice(0, 6), slice(6, 12)) if swap_blocks else (slice(6, 12), slice(0, 6))
            layer.spectral.weights[0].copy_(torch.view_as_real(w[:, :, pos, :]))
            layer.spectral.weights[1].copy_(torch.view_as_real(w[:, :, neg, :]))
            layer.pointwise.weight.copy_(lib.fno_blocks.fno_skips[i].conv.weight)
            layer.pointwise.bias.copy_(lib.fno_blocks.convs[i].bias.reshape(-1))
            mlp = lib.fno_blocks.channel_mlp[i].fcs
            for mine, theirs in ((ours.channel_mlps[i][0], mlp[0]), (ours.channel_mlps[i][2], mlp[1])):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
            ours.gates[i].copy_(lib.fno_blocks.channel_mlp_skips[i].weight.reshape(1, -1, 1))


def relative_difference(lib: torch.nn.Module, ours: torch.nn.Module, n: int, seed: int = 0) -> dict[str, float]:
    """max |ours - library| / max |library| for one batch of 2 random fields on the n x n grid."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(2, 1, n, n, generator=g)
    t = torch.linspace(0, 1, n + 1)[:-1]
    x, y = torch.meshgrid(t, t, indexing="ij")
    coords = torch.stack([x, y], -1).reshape(1, -1, 2).expand(2, -1, -1)
    with torch.no_grad():
        want = lib(a)
        got = ours(coords, a.reshape(2, 1, -1).transpose(1, 2), grid_shape=(n, n)).transpose(1, 2).reshape(2, 1, n, n)
    return {"max_abs_diff_over_max_abs": float((got - want).abs().max() / want.abs().max()), "max_abs_output": float(want.abs().max())}


def _ours() -> tuple[torch.nn.Module, int]:
    """``models.fno_neuralop`` of config/default.yaml on one input channel and its complex spectral weights' count."""
    from opflow.config import load_config_files
    from opflow.models import build_model

    entry = {k: v for k, v in load_config_files([OUT.parents[2] / "config" / "default.yaml"])["models"]["fno_neuralop"].items() if k != "training"}
    ours = build_model(entry, 1, 1, 2)
    return ours, sum(p.numel() for layer in ours.layers for p in layer.spectral.parameters()) // 2


def _smoke(out: Path) -> int:
    from opflow.models import count_parameters

    ours, spectral = _ours()
    t = torch.linspace(0, 1, 17)[:-1]
    x, y = torch.meshgrid(t, t, indexing="ij")
    with torch.no_grad():
        shape = tuple(ours(torch.stack([x, y], -1).reshape(1, -1, 2), torch.randn(1, 256, 1), grid_shape=(16, 16)).shape)
    write_json_atomic(out, {"benchmark": "fno_neuralop", "created": utc_timestamp(), "smoke": True,
                            "parameters": {"ours_real_pairs": count_parameters(ours), "ours_complex_once": count_parameters(ours) - spectral},
                            "output_shape": list(shape)})
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", type=Path, default=None, help="a checkout of neuraloperator at tag 1.0.0, outside this repository; required unless --smoke")
    ap.add_argument("--pythonpath", type=Path, action="append", default=[], help="folder with tensorly, tensorly-torch (tltorch), opt_einsum")
    ap.add_argument("--out", type=Path, default=None, help=f"default {OUT.relative_to(OUT.parents[2])} (smoke: benchmarks/results/smoke/)")
    ap.add_argument("--smoke", action="store_true", help="our side only (parameters, one forward at 16 x 16): checks that it runs, asserts nothing")
    a = ap.parse_args(argv)
    a.out = a.out or (OUT.parent / "smoke" / OUT.name if a.smoke else OUT)
    if a.smoke:
        return _smoke(a.out)
    if a.library is None:
        ap.error("--library is required (a checkout of neuraloperator at tag 1.0.0); only --smoke runs without it")
    if not (a.library / "neuralop" / "models" / "fno.py").is_file():
        ap.error(f"--library {a.library}: no neuralop/models/fno.py there; check out github.com/neuraloperator/neuraloperator at tag 1.0.0")
    from opflow.models import count_parameters

    load_start = loadavg()
    torch.manual_seed(0)
    lib_fno = load_library_fno(a.library, a.pythonpath)
    lib = lib_fno(**LIBRARY_ARGS)
    with torch.no_grad():
        for p in lib.parameters():
            p.copy_(torch.randn_like(p) * 0.1)
    ours, spectral = _ours()
    result: dict[str, Any] = {
        "benchmark": "fno_neuralop",
        "created": utc_timestamp(),
        "library": {"checkout": "neuraloperator (tag 1.0.0)", "args": {k: list(v) if isinstance(v, tuple) else v for k, v in LIBRARY_ARGS.items()}},
        "parameters": {"library": sum(p.numel() for p in lib.parameters()), "ours_real_pairs": count_parameters(ours),
                       "ours_complex_once": count_parameters(ours) - spectral, "paper_table_1": 5.70e6},
    }
    copy_library_weights(lib, ours)
    result["equivalence_float32"] = {str(n): relative_difference(lib, ours, n) for n in (64, 48)}
    copy_library_weights(lib, ours, swap_blocks=True)
    result["control_blocks_swapped"] = {str(n): relative_difference(lib, ours, n) for n in (64, 48)}
    result["machine"] = machine(load_start, packages=("torch", "tensorly", "tensorly-torch"))
    write_json_atomic(a.out, result)
    print(json.dumps({k: result[k] for k in ("parameters", "equivalence_float32", "control_blocks_swapped")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
